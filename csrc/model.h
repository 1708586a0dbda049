// The loaded model: hyper-parameters, weight tensors in backend buffers, vocabulary.
#pragma once

#include "gguf/gguf_split.h"
#include "pyllamaspec.h"

#include "ggml.h"
#include "ggml-backend.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace psl {

class Vocab;
struct ArchOps;

struct HParams {
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;
    int32_t n_embd = 0;
    int32_t n_layer = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;
    int32_t n_embd_head_k = 0;
    int32_t n_embd_head_v = 0;
    int32_t n_ff = 0;
    int32_t n_rot = 0;
    float   rope_freq_base = 10000.0f;
    float   rope_freq_scale = 1.0f;
    float   norm_eps = 1e-5f;
    // Sliding-window attention (0 = none): window length, and which layers use it.
    int32_t n_swa = 0;
    float   rope_freq_base_swa = 10000.0f;
    std::vector<bool> swa_layers;
    float   attn_scale = 0.0f;   // 0 = 1/sqrt(n_embd_head_k)
    float   final_logit_softcap = 0.0f;   // logits = c * tanh(logits / c) when > 0
    // Mixture of experts (n_expert 0: a dense model): experts per layer, experts per token,
    // their FFN width, the shared expert's width; routing weights renormalized over the
    // selected experts and/or scaled (scale 0 or 1: none).
    int32_t n_expert = 0;
    int32_t n_expert_used = 0;
    int32_t n_ff_exp = 0;
    int32_t n_ff_shexp = 0;
    bool    expert_weights_norm = false;
    float   expert_weights_scale = 0.0f;
    int32_t expert_gating = 0;   // llama.cpp's expert_gating_func: 1 softmax, 2 sigmoid (0: the architecture's)
    // DeepSeek-style routing: shared experts (their width n_ff_exp * n_expert_shared), leading
    // dense layers, and group-limited selection (the top n_group_used of n_expert_groups groups,
    // scored by their two best experts)
    int32_t n_expert_shared = 0;
    int32_t n_layer_dense_lead = 0;
    int32_t n_expert_groups = 0;
    int32_t n_group_used = 0;
    // YaRN rope scaling (ext_factor 0: plain rope), with llama.cpp's defaults.
    float   rope_ext_factor = 0.0f;
    float   rope_attn_factor = 1.0f;
    float   yarn_beta_fast = 32.0f;
    float   yarn_beta_slow = 1.0f;
    int32_t n_ctx_orig_yarn = 0;   // 0: n_ctx_train
    float   rope_yarn_log_mul = 0.0f;
    // Llama-4 style attention temperature (mistral3, deepseek2): q scaled by
    // 1 + attn_temp_scale * log(floor(pos / attn_temp_floor) + 1) when attn_temp_scale != 0
    float   attn_temp_scale = 0.0f;
    int32_t attn_temp_floor = 0;
    // Gemma 4's per-layer token inputs: width per layer (0: none)
    int32_t n_embd_per_layer = 0;
    // Qwen3-VL's deepstack: rows (an image's) carry this many more slices of n_embd, each added
    // to the hidden state after one of the first layers (models/common/qwen3vl_common.h)
    int32_t n_deepstack = 0;
    int32_t n_embd_inp() const { return n_embd * (1 + n_deepstack); }   // the width of rows

    int32_t n_embd_k_gqa() const { return n_embd_head_k * n_head_kv; }
    int32_t n_embd_v_gqa() const { return n_embd_head_v * n_head_kv; }
    bool is_swa(int il) const { return n_swa > 0 && il < (int) swa_layers.size() && swa_layers[il]; }

