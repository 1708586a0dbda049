// Qwen2 (Qwen 1.5, Qwen2, Qwen2.5 and their Coder/Math variants): the llama layer with biases
// on the q, k and v projections and NEOX-ordered rope.
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile &, const std::string &, HParams &) {}

void tensors(TensorLoader & tl, psl_model & m) { create_llama_like(tl, m, /*bias =*/ true, /*qk_norm =*/ false); }

ggml_tensor * build(Graph & g) { return build_llama_like(g, GGML_ROPE_TYPE_NEOX); }

}  // namespace

extern const ArchOps arch_qwen2 = {"qwen2", hparams, tensors, build, nullptr, nullptr, false, true};

}  // namespace psl
