// A vision projector: llama.cpp's mmproj GGUF (general.architecture "clip", keys clip.*, tensors
// v.* / mm.*), loaded beside a text model, that turns an image's pixels into rows the text model
// reads in place of token embeddings (psl_context_seq_eval_rows). One projector type a file, as
// the text architectures: vision/gemma3.cpp (SigLIP, average pooling, RMS norm, projection).
// The shared ViT encoder is vision/vit.cpp. CPU for now: the weights sit in CPU memory.
#pragma once

#include "pyllamaspec.h"

#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace psl {

class GgufFile;

struct VitHParams {
    int32_t image_size = 0, patch_size = 0;
    int32_t n_embd = 0, n_head = 0, n_ff = 0, n_layer = 0;
    int32_t n_embd_text = 0;      // the text model's n_embd
    int32_t n_deepstack = 0;      // deepstack mergers (qwen3vl_merger): each adds n_embd_text to a row
    int32_t n_merge = 1;          // patches pooled or merged into one row, per side
    float eps = 1e-6f;
    float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1};
    enum class Ffn { Gelu, Silu, GeluQuick } ffn = Ffn::GeluQuick;   // clip.use_gelu / use_silu
    // qwen2vl_merger / qwen2.5vl_merger: RMS norms (2.5) instead of LayerNorms; window attention
    // in every layer but each n_wa_pattern-th (clip.vision.n_wa_pattern; 0: none)
    bool rms_norm = false;
    int32_t n_wa_pattern = 0;
    float rope_theta = 10000.0f;  // the vision rope's base (gemma4v: 100)
    int32_t pos_size = 0;         // gemma4v: the patches a side its position tables hold
    bool causal = false;          // this file's rows causal although its type's are not (gemma4v E2B / E4B)

    int32_t row_width() const { return n_embd_text * (1 + n_deepstack); }   // the rows' width
    int32_t patches_side() const { return image_size / patch_size; }
    int32_t n_patches() const { return patches_side() * patches_side(); }
};

struct VitLayer {
    ggml_tensor *ln1_w = nullptr, *ln1_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr;
    ggml_tensor *q_w = nullptr, *q_b = nullptr, *k_w = nullptr, *k_b = nullptr, *v_w = nullptr, *v_b = nullptr;
    ggml_tensor *o_w = nullptr, *o_b = nullptr;
    ggml_tensor *up_w = nullptr, *up_b = nullptr, *down_w = nullptr, *down_b = nullptr;
    ggml_tensor *qkv_w = nullptr, *qkv_b = nullptr;   // fused q, k, v (qwen3vl_merger)
    // a deepstack merger of this layer's output (qwen3vl_merger): LayerNorm, fc1, GELU, fc2
    ggml_tensor *ds_norm_w = nullptr, *ds_norm_b = nullptr, *ds_fc1_w = nullptr, *ds_fc1_b = nullptr;
    ggml_tensor *ds_fc2_w = nullptr, *ds_fc2_b = nullptr;
    ggml_tensor *gate_w = nullptr, *gate_b = nullptr; // a gated MLP (qwen2.5vl_merger, gemma4v)
    // gemma4v: per-head q / k norms, norms after attention and FFN, an output scale
    ggml_tensor *q_norm = nullptr, *k_norm = nullptr, *attn_post_norm = nullptr, *ffn_post_norm = nullptr;
    ggml_tensor *out_scale = nullptr;
};

// The bounds a Gemma4ClippableLinear puts on a product's input and output (clip.cpp's
// clamp_info_map; a bound the file does not give is +-FLT_MAX).
struct VitClamp {
    const ggml_tensor * w = nullptr;
    float in_min, in_max, out_min, out_max;
};

