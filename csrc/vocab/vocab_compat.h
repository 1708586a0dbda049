// A draft and its target's vocabulary, on the GGUF tokenizer arrays: can the draft speculate
// for the target, and which ids a restricted draft head should cover (the C API:
// psl_vocab_compatible, psl_vocab_draft_ids in api/api_vocab.cpp).
#pragma once

#include "gguf/gguf_file.h"

#include <cstdint>
#include <vector>

namespace psl {

// Only if both tokenize alike: the same number of logits (n_vocab_*), the same ids with the same
// token text and type, the same special tokens, tokenizer model and pre-tokenizer. Throws
// psl::Error otherwise: PSL_ERR_UNSUPPORTED naming the first difference, PSL_ERR_NO_VOCAB
// without token texts.
void check_vocab_compatible(const GgufFile & target, int32_t n_vocab_target, const GgufFile & draft,
                            int32_t n_vocab_draft);
// At most n of the n_vocab ids, sorted: the control, user-defined and byte tokens and the single
// characters below U+2500 always, then the most common merges.
std::vector<int32_t> draft_head_ids(const GgufFile & f, int32_t n_vocab, int32_t n);

}  // namespace psl
