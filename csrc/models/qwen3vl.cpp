// Qwen3-VL's dense text model ("qwen3vl": Qwen3-VL-2B .. 32B): the trunk of
// models/common/qwen3vl_common (qwen3's layer with IMROPE sections and deepstack) with a SwiGLU FFN.
#include "models/common/qwen3vl_common.h"

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

void hparams(const GgufFile & f, const std::string & a, HParams & hp) { load_qwen3vl_hparams(f, a, hp); }
void tensors(TensorLoader & tl, psl_model & m) { create_qwen3vl_tensors(tl, m, ffn_tensors); }
ggml_tensor * build(Graph & g) { return build_qwen3vl(g, ffn); }

}  // namespace

extern const ArchOps arch_qwen3vl = {"qwen3vl", hparams, tensors, build, nullptr, nullptr, false, true, true};

}  // namespace psl