    // Per-layer shapes, where a file gives arrays (head counts, FFN widths) or sliding-window
    // layers have heads of their own size and rope width (gemma4); empty / 0: the values above.
    std::vector<int32_t> n_head_arr, n_head_kv_arr, n_ff_arr;
    int32_t n_embd_head_k_swa = 0, n_embd_head_v_swa = 0, n_rot_swa = 0;
    int32_t head_count(int il) const { return il < (int) n_head_arr.size() ? n_head_arr[il] : n_head; }
    int32_t head_count_kv(int il) const { return il < (int) n_head_kv_arr.size() ? n_head_kv_arr[il] : n_head_kv; }
    int32_t ff_length(int il) const { return il < (int) n_ff_arr.size() ? n_ff_arr[il] : n_ff; }
    int32_t head_k(int il) const { return is_swa(il) && n_embd_head_k_swa > 0 ? n_embd_head_k_swa : n_embd_head_k; }
    int32_t head_v(int il) const { return is_swa(il) && n_embd_head_v_swa > 0 ? n_embd_head_v_swa : n_embd_head_v; }
    int32_t rot(int il) const { return is_swa(il) && n_rot_swa > 0 ? n_rot_swa : n_rot; }
    // Layers il >= n_layer_kv (when >= 0) cache nothing: they attend over the cache of the last
    // earlier layer of their kind (gemma4's shared KV layers, llama.cpp's layer reuse).
    int32_t n_layer_kv = -1;
    int kv_source(int il) const {
        return n_layer_kv < 0 || il < n_layer_kv ? il : n_layer_kv - (is_swa(il) ? 2 : 1);
    }
    // Multi-head latent attention (deepseek2 with key_length_mla): a layer caches one row per
    // token, the normed latent (n_lora_kv) then the roped key part (n_rot), and no V (it is the
    // latent, read from the same row); the per-head sizes after decompression.
    int32_t n_lora_q = 0, n_lora_kv = 0, n_embd_head_k_mla = 0, n_embd_head_v_mla = 0;
    bool is_mla() const { return n_lora_kv > 0 && n_embd_head_k_mla > 0; }
    // The widths of layer il's cache rows (V 0: none).
    int32_t kv_k_width(int il) const { return is_mla() ? n_lora_kv + n_rot : head_k(il) * head_count_kv(il); }
    int32_t kv_v_width(int il) const { return is_mla() ? 0 : head_v(il) * head_count_kv(il); }

    // Hybrid models (qwen35): which layers are linear attention (Gated DeltaNet) with a
    // recurrent state instead of a KV cache, and that state's dimensions.
    struct Ssm {
        int32_t d_conv = 0;      // short convolution kernel length
        int32_t d_inner = 0;     // value dimension (n_v_heads * head_v)
        int32_t d_state = 0;     // head size of k (and v)
        int32_t n_v_heads = 0;   // ssm.time_step_rank
        int32_t n_k_heads = 0;   // ssm.group_count
        int32_t conv_channels() const { return d_inner + 2 * n_k_heads * d_state; }
        int64_t conv_row() const { return (int64_t) (d_conv - 1) * conv_channels(); }   // floats
        int64_t state_row() const { return (int64_t) d_state * d_state * n_v_heads; }   // floats
    } ssm;
    std::vector<bool> recurrent_layers;
    int32_t rope_sections[4] = {0, 0, 0, 0};
    int32_t n_nextn = 0;         // MTP layers after the trunk (run only by an MTP draft, mtp.h)
    // A draft head (EAGLE-3, DFlash: engine/head.h) drafts for a target from the inputs of the
    // target's layers `target_layers` (a layer id names that layer's input), concatenated.
    struct Head {
        std::vector<int32_t> target_layers;
        int32_t n_embd_target = 0;         // the target's hidden size it was trained on
        bool norm_before_residual = false; // eagle3: the residual is the normed features
        bool norm_before_fc = false;       // eagle3: the features are normed before fc
        std::vector<int32_t> d2t;          // draft-vocabulary row -> target token id (empty: the same)
        int32_t block_size = 0;            // dflash: mask/noise positions per block, the anchor included
        int32_t mask_token = -1;           // dflash
        bool causal = false;               // dflash: causal attention within the block
        float embd_scale = 0.0f;           // dflash: token embeddings scaled (0: not)
        float value_scale = 0.0f;          // dflash: attention output scaled (0: not)
        bool gelu = false;                 // dflash: GeGLU FFN instead of SwiGLU
    } head;
    bool is_recurrent(int il) const { return il < (int) recurrent_layers.size() && recurrent_layers[il]; }
    bool hybrid() const {
        for (bool r : recurrent_layers) if (r) return true;
        return false;
    }
};

