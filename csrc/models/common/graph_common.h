// Pieces every architecture's graph shares: inputs, norms, rope, attention over the KV cache,
// feed-forward variants and the output head. An architecture file strings them together.
#pragma once

#include "memory/kv_cache.h"
#include "model.h"

#include <deque>
#include <utility>
#include <vector>

namespace psl {

class RecurrentState;

// One forward graph over n_tokens new tokens attending to the first n_kv cache cells. Where the
// tokens sit (positions, sequences, cells, mask) and which rows give logits is all input data,
// so one graph serves many steps.
struct Graph {
    // Which tokens' logits the graph computes: every token's, the last one's, the rows named
    // by inp_out_ids (n_out_rows of them), or none (the graph ends at the last layer).
    enum class Outputs { All, Last, Rows, None };

    ggml_context * ctx;
    ggml_cgraph * gf;
    const psl_model & m;
    KvCache & kv;
    int32_t n_tokens;
    int32_t n_kv;                // cells the attention reads
    Outputs outputs;
    int32_t n_out_rows;          // with Outputs::Rows
    bool embeddings = false;     // the output norm's rows, not logits: the graph ends before the head
    // > 0: the attention runs on at most fa_rows query rows a call; FA_ROW_ALONE (one token):
    // its row attends beside a second one, masked out entirely (psl_context::fa_rows_for: ggml's
    // CPU flash attention then takes the path the sequence alone would take)
    int32_t fa_rows = 0;
    static constexpr int32_t FA_ROW_ALONE = -1;
    // Every node runs on the CPU backend: the attention of a few rows and the products of a few
    // activation rows may be our own custom nodes (kernels/), which the other backends do not run.
    bool cpu_kernels = false;
    std::deque<float> op_floats;   // custom nodes' parameters, alive as long as the graph
    ggml_tensor * result = nullptr;
    ggml_tensor * head = nullptr;            // a restricted output matrix (set_output_ids), else m.output

    bool rows_input = false;                // embed() reads inp_rows, not token ids

    // inputs, filled before compute (GraphInputs)
    ggml_tensor * inp_tokens = nullptr;     // I32 [n_tokens]
    ggml_tensor * inp_rows = nullptr;       // F32 [n_embd_inp, n_tokens] with rows_input (psl_context::eval_rows)
    ggml_tensor * inp_pos = nullptr;        // I32 [n_tokens]
    ggml_tensor * inp_kv_idx = nullptr;     // I64 [n_tokens]: the cache cells the batch is written to
    ggml_tensor * inp_mask = nullptr;       // F16 [n_kv, mask_rows()], causal
    ggml_tensor * inp_mask_swa = nullptr;   // F16 [n_kv, mask_rows()], causal and windowed
    ggml_tensor * inp_out_ids = nullptr;    // I32 [n_out_rows]: the rows whose logits are wanted (Rows)
    // hybrid models (see recurrent_state.h); created by the architecture when it needs them
    RecurrentState * rs = nullptr;
    ggml_tensor * inp_rs_src = nullptr;     // I32 [1]: the state row the batch starts from
    ggml_tensor * inp_rs_dst = nullptr;     // I64 [k]: rows for the states after the last k tokens, newest first
    ggml_tensor * inp_rs_dst_old = nullptr; // I64 [k]: the same rows, oldest first
    ggml_tensor * inp_pos4 = nullptr;       // I32 [4 * n_tokens]: M-RoPE positions, section-major (UBatch::rope)
    ggml_tensor * inp_attn_scale = nullptr; // F32 [1, 1, n_tokens]: q's temperature per position (attn_temp_scale)
    // MTP (mtp.h): the target's eval also fills the MTP block's cache and returns its hidden rows
    bool mtp = false;
    ggml_tensor * inp_mtp_h = nullptr;      // F32 [n_embd, 1] (a draft: [n_embd, n_tokens]): the hidden state before
    ggml_tensor * mtp_hidden = nullptr;     // F32 [n_embd, n_tokens]: hidden rows to keep
    // A draft head's features: the inputs of the target's layers *capture (engine/head.h) are
    // kept (captured[k] for capture[k]) while the target computes a batch.
    const std::vector<int32_t> * capture = nullptr;
    std::vector<ggml_tensor *> captured;
    // A draft head's own graphs (models/eagle3.cpp, dflash.cpp): the target it drafts for (its
    // embeddings and output head serve a head that has none), its inputs besides tokens (the
    // target's features, or eagle3's g rows), the rows it keeps (eagle3: the pre-norm output),
    // and whether attention is causal (dflash's block: every token sees the whole block).
    const psl_model * other = nullptr;
    ggml_tensor * inp_embd = nullptr;       // F32 [width, n_tokens]
    ggml_tensor * hidden = nullptr;         // F32 [n_embd, n_outputs]
    bool causal = true;                     // false: a token sees every cell of its sequence (an image's rows too)
    bool sees_own = true;                   // false: a token sees the cells before its position only
    // the final normed hidden rows (the output head's input) are kept: a Gemma 4 assistant reads them
    bool keep_final = false;
    ggml_tensor * final_hidden = nullptr;   // F32 [n_embd, n_outputs] (no outputs: n_tokens)