// The weights of a projector, named as clip.cpp names them.
struct VitWeights {
    ggml_tensor *patch_w = nullptr, *patch_b = nullptr, *pos = nullptr;
    ggml_tensor *post_ln_w = nullptr, *post_ln_b = nullptr;
    ggml_tensor *pre_ln_w = nullptr, *pre_ln_b = nullptr;   // qwen2vl_merger's graph takes one if there
    std::vector<VitLayer> layers;
    // gemma3
    ggml_tensor *mm_soft_norm_w = nullptr, *mm_proj_w = nullptr;
    // qwen3vl_merger: the Conv3D's second temporal slice; the merger's two linears
    ggml_tensor *patch_w1 = nullptr, *mm0_w = nullptr, *mm0_b = nullptr, *mm2_w = nullptr, *mm2_b = nullptr;
    // gemma4v: the standardization before the projection, the weights with clamps
    ggml_tensor *std_bias = nullptr, *std_scale = nullptr;
    std::vector<VitClamp> clamps;
    // pixtral: the LLaVA projector's first linear (mm.2 above), Mistral Small 3.1's merger, [IMG_BREAK]
    ggml_tensor *mm1_w = nullptr, *mm1_b = nullptr, *mm_input_norm_w = nullptr, *mm_merger_w = nullptr;
    ggml_tensor *img_break = nullptr;
};

class ProjectorLoader;
struct ProjectorGraph;

// One projector type: its hyper-parameters beyond the common ones, its tensors, its graph.
struct ProjectorOps {
    const char * name;            // clip.projector_type
    bool non_causal;              // an image's rows attend to each other both ways in the text model
    bool mrope;                   // the text model places the rows at 2-D M-RoPE positions (Qwen)
    void (*hparams)(const GgufFile & f, VitHParams & hp);
    void (*tensors)(ProjectorLoader & l, VitWeights & w, VitHParams & hp);
    ggml_tensor * (*build)(ProjectorGraph & g);   // [row_width, n_tokens]
    // The merged grid (nx, ny) of an image width x height (preprocessed); sizes the type cannot
    // take fail with PSL_ERR_INVALID_ARGUMENT.
    void (*grid)(const VitHParams & hp, int64_t width, int64_t height, int32_t & nx, int32_t & ny);
    // pixtral: a break row after each grid row but the last (nx * ny + ny - 1 rows)
    bool row_breaks = false;
    int32_t n_rows(int32_t nx, int32_t ny) const { return nx * ny + (row_breaks ? ny - 1 : 0); }
};

// The ViT's tensors of the common layout (SigLIP / CLIP: separate q, k, v).
void vit_tensors(ProjectorLoader & l, VitWeights & w, const VitHParams & hp);
// The norms every layout shares (v.post_ln, each block's ln1 / ln2); sizes w.layers.
void vit_norms(ProjectorLoader & l, VitWeights & w, const VitHParams & hp);

// The Qwen family's merged grid (nx, ny) of a width x height image: sides multiples of 2 x
// patch_size, at most most_patches patches; other sizes fail with PSL_ERR_INVALID_ARGUMENT.
void grid_2x2(const VitHParams & hp, int64_t width, int64_t height, int64_t most_patches, int32_t & nx, int32_t & ny);

// Takes tensors from the file by name, checking their shapes and types.
class ProjectorLoader {
public:
    ProjectorLoader(const GgufFile & f, ggml_context * ctx) : f_(f), ctx_(ctx) {}
    // A weight of shape ne (ggml order, trailing 1s implied); matrices may be quantized (kinds
    // of ggml's CPU matrix products), vectors are F32. Missing and required: PSL_ERR_FORMAT.
    ggml_tensor * get(const std::string & name, std::vector<int64_t> ne, bool required = true);
    // A weight ggml copies or reshapes before use (the patches' convolution kernel, for im2col;
    // a matrix used transposed): F32 or F16.
    ggml_tensor * get_plain(const std::string & name, std::vector<int64_t> ne);
    // The file's tensor (shape and type, no data); missing: PSL_ERR_FORMAT.
    const ggml_tensor * meta(const std::string & name) const;
    // A one-value F32 tensor's value (gemma4v's clamp bounds); absent: false. Another shape or
    // type: PSL_ERR_FORMAT.
    bool scalar(const std::string & name, float & out) const;
    bool has(const std::string & name) const;
    const std::vector<std::string> & names() const { return names_; }

private:
    ggml_tensor * take(const std::string & name, const std::vector<int64_t> & ne, bool required, bool plain);
    const GgufFile & f_;
    ggml_context * ctx_;
    std::vector<std::string> names_;
};

