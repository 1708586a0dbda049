// EAGLE-3 drafting (head.h): the head's cache follows the target's text one position behind,
// and chained steps draft from its end.
#include "engine/head.h"

#include "error.h"
#include "memory/hidden_ring.h"
#include "model.h"

#include <algorithm>

namespace psl {

namespace {

class Eagle3State : public HeadState {
public:
    Eagle3State(psl_model & head, const psl_model & target, const std::vector<ggml_backend_t> & backends, int32_t n_ctx,
                ggml_type type_k, ggml_type type_v)
        : HeadState(head, target, n_ctx, true, type_k, type_v), g_(head.hp.n_embd, 256), enc_(backends),
          dec_(backends) {
        chain_.assign((size_t) head.hp.n_embd, 0.0f);
    }

    void truncate(int32_t n_keep) override {
        // an entry at P holds the token at P + 1: the ones whose token was dropped go
        if (hv_ > std::max(0, n_keep - 1)) {
            hv_ = std::max(0, n_keep - 1);
            tail_token_ = -1;
        }
        chain_step_ = -1;
    }

    void clear() override {
        hv_ = 0;
        tail_token_ = -1;
        chain_step_ = -1;
        g_.clear();
    }

    void draft(int32_t token, int32_t step, int32_t n_past, std::atomic<bool> & interrupt, float * out) override;

protected:
    void process(const float * features, const int32_t * tokens, int32_t n, int32_t n_past,
                 std::atomic<bool> & interrupt) override;

private:
    // The decoder over m (token, g) pairs at positions first.., with outputs of the last one.
    void decode(const int32_t * tokens, const float * g, int32_t m, int32_t first, bool outputs,
                std::atomic<bool> & interrupt);

    HiddenRing g_;                    // the fused features g by position
    HeadGraph enc_, dec_;
    int32_t hv_ = 0;                  // the cache holds the entries of positions below hv_
    int32_t tail_token_ = -1;         // the token a draft step paired with g at hv_ - 1 (-1: none)
    std::vector<float> chain_, rows_, logits_;
    std::vector<int32_t> toks_;
    int32_t chain_step_ = -1, chain_past_ = -1;
};

void Eagle3State::decode(const int32_t * tokens, const float * g, int32_t m, int32_t first, bool outputs,
                         std::atomic<bool> & interrupt) {
    const int32_t n_kv = kv_->n_kv_for(first + m);
    const int64_t key = ((int64_t) m << 32) | ((int64_t) n_kv << 1) | (outputs ? 1 : 0);
    Graph & d = dec_.prepare(key, head_, target_, *kv_, m, n_kv, outputs, /*causal =*/ true, head_.arch->build);
    dec_.inputs().fill(d, tokens, first);
    ggml_backend_tensor_set(d.inp_embd, g, 0, sizeof(float) * (size_t) m * head_.hp.n_embd);
    dec_.compute(interrupt);
}

void Eagle3State::process(const float * features, const int32_t * tokens, int32_t n, int32_t n_past,
                          std::atomic<bool> & interrupt) {
    const int32_t n_embd = head_.hp.n_embd;
    Graph & e = enc_.prepare((int64_t) n, head_, target_, *kv_, n, kv_->n_kv_for(1), true, true, head_.arch->build_encode);
    ggml_backend_tensor_set(e.inp_embd, features, 0, ggml_nbytes(e.inp_embd));
    enc_.compute(interrupt);
    rows_.resize((size_t) n * n_embd);
    ggml_backend_tensor_get(enc_.result(), rows_.data(), 0, rows_.size() * sizeof(float));
    // the entry before the batch (its token is the batch's first) unless a draft step wrote it
    // with that token
    if (hv_ == n_past && tail_token_ != tokens[0]) hv_ = n_past - 1;
    const int32_t first = std::max({hv_, n_past - 1, 0}), last = n_past + n - 2;
    const int32_t m = last - first + 1;
    if (m > 0) {
        std::vector<float> g((size_t) m * n_embd);
        toks_.resize(m);
        for (int32_t i = 0; i < m; ++i) {
            const int32_t pos = first + i;
            toks_[i] = tokens[pos + 1 - n_past];
            const float * src = pos >= n_past ? rows_.data() + (size_t) (pos - n_past) * n_embd : g_.at(pos);
            std::copy(src, src + n_embd, g.begin() + (size_t) i * n_embd);
        }
        decode(toks_.data(), g.data(), m, first, false, interrupt);
    }
    g_.store(n_past, n, rows_.data() + (size_t) (n - g_.kept(n)) * n_embd);
    hv_ = std::max(hv_, last + 1);
    tail_token_ = -1;
    chain_step_ = -1;
}

void Eagle3State::draft(int32_t token, int32_t step, int32_t n_past, std::atomic<bool> & interrupt, float * out) {
    if (n_past < 1) fail(PSL_ERR_INVALID_ARGUMENT, "EAGLE-3 drafts after the target has evaluated a token (its cache is empty)");
    if (step < 0 || (step > 0 && (chain_step_ != step - 1 || chain_past_ != n_past))) {
        fail(PSL_ERR_INVALID_ARGUMENT, "EAGLE-3 draft step %d must follow step %d at the same cache length", step, step - 1);
    }
    const int32_t pos = n_past - 1 + step;
    if (pos + 1 > n_ctx_) fail(PSL_ERR_CONTEXT_FULL, "EAGLE-3 draft at position %d: n_ctx is %d", pos, n_ctx_);
    chain_step_ = -1;   // until this step succeeds
    const float * g = step == 0 ? g_.at(n_past - 1) : chain_.data();
    if (step == 0 && hv_ > pos) hv_ = pos;   // the entry is written again, with this token
    decode(&token, g, 1, pos, true, interrupt);
    logits_.resize((size_t) n_out());
    ggml_backend_tensor_get(dec_.result(), logits_.data(), 0, logits_.size() * sizeof(float));
    spread(logits_.data(), 1, out);
    // the next step pairs its token with this step's pre-norm state
    ggml_backend_tensor_get(dec_.hidden(), chain_.data(), 0, chain_.size() * sizeof(float));
    if (step == 0 && hv_ == pos) {
        hv_ = pos + 1;
        tail_token_ = token;
    }
    chain_step_ = step;
    chain_past_ = n_past;
}

}  // namespace

std::unique_ptr<HeadState> make_eagle3_state(psl_model & head, const psl_model & target,
                                             const std::vector<ggml_backend_t> & backends, int32_t n_ctx,
                                             ggml_type type_k, ggml_type type_v) {
    return std::make_unique<Eagle3State>(head, target, backends, n_ctx, type_k, type_v);
}

}  // namespace psl