    Graph(ggml_context * ctx, ggml_cgraph * gf, const psl_model & m, KvCache & kv, int32_t n_tokens,
          int32_t n_kv, Outputs outputs, int32_t n_out_rows = 0, int32_t fa_rows = 0);
    bool no_outputs() const { return outputs == Outputs::None; }
    int32_t mask_rows() const { return (int32_t) inp_mask->ne[1]; }   // n_tokens, or 2 (FA_ROW_ALONE)

    // The rows the first layer reads, [n_embd, n_tokens]: the tokens' embeddings times tok_scale,
    // or with rows_input the caller's rows as given (an image's, from a projector: llama.cpp
    // scales token rows only, so an architecture that scales passes its factor here).
    ggml_tensor * embed(float tok_scale = 1.0f);
    // With rows_input, the rows' deepstack slice for layer il ([n_embd, n_tokens], added after
    // it: hp.n_deepstack); null for tokens (theirs are zero) and for il >= n_deepstack.
    ggml_tensor * deepstack(int il) const;
    // Called with the residual stream entering layer il: a head's captured feature when asked.
    void layer_input(int il, ggml_tensor * x);
    ggml_tensor * rms_norm(ggml_tensor * x, ggml_tensor * w) const;
    // x: [head, n_head, n_tokens]; n_rot 0: hp.n_rot; factors: per-pair frequency divisors;
    // mode M-RoPE / IMROPE: hp.rope_sections over inp_pos4 (which the architecture creates)
    ggml_tensor * rope(ggml_tensor * x, int mode, float freq_base, float freq_scale, int n_rot = 0,
                       ggml_tensor * factors = nullptr) const;
    // Stores k_cur/v_cur ([head, n_head_kv, n_tokens]) into layer il's cache and attends with q
    // ([head, n_head, n_tokens]); returns [head_v * n_head, n_tokens].
    ggml_tensor * attention(int il, ggml_tensor * q, ggml_tensor * k_cur, ggml_tensor * v_cur, float scale);
    // The same, returning [head_v, n_head, n_tokens]. A null k_cur / v_cur stores nothing (a
    // layer that reads another's cache, kv_source); a layer without a V cache (MLA) reads V as
    // the first dv_latent values of each K row.
    ggml_tensor * attention_heads(int il, ggml_tensor * q, ggml_tensor * k_cur, ggml_tensor * v_cur, float scale,
                                  int64_t dv_latent = 0);
    // ggml's flash attention of q ([head, n_rows, n_head]) over k/v with mask, F32 accumulation,
    // layer il's sinks when it has them; returns [head_v, n_head, n_rows].
    ggml_tensor * flash_attention(int il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                                  float scale);
    // Only the writing half: k_cur / v_cur (either may be null) into layer il's cache cells.
    void store_kv(int il, ggml_tensor * k_cur, ggml_tensor * v_cur);
    // The attention block of the llama family and its relatives: projections (+ biases when
    // the layer has them), per-head q/k RMS norms (when present), rope, q scaling, attention
    // over the cache, output projection. On the last layer only the output rows are kept.
    struct AttnOpts {
        int rope_mode;
        float freq_base;
        float freq_scale;
        float q_scale;    // applied to q after rope (gemma); 1 = none
        float kq_scale;   // applied inside the attention
        ggml_tensor * rope_factors = nullptr;   // rope_freqs (mistral3), else none
    };
    ggml_tensor * self_attention(int il, ggml_tensor * h, const AttnOpts & o);
    // q ([head, n_head, n_tokens]) times its position's Llama-4 attention temperature
    // 1 + attn_temp_scale * ln(floor(pos / attn_temp_floor) + 1) (mistral3, deepseek2)
    ggml_tensor * attn_temperature(ggml_tensor * q);
    ggml_tensor * ffn_swiglu(ggml_tensor * x, const Layer & l) const;
    ggml_tensor * ffn_geglu(ggml_tensor * x, const Layer & l) const;
    // Mixture-of-experts FFN: the router picks hp.n_expert_used experts per token (ggml's
    // argsort top-k), mul_mat_id runs only those, their outputs are summed with the routing
    // weights. Gating: softmax over all experts then top-k (qwen), top-k of the raw logits then
    // softmax over the k (gpt-oss), or sigmoid scores (DeepSeek V3, GLM-4.5: with the layer's
    // selection bias and expert groups); the k weights optionally renormalized and scaled.
    enum class MoeGating { SoftmaxAll, SoftmaxSelected, Sigmoid };
    enum class MoeAct { SwiGLU, SwiGLUOai, GeGLU };   // OAI: clamped, alpha 1.702, limit 7
    struct MoeOpts {
        MoeGating gating;
        MoeAct act;
        bool norm;                       // weights renormalized to sum 1
        float scale;                     // weights scaled (0 or 1: not)
        ggml_tensor * logits = nullptr;  // router logits the caller computed (gemma4), else the layer's
    };
    ggml_tensor * ffn_moe(ggml_tensor * x, const Layer & l, const MoeOpts & o) const;
    // with hp.expert_weights_norm / expert_weights_scale
    ggml_tensor * ffn_moe(ggml_tensor * x, const Layer & l, MoeGating gating, MoeAct act) const;
    std::pair<ggml_tensor *, ggml_tensor *> moe_route(ggml_tensor * logits, const Layer & l, const MoeOpts & o) const;
    // The shared expert (SwiGLU), times its sigmoid gate when the layer has one (qwen2moe).
    ggml_tensor * ffn_shared_expert(ggml_tensor * x, const Layer & l) const;
    // The columns of x whose logits are wanted (all, the last, or the rows named); called on the
    // last layer so that its remaining work skips the other rows (all rows stay when an MTP
    // block reads them).
    ggml_tensor * keep_outputs(ggml_tensor * x) const;
    ggml_tensor * output_rows(ggml_tensor * x) const;   // the same, whatever MTP needs
    // Keeps the rows whose logits are wanted, final norm, output head: [n_vocab, n_outputs]
    // (with embeddings, the normed rows: [n_embd, n_tokens]).
    ggml_tensor * output(ggml_tensor * x, ggml_tensor * norm_w);
    int32_t n_outputs() const {
        return outputs == Outputs::None ? 0 : outputs == Outputs::All ? n_tokens : outputs == Outputs::Last ? 1 : n_out_rows;
    }
};

// What one graph computes: n tokens, each with its position, the sequence it attends as and the
// cache cell it is written to (already the sequences', see KvCells), and with Outputs::Rows the
// rows (indices into these n) whose logits are wanted. A hybrid's batch holds one sequence, at
// consecutive positions.
struct UBatch {
    int32_t n = 0;
    const int32_t * tokens = nullptr;
    const int32_t * pos = nullptr;
    const int32_t * seq = nullptr;
    const int32_t * cell = nullptr;
    const int32_t * out_ids = nullptr;
    // per token, the cells of its positions from its sequence's n_past on (an MTP draft node's
    // path: its ancestors' scratch cells and its own); null: no token lies past its sequence
    const std::vector<int32_t> * tails = nullptr;
    // with M-RoPE, 4 rope positions a token (t, y, x, e; memory/row_spans.h); null: (p, p, p, 0)
    const int32_t * rope = nullptr;
};

// The host side of a graph's inputs: where its tokens sit (positions, cache cells), the causal
// masks per sequence (windowed too, for sliding-window layers), the rows kept for logits and the
// recurrent state's rows, filled before each compute; the buffers are kept between steps.
class GraphInputs {
public:
    // g's inputs for the tokens of ub; cells says which cells each sequence holds.
    void fill(const Graph & g, const UBatch & ub, const KvCells & cells);
    // One sequence in cells 0, 1, ... (a draft head's own cache, or its view of the target's
    // sequence 0): g's n_tokens tokens at positions and cells n_past, n_past + 1, ...; honours
    // g.causal / g.sees_own.
    void fill(const Graph & g, const int32_t * tokens, int32_t n_past);

private:
    void fill_masks(const Graph & g, const UBatch & ub, const KvCells & cells);
    void fill_common(const Graph & g, const int32_t * tokens, const int32_t * pos, int32_t seq0,
                     const int32_t * rope = nullptr);
    void set_masks(const Graph & g);

    std::vector<int32_t> pos_, pos4_;
    std::vector<int64_t> idx_;
    std::vector<ggml_fp16_t> mask_, mask_swa_;
    std::vector<float> scale_;
};

}  // namespace psl