// What one encode's graph builder sees.
struct ProjectorGraph {
    ggml_context * ctx;
    const VitHParams & hp;
    const VitWeights & w;
    ggml_tensor * inp_raw = nullptr;   // F32 [width, height, 3]: planar RGB
    int32_t width = 0, height = 0;     // the image's size in pixels
    // I32 inputs the builder makes, set once the graph is allocated (positions)
    std::vector<std::pair<ggml_tensor *, std::vector<int32_t>>> inputs_i32;
    std::vector<std::pair<ggml_tensor *, std::vector<ggml_fp16_t>>> inputs_f16;   // masks

    // The ViT of the common layout (SigLIP / CLIP): patches by convolution, learned positions,
    // pre-norm layers with biases, LayerNorm after the last: [n_embd, n_patches].
    ggml_tensor * vit();
    ggml_tensor * layer_norm(ggml_tensor * x, ggml_tensor * w, ggml_tensor * b) const;
    ggml_tensor * linear(ggml_tensor * x, ggml_tensor * w, ggml_tensor * b) const;

    // The Qwen family's pieces (qwen2vl.cpp, qwen3vl.cpp: vit.cpp). A still image through the
    // Conv3D's two temporal kernels (both see the same frame), summed: [n_embd, px * py] in
    // mtmd's 2 x 2 order (each merged row's four patches adjacent), px, py the patches a side.
    ggml_tensor * temporal_patches(int64_t px, int64_t py);
    // [n_embd, px, py] in raster order -> [n_embd, px * py] in that 2 x 2 order.
    ggml_tensor * merge_order(ggml_tensor * x, int64_t px, int64_t py) const;
    // Each patch's (y, x, y, x) in the 2 x 2 order, the 4 sections of the vision rope; with
    // slot, the patches of merged row r go to rows slot[r] (window attention's reordering).
    ggml_tensor * rope_positions(int64_t px, int64_t py, const std::vector<int32_t> * slot = nullptr);
    // The 2-D vision rope (ggml_rope_multi, vision mode, 4 sections of d_head / 4) of [d, n_head, n].
    ggml_tensor * vision_rope(ggml_tensor * x, ggml_tensor * pos) const;
    // Attention as clip.cpp runs it where the backend has flash attention (its default): F16 K
    // and V (and mask), F32 sums; q, k, v [d_head, n_head, n], mask F16 [n, n] or null -> [n_embd, n];
    // kq_scale 0: 1 / sqrt(d_head) (gemma4v: 1).
    ggml_tensor * attention(ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                            float kq_scale = 0.0f) const;
};

const ProjectorOps * find_projector(const std::string & type);

}  // namespace psl

struct psl_projector {
    std::string path;
    const psl::ProjectorOps * ops = nullptr;
    psl::VitHParams hp;
    psl::VitWeights w;
    ggml_context_ptr ctx;                  // the weights' tensors
    ggml_backend_buffer_ptr buf;           // their data (CPU)
    ggml_backend_ptr backend;              // the CPU backend the encoder runs on
    int32_t n_threads = 0;
    size_t graph_size = 0;                 // the encoder graph's most nodes
    std::vector<uint8_t> graph_buf;

    psl_projector(const char * path, int32_t n_threads);
    void encode(const float * pixels, int32_t width, int32_t height, float * out, int64_t out_cap);
    // rows of an image width x height; square: image_size
    int32_t n_tokens(int64_t width, int64_t height) const {
        int32_t nx = 0, ny = 0;
        ops->grid(hp, width, height, nx, ny);
        return ops->n_rows(nx, ny);
    }
    int32_t n_tokens() const { return n_tokens(hp.image_size, hp.image_size); }
};