// The weights one layer may have; an architecture uses a subset (absent ones stay null).
struct Layer {
    ggml_tensor * attn_norm = nullptr;
    ggml_tensor * wq = nullptr;
    ggml_tensor * wk = nullptr;
    ggml_tensor * wv = nullptr;
    ggml_tensor * wo = nullptr;
    ggml_tensor * bq = nullptr;
    ggml_tensor * bk = nullptr;
    ggml_tensor * bv = nullptr;
    ggml_tensor * q_norm = nullptr;
    ggml_tensor * k_norm = nullptr;
    ggml_tensor * attn_post_norm = nullptr;
    ggml_tensor * ffn_norm = nullptr;
    ggml_tensor * ffn_gate = nullptr;
    ggml_tensor * ffn_up = nullptr;
    ggml_tensor * ffn_down = nullptr;
    ggml_tensor * ffn_post_norm = nullptr;
    ggml_tensor * ffn_gate_b = nullptr;   // FFN biases (mistral3, optional)
    ggml_tensor * ffn_up_b = nullptr;
    ggml_tensor * ffn_down_b = nullptr;
    // attention extras (gpt-oss): output bias, per-head sink logits
    ggml_tensor * bo = nullptr;
    ggml_tensor * attn_sinks = nullptr;
    // mixture of experts: router (+ bias), stacked expert matrices [n_in, n_out, n_expert]
    // (+ biases [n_out, n_expert]), shared expert and its sigmoid gate (qwen2moe)
    ggml_tensor * ffn_gate_inp = nullptr;
    ggml_tensor * ffn_gate_inp_b = nullptr;
    ggml_tensor * ffn_gate_exps = nullptr;
    ggml_tensor * ffn_up_exps = nullptr;
    ggml_tensor * ffn_down_exps = nullptr;
    ggml_tensor * ffn_gate_exps_b = nullptr;
    ggml_tensor * ffn_up_exps_b = nullptr;
    ggml_tensor * ffn_down_exps_b = nullptr;
    ggml_tensor * ffn_gate_inp_shexp = nullptr;
    ggml_tensor * ffn_gate_shexp = nullptr;
    ggml_tensor * ffn_up_shexp = nullptr;
    ggml_tensor * ffn_down_shexp = nullptr;
    // Gated DeltaNet (qwen35's linear attention layers)
    ggml_tensor * wqkv = nullptr;        // fused q/k/v input projection
    ggml_tensor * wqkv_gate = nullptr;   // z, the output gate
    ggml_tensor * ssm_conv1d = nullptr;
    ggml_tensor * ssm_dt = nullptr;
    ggml_tensor * ssm_a = nullptr;
    ggml_tensor * ssm_beta = nullptr;
    ggml_tensor * ssm_alpha = nullptr;
    ggml_tensor * ssm_norm = nullptr;
    ggml_tensor * ssm_out = nullptr;
    // NextN / MTP block (qwen35): input projection of [enorm(embed); hnorm(hidden)], its own
    // embeddings and head (else the model's)
    ggml_tensor * nextn_eh_proj = nullptr;
    ggml_tensor * nextn_enorm = nullptr;
    ggml_tensor * nextn_hnorm = nullptr;
    ggml_tensor * nextn_embed = nullptr;
    ggml_tensor * nextn_head_norm = nullptr;
    ggml_tensor * nextn_head = nullptr;
    // Routing extras: selection bias (DeepSeek V3, GLM-4.5), fused gate+up experts, per-expert
    // output scales and the router's input scale (gemma4)
    ggml_tensor * ffn_exp_probs_b = nullptr;
    ggml_tensor * ffn_gate_up_exps = nullptr;
    ggml_tensor * ffn_down_exps_s = nullptr;
    ggml_tensor * ffn_gate_inp_s = nullptr;
    // gemma4: norms around the dense and expert FFN branches, the layer's output scale, the
    // frequency factors of its rope, its per-layer input gate / projection / norm
    ggml_tensor * ffn_pre_norm_2 = nullptr;
    ggml_tensor * ffn_post_norm_1 = nullptr;
    ggml_tensor * ffn_post_norm_2 = nullptr;
    ggml_tensor * out_scale = nullptr;
    ggml_tensor * rope_freqs = nullptr;
    ggml_tensor * per_layer_inp_gate = nullptr;
    ggml_tensor * per_layer_proj = nullptr;
    ggml_tensor * per_layer_post_norm = nullptr;
    // MLA (deepseek2): low-rank q (wq_a, its norm, wq_b) or a plain wq; the joint latent + rope-key
    // projection and the latent's norm; the per-head key absorption and value decompression
    ggml_tensor * wq_a = nullptr;
    ggml_tensor * wq_b = nullptr;
    ggml_tensor * attn_q_a_norm = nullptr;
    ggml_tensor * wkv_a_mqa = nullptr;
    ggml_tensor * attn_kv_a_norm = nullptr;
    ggml_tensor * wk_b = nullptr;
    ggml_tensor * wv_b = nullptr;
    // draft heads (models/eagle3.cpp): the norm of the fused target features (eagle3's
    // hidden_norm); out_scale and rope_freqs above serve dflash and eagle3 too
    ggml_tensor * attn_norm_2 = nullptr;
};

}  // namespace psl

