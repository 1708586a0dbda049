// Prints llama.cpp's token ids for texts, to compare our tokenizer with it on a vocabulary-only
// GGUF (llama.cpp's models/ggml-vocab-*.gguf). Not part of the build or of CI.
//
//   g++ -O2 -std=c++17 llamacpp_tokenize.cpp -I LLAMA/include -I LLAMA/ggml/include \
//       BUILD/src/libllama.a BUILD/ggml/src/libggml.a BUILD/ggml/src/libggml-cpu.a BUILD/ggml/src/libggml-base.a \
//       -fopenmp -lpthread -ldl -o tokenize
//   tokenize VOCAB.gguf < texts.hex     (one text a line, its UTF-8 bytes in hex)
// Output: one line a text, its token ids (no BOS/EOS added, special tokens not parsed).
#include "llama.h"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s VOCAB.gguf < texts.hex\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::string line;
    while (std::getline(std::cin, line)) {
        std::string text;
        for (size_t i = 0; i + 1 < line.size(); i += 2) text += (char) std::stoi(line.substr(i, 2), nullptr, 16);
        std::vector<llama_token> ids(text.size() + 8);
        const int n = llama_tokenize(vocab, text.data(), (int) text.size(), ids.data(), (int) ids.size(), false, false);
        if (n < 0) return 1;
        for (int i = 0; i < n; ++i) std::printf(i ? " %d" : "%d", ids[i]);
        std::printf("\n");
    }
    llama_model_free(model);
    return 0;
}
