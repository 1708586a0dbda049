// Gemma 4 assistant drafting (head.h, models/gemma4_assistant.cpp), as llama.cpp's draft-mtp
// runs it with the target's memory shared: the target keeps its final normed hidden rows at
// every eval; step 0 pairs the token after the cache with the row of the position before it,
// step s the step s - 1 draft token with that step's projected state. Every step sits at the
// same position, the cache length, and attends over the target's cells before it; the assistant
// writes no cache, so truncating the target needs nothing here.
#include "engine/head.h"

#include "error.h"
#include "memory/hidden_ring.h"
#include "model.h"

namespace psl {

namespace {

class AssistantState : public HeadState {
public:
    AssistantState(psl_model & head, const psl_model & target, KvCache & target_kv,
                   const std::vector<ggml_backend_t> & backends, int32_t n_ctx)
        : HeadState(head, target, n_ctx, false, GGML_TYPE_F16, GGML_TYPE_F16), target_kv_(target_kv),
          h_(head.hp.head.n_embd_target, 256), dec_(backends) {
        chain_.assign((size_t) head.hp.head.n_embd_target, 0.0f);
    }

    bool wants_final() const override { return true; }

    void after_compute(const Graph & g, const int32_t *, int32_t n_past, std::atomic<bool> &) override {
        const ggml_tensor * t = g.final_hidden;
        const int64_t w = head_.hp.head.n_embd_target;
        if (!t || t->ne[0] != w || t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
            fail(PSL_ERR_INTERNAL, "the target's graph kept no final hidden rows for the assistant");
        }
        const int32_t rows = (int32_t) t->ne[1];
        rows_.resize((size_t) (rows * w));
        ggml_backend_tensor_get(t, rows_.data(), 0, rows_.size() * sizeof(float));
        // the rows are the batch's last ones (one when only the last logits were asked)
        const int32_t first = n_past + g.n_tokens - rows;
        const int32_t kept = h_.kept(rows);
        h_.store(first + rows - kept, kept, rows_.data() + (size_t) (rows - kept) * w);
        chain_step_ = -1;
    }

    void truncate(int32_t) override { chain_step_ = -1; }
    void clear() override {
        h_.clear();
        chain_step_ = -1;
    }

    void draft(int32_t token, int32_t step, int32_t n_past, std::atomic<bool> & interrupt, float * out) override {
        if (n_past < 1) fail(PSL_ERR_INVALID_ARGUMENT, "the assistant drafts after the target has evaluated a token (its cache is empty)");
        if (step < 0 || (step > 0 && (chain_step_ != step - 1 || chain_past_ != n_past))) {
            fail(PSL_ERR_INVALID_ARGUMENT, "assistant draft step %d must follow step %d at the same cache length", step, step - 1);
        }
        if (n_past + 1 > n_ctx_) fail(PSL_ERR_CONTEXT_FULL, "assistant draft at position %d: n_ctx is %d", n_past, n_ctx_);
        chain_step_ = -1;
        const int32_t n_kv = target_kv_.n_kv_for(n_past + 1);
        Graph & d = dec_.prepare(n_kv, head_, target_, target_kv_, 1, n_kv, true, true, head_.arch->build);
        d.sees_own = false;   // the target's cells before the draft's position only
        dec_.inputs().fill(d, &token, n_past);
        const float * h = step == 0 ? h_.at(n_past - 1) : chain_.data();
        ggml_backend_tensor_set(d.inp_embd, h, 0, sizeof(float) * chain_.size());
        dec_.compute(interrupt);
        ggml_backend_tensor_get(dec_.result(), out, 0, sizeof(float) * (size_t) head_.hp.n_vocab);
        ggml_backend_tensor_get(dec_.hidden(), chain_.data(), 0, sizeof(float) * chain_.size());
        chain_step_ = step;
        chain_past_ = n_past;
    }

protected:
    void process(const float *, const int32_t *, int32_t, int32_t, std::atomic<bool> &) override {}

private:
    KvCache & target_kv_;
    HiddenRing h_;                 // the target's final normed hidden rows by position
    HeadGraph dec_;
    std::vector<float> rows_, chain_;
    int32_t chain_step_ = -1, chain_past_ = -1;
};

}  // namespace

std::unique_ptr<HeadState> make_assistant_state(psl_model & head, const psl_model & target, KvCache & target_kv,
                                                const std::vector<ggml_backend_t> & backends, int32_t n_ctx) {
    return std::make_unique<AssistantState>(head, target, target_kv, backends, n_ctx);
}

}  // namespace psl
