// MTP ("multi-token prediction", GGUF's NextN layers) drafting from the target's own weights,
// as llama.cpp runs it for qwen35 (src/models/qwen35.cpp graph_mtp, common/speculative.cpp
// draft-mtp); the block's weights and graphs are the architecture's (models/qwen35.cpp,
// ArchOps::build_mtp). At position p the MTP block takes the token x_p and the target's hidden state
// h_{p-1} (the trunk's last layer after the final output norm) and predicts token p + 1:
//   y  = eh_proj([enorm(embed(x_p)); hnorm(h_{p-1})])
//   y += gated_attention(attn_norm(y))       its own KV cache over positions 0..p
//   y += swiglu_ffn(post_attention_norm(y))
//   h' = shared_head_norm(y) (else output_norm); logits = shared_head_head(h') (else the output head)
// The MTP KV cache holds (x_p, h_{p-1}) for every token in the target's cache: the target's eval
// fills it (one more cache layer, so truncation rolls it back with the rest) and keeps its
// hidden rows on the host. A draft chains steps: step 0 runs (x_{n}, h_{n-1}) at n = n_past,
// step s runs the step s-1 token with the step s-1 output h' at n + s; its cache writes lie past
// n_past and are overwritten by the target's next eval.
#pragma once

#include "models/common/graph_common.h"

#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <memory>
#include <vector>

struct psl_context;

namespace psl {

class MtpState {
public:
    explicit MtpState(psl_context & c);
    ~MtpState();
    // Around the target's compute of a batch at n_past (g.mtp set).
    void before_compute(const Graph & g, int32_t n_past);
    void after_compute(const Graph & g, int32_t n_past);
    void clear() { lo_ = hi_ = 0; chain_step_ = -1; }
    // One draft step (see the header comment): logits [n_vocab] into out.
    void draft(int32_t token, int32_t step, float * out);

private:
    const float * hidden_at(int32_t pos);   // the target's h at pos, zeros when not kept
    void build(int32_t n_kv);

    psl_context & c_;
    int32_t n_embd_;
    // ring of the target's hidden rows: row p % ring_n_ holds position p for p in [lo_, hi_);
    // at least as deep as the recurrent ring, so an O(1) rollback always finds its row
    int32_t ring_n_;
    std::vector<float> ring_, zeros_, chain_, scratch_;
    int32_t lo_ = 0, hi_ = 0;
    int32_t chain_step_ = -1, chain_past_ = -1;   // the last draft step and the n_past it ran at
    // the draft graph: its own scheduler, so that the target's graph stays allocated
    ggml_backend_sched_ptr sched_;
    size_t graph_size_ = 1024;
    std::vector<uint8_t> graph_buf_;
    ggml_context_ptr graph_ctx_;
    ggml_cgraph * gf_ = nullptr;
    std::unique_ptr<Graph> graph_;
    ggml_tensor * logits_ = nullptr;
    int32_t graph_kv_ = -1;
};

}  // namespace psl
