// DFlash drafting (head.h): every target position's fused features become K/V in the head's
// cache; a draft is one non-causal pass over [last token, mask, ...] after the target's cache.
#include "engine/head.h"

#include "error.h"
#include "model.h"

namespace psl {

namespace {

class DflashState : public HeadState {
public:
    DflashState(psl_model & head, const psl_model & target, const std::vector<ggml_backend_t> & backends, int32_t n_ctx,
                ggml_type type_k, ggml_type type_v)
        : HeadState(head, target, n_ctx, true, type_k, type_v), enc_(backends), dec_(backends) {}

    // Cells past the target's cache are written again before any block reads them.
    void truncate(int32_t) override {}
    void clear() override {}

    void draft_block(int32_t token, int32_t n, int32_t n_past, std::atomic<bool> & interrupt, float * out) override {
        const int32_t block = head_.hp.head.block_size;
        if (n < 1 || n > block - 1) {
            fail(PSL_ERR_INVALID_ARGUMENT, "a DFlash block drafts 1 to %d tokens (block_size %d), asked %d", block - 1, block, n);
        }
        if (n_past + n + 1 > n_ctx_) fail(PSL_ERR_CONTEXT_FULL, "DFlash block at %d + %d: n_ctx is %d", n_past, n + 1, n_ctx_);
        toks_.assign((size_t) n + 1, head_.hp.head.mask_token);
        toks_[0] = token;
        const int32_t n_kv = kv_->n_kv_for(n_past + n + 1);
        Graph & d = dec_.prepare(((int64_t) (n + 1) << 32) | n_kv, head_, target_, *kv_, n + 1, n_kv, true,
                                 head_.hp.head.causal, head_.arch->build);
        dec_.inputs().fill(d, toks_.data(), n_past);
        dec_.compute(interrupt);
        const int64_t w = n_out();
        rows_.resize((size_t) ((n + 1) * w));
        ggml_backend_tensor_get(dec_.result(), rows_.data(), 0, rows_.size() * sizeof(float));
        spread(rows_.data() + w, n, out);   // the anchor's row predicts nothing new
    }

protected:
    void process(const float * features, const int32_t *, int32_t n, int32_t n_past, std::atomic<bool> & interrupt) override {
        const int32_t n_kv = kv_->n_kv_for(n_past + n);
        Graph & e = enc_.prepare(((int64_t) n << 32) | n_kv, head_, target_, *kv_, n, n_kv, true, true,
                                 head_.arch->build_encode);
        enc_.inputs().fill(e, nullptr, n_past);
        ggml_backend_tensor_set(e.inp_embd, features, 0, ggml_nbytes(e.inp_embd));
        enc_.compute(interrupt);
    }

private:
    HeadGraph enc_, dec_;
    std::vector<int32_t> toks_;
    std::vector<float> rows_;
};

}  // namespace

std::unique_ptr<HeadState> make_dflash_state(psl_model & head, const psl_model & target,
                                             const std::vector<ggml_backend_t> & backends, int32_t n_ctx,
                                             ggml_type type_k, ggml_type type_v) {
    return std::make_unique<DflashState>(head, target, backends, n_ctx, type_k, type_v);
}

}  // namespace psl
