// Qwen3 (dense): the llama layer with per-head RMS norms on q and k before rope, no biases,
// NEOX-ordered rope, head size from attention.key_length.
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile &, const std::string &, HParams &) {}

void tensors(TensorLoader & tl, psl_model & m) { create_llama_like(tl, m, /*bias =*/ false, /*qk_norm =*/ true); }

ggml_tensor * build(Graph & g) { return build_llama_like(g, GGML_ROPE_TYPE_NEOX); }

}  // namespace

extern const ArchOps arch_qwen3 = {"qwen3", hparams, tensors, build, nullptr, nullptr, false, true};

}  // namespace psl