struct psl_model {
    std::unique_ptr<psl::GgufSplit> files;    // one file, or every shard of a split model
    psl::GgufFile * file = nullptr;           // == &files->first(): the metadata
    gguf_context * gguf = nullptr;            // == file->gguf(), kept for the metadata API
    std::string arch_name;
    std::string name;
    const psl::ArchOps * arch = nullptr;
    psl::HParams hp;
    int32_t file_type = -1;
    uint64_t size_bytes = 0;
    uint64_t n_params = 0;

    ggml_tensor * tok_embd = nullptr;
    ggml_tensor * output_norm = nullptr;
    ggml_tensor * output = nullptr;           // == tok_embd when tied
    bool tied_output = false;
    // batch-invariant numerics (psl_model_params.deterministic): no repacked weights, and every
    // context computes with ggml's reference paths (use_ref)
    bool deterministic = false;
    std::vector<psl::Layer> layers;
    int32_t mtp_layer = -1;                   // index in layers of a loaded MTP block, else -1
    // a draft head's fusion of the target features: fc (+ its scalar scale), and the norm of its
    // input (eagle3's norm_before_fc) or output (dflash)
    ggml_tensor * fc = nullptr;
    ggml_tensor * fc_scale = nullptr;
    ggml_tensor * enc_norm = nullptr;
    ggml_tensor * fc_post = nullptr;          // gemma4-assistant: its state projected back to the target's width
    // gemma4's per-layer inputs: a token table of n_layer * n_embd_per_layer columns, the
    // projection of the embeddings to the same width and its norm
    ggml_tensor * per_layer_tok_embd = nullptr;
    ggml_tensor * per_layer_model_proj = nullptr;
    ggml_tensor * per_layer_proj_norm = nullptr;

