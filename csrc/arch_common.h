// What an architecture file needs: the graph pieces, the tensor loader, the registry.
#pragma once

#include "graph_common.h"

#include <cmath>

namespace psl {

// token_embd, output_norm and the output head; the head is token_embd itself (tied) when the
// file has no output.weight.
void create_embeddings(TensorLoader & tl, psl_model & m);

extern const ArchOps arch_llama;

}  // namespace psl
