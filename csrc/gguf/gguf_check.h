// A pass over a GGUF header before ggml parses it. ggml's parser stores raw type fields in enums
// and multiplies tensor shapes before (or without) range checks: on a hostile file that is
// undefined behaviour even when it ends in a refusal. This pass walks every field ggml will read,
// in ggml's order, with bounded reads, and refuses what ggml could not take without it.
#pragma once

#include <cstddef>
#include <string>

namespace psl {

// Fails with PSL_ERR_FORMAT, naming the field (key, tensor, value) and what is wrong with it, when
// the header of the GGUF file open on fd (file_size bytes, `path` for messages) is not one that
// ggml's gguf parser can read without undefined behaviour. Reads the header only, never the data.
void check_gguf_header(int fd, size_t file_size, const std::string & path);

}  // namespace psl