    // Devices: the CPU always; a GPU when one was compiled in and layers are offloaded.
    ggml_backend_dev_t dev_cpu = nullptr;
    ggml_backend_dev_t dev_gpu = nullptr;
    int32_t n_gpu_layers = 0;                 // layers actually offloaded
    bool output_on_gpu = false;
    bool layer_on_gpu(int il) const { return dev_gpu && il >= hp.n_layer - n_gpu_layers; }
    // A split over several devices (RPC servers, see rpc.cpp): when split_devs is non-empty,
    // layer il lives on split_devs[layer_split[il]] and the output head with the last layer.
    std::vector<ggml_backend_dev_t> split_devs;
    std::vector<int32_t> layer_split;
    ggml_backend_dev_t layer_device(int il) const {
        // an MTP block (index n_layer, mtp.h) goes with the last layer
        if (!split_devs.empty()) return split_devs[layer_split[std::min<size_t>(il, layer_split.size() - 1)]];
        return layer_on_gpu(il) ? dev_gpu : dev_cpu;
    }
    ggml_backend_dev_t output_device() const {
        if (!split_devs.empty()) return layer_device(hp.n_layer - 1);
        return output_on_gpu && dev_gpu ? dev_gpu : dev_cpu;
    }
    // The devices other than the CPU that hold weights: a context runs a backend on each.
    std::vector<ggml_backend_dev_t> offload_devices() const;
    // every layer and the head on this process's CPU (no GPU, no RPC split)
    bool cpu_only() const { return !dev_gpu && offload_devices().empty(); }

    std::vector<ggml_context *> ctxs;         // tensor metadata, one context per buffer type
    std::vector<ggml_backend_buffer_t> bufs;  // weight memory
    // A repacked weight's values in the plain layout, for our products of a few rows
    // (kernels/matmul_rows.h); ggml's repacked kernels take the rest (TensorLoader::plain_twins).
    std::unordered_map<const ggml_tensor *, ggml_tensor *> plain_twins;
    std::vector<ggml_context *> twins_ctxs;   // their metadata

    std::shared_ptr<psl::Vocab> vocab;        // null when the file has no tokenizer

    // A stand-in for a model whose weights are loaded in another process (psl_model_load_stub):
    // tokenizer and metadata, the real n_vocab; no weights, so no context.
    bool stub = false;

    std::atomic<int> refs{1};                 // the handle plus one per context / detokenizer

    ~psl_model();
};

namespace psl {
// Loads path; throws psl::Error.
psl_model * load_model(const std::string & path, const psl_model_params & params);
int32_t max_threads();   // for a context or for loading: 4x the hardware threads, at most 512
// rpc.cpp: the RPC servers' devices plus the local ones in split order, and each layer's
// device (llama.cpp's default split: proportional to free memory, or to params.tensor_split).
void split_layers(psl_model & m, const psl_model_params & params);
void retain(psl_model * m);
void release(psl_model * m);
// Whether the CPU backend multiplies activations by w when w sits in buft (a repacking or AMX
// buffer type: their kernels take only some types and shapes).
bool cpu_supports_matmul(ggml_backend_dev_t dev_cpu, ggml_backend_buffer_type_t buft, const ggml_tensor * w,
                         int64_t n_expert_used);
}  // namespace psl

