// Qwen3.5 (dense, "qwen35"): the hybrid trunk of models/common/qwen35_common.cpp (Gated
// DeltaNet linear attention + gated full attention, the NextN / MTP block) with a SwiGLU FFN in
// every layer (post-attention RMS norm as its pre-norm).
#include "models/common/qwen35_common.h"

namespace psl {

namespace {

void ffn_tensors(TensorLoader & tl, psl_model & m, int il) {
    const int64_t n_embd = m.hp.n_embd, n_ff = m.hp.n_ff;
    Layer & l = m.layers[il];
    l.ffn_gate = tl.layer_matrix(il, "ffn_gate.weight", {n_embd, n_ff});
    l.ffn_up = tl.layer_matrix(il, "ffn_up.weight", {n_embd, n_ff});
    l.ffn_down = tl.layer_matrix(il, "ffn_down.weight", {n_ff, n_embd});
}

ggml_tensor * ffn(Graph & g, const Layer & l, ggml_tensor * x) { return g.ffn_swiglu(x, l); }

const Qwen35Ffn k_ffn = {ffn_tensors, ffn};

void hparams(const GgufFile & f, const std::string & a, HParams & hp) { load_qwen35_hparams(f, a, hp); }
void tensors(TensorLoader & tl, psl_model & m) { create_qwen35_tensors(tl, m, k_ffn); }
ggml_tensor * build(Graph & g) { return build_qwen35(g, k_ffn); }
ggml_tensor * build_mtp(Graph & g) { return build_qwen35_mtp(g, k_ffn); }

}  // namespace

extern const ArchOps arch_qwen35 = {"qwen35", hparams, tensors, build, build_mtp, nullptr, false, true, true};

}  // namespace psl