namespace psl {

// Where a weight lives: the input layer stays on the CPU (get_rows), layers and the output
// head follow n_gpu_layers like llama.cpp's -ngl.
enum class Place { Input, Output, Layer };

// Creates the model's weight tensors from the file's descriptions, checking each shape.
class TensorLoader {
public:
    TensorLoader(psl_model & m, ggml_backend_buffer_type_t buft_cpu, ggml_backend_buffer_type_t buft_gpu,
                 std::vector<ggml_backend_buffer_type_t> cpu_extra);
    ~TensorLoader();
    // The tensor `name` with shape ne (ggml order, ne0 first); nullptr when absent and optional.
    ggml_tensor * create(const std::string & name, std::vector<int64_t> ne, Place place, int il = -1,
                         bool required = true);
    // A weight that multiplies activations (mul_mat's first operand): on the CPU it goes to a
    // repacking buffer type when one supports it, as llama.cpp does (faster kernels, a copy
    // instead of the mapping).
    ggml_tensor * matrix(const std::string & name, std::vector<int64_t> ne, Place place, int il = -1,
                         bool required = true);
    // Same for blk.<il>.<suffix>.
    ggml_tensor * layer(int il, const char * suffix, std::vector<int64_t> ne, bool required = true);
    ggml_tensor * layer_matrix(int il, const char * suffix, std::vector<int64_t> ne, bool required = true);
    // The buffer type a tensor goes to (see matrix()).
    ggml_backend_buffer_type_t home(const std::string & name, Place place, int il = -1, bool matrix = false) const;
    // Loads the tensor data (mmap or read) into backend buffers; prefetch faults mapped
    // tensors in now.
    void load(bool use_mmap, bool prefetch);

private:
    void check_scales() const;
    ggml_context * ctx_for(ggml_backend_buffer_type_t buft);
    void load_mapped(ggml_context * ctx, bool prefetch);
    void load_copied(ggml_context * ctx, ggml_backend_buffer_type_t buft);
    void plain_twins(ggml_context * ctx);
    ggml_tensor * place(const std::string & name, std::vector<int64_t> ne, Place place, int il, bool required,
                        bool matrix);
    bool supports_matmul(ggml_backend_buffer_type_t buft, const ggml_tensor * w) const;
    bool amx_copies_only(ggml_backend_buffer_type_t extra, ggml_type t) const;
    psl_model & m_;
    ggml_backend_buffer_type_t buft_cpu_, buft_gpu_;
    std::vector<ggml_backend_buffer_type_t> cpu_extra_;
    std::vector<std::pair<ggml_backend_buffer_type_t, ggml_context *>> ctx_by_buft_;
    std::vector<std::pair<ggml_tensor *, const TensorSource *>> created_;   // tensor, where its data is
};

// One architecture: its extra hyper-parameters, its weights, its graph.
struct Graph;
struct ArchOps {
    const char * name;
    void (*load_hparams)(const GgufFile & f, const std::string & arch, HParams & hp);
    void (*create_tensors)(TensorLoader & tl, psl_model & m);
    ggml_tensor * (*build)(Graph & g);   // logits [n_vocab, n_outputs]
    // One MTP draft step over one token (engine/mtp.h): sets g.inp_mtp_h and g.mtp_hidden and
    // returns the logits [n_vocab, 1]; null for an architecture without MTP layers.
    ggml_tensor * (*build_mtp)(Graph & g) = nullptr;
    // A draft head (engine/head.h) has no eval of its own: `build` is its decoder and this its
    // encoder of the target's features (g.inp_embd); null for a model.
    ggml_tensor * (*build_encode)(Graph & g) = nullptr;
    // A head that attends over its target's KV cache instead of a cache of its own (Gemma 4's
    // assistant): no encoder, the target's final hidden rows as its input.
    bool reads_target_kv = false;
    // Its graph reads token ids only through Graph::embed, so rows may stand in for them
    // (psl_context_seq_eval_rows: an image's); false where a layer reads the ids again (gemma4's
    // per-layer inputs) or where no one has checked.
    bool takes_rows = false;
    // Its attention ropes with M-RoPE sections (qwen35): an image with a grid goes at 2-D
    // positions (memory/row_spans.h), as llama.cpp's mtmd places one for such a model.
    bool mrope_rows = false;
    // Non-causal rows (an image's) attend both ways on its sliding-window layers only, its full
    // layers staying causal (llama.cpp's LLAMA_NON_CAUSAL_TYPE_SWA_ONLY: gemma4).
    bool non_causal_swa_only = false;
    bool is_head() const { return build_encode != nullptr || reads_target_kv; }
};

const ArchOps * find_arch(const std::string & name);
std::string supported_archs();

}  // namespace psl
