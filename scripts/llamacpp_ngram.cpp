// Replays a recorded token stream through llama.cpp's n-gram speculative kinds
// (common_speculative_* of common/speculative.cpp, no model needed) and prints each round's
// draft, as llama-server drives them: begin() with the prompt, then per round a draft after the
// tokens in the cache and the last sampled one; the target "accepts" the draft's prefix that
// matches the stream, and accept() is told how much when the draft was not empty. Not part of
// the build or of CI.
//
//   g++ -O2 -std=c++17 llamacpp_ngram.cpp -I LLAMA/include -I LLAMA/ggml/include -I LLAMA/common \
//       B/common/libllama-common.a B/common/libllama-common-base.a B/src/libllama.a B/ggml/src/libggml.a \
//       B/ggml/src/libggml-cpu.a B/ggml/src/libggml-base.a -fopenmp -lpthread -ldl -o probe_ngram
//   probe_ngram TYPES [key=value ...] < stream.txt
// TYPES: llama.cpp's --spec-type list (e.g. ngram-mod,ngram-simple). Keys: simple.n simple.m
// mapk.n mapk.m mapk.hits k4v.n k4v.m k4v.hits mod.match mod.max mod.min lcs lcd (the
// --spec-ngram-* flags and the lookup cache files). stream.txt: the prompt's ids on the first
// line, the generated ids after it on the second. Output: "R c n_acc t ..." per round (c: tokens
// in the cache; the draft's tokens).
#include "common.h"
#include "speculative.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

static std::vector<llama_token> read_line() {
    std::string line;
    std::getline(std::cin, line);
    std::istringstream in(line);
    std::vector<llama_token> v;
    for (llama_token t; in >> t;) v.push_back(t);
    return v;
}

static void set_param(common_params_speculative & p, const std::string & k, const std::string & v) {
    const int x = std::atoi(v.c_str());
    if (k == "simple.n") p.ngram_simple.size_n = x;
    else if (k == "simple.m") p.ngram_simple.size_m = x;
    else if (k == "mapk.n") p.ngram_map_k.size_n = x;
    else if (k == "mapk.m") p.ngram_map_k.size_m = x;
    else if (k == "mapk.hits") p.ngram_map_k.min_hits = x;
    else if (k == "k4v.n") p.ngram_map_k4v.size_n = x;
    else if (k == "k4v.m") p.ngram_map_k4v.size_m = x;
    else if (k == "k4v.hits") p.ngram_map_k4v.min_hits = x;
    else if (k == "mod.match") p.ngram_mod.n_match = x;
    else if (k == "mod.max") p.ngram_mod.n_max = x;
    else if (k == "mod.min") p.ngram_mod.n_min = x;
    else if (k == "lcs") p.ngram_cache.lookup_cache_static = v;
    else if (k == "lcd") p.ngram_cache.lookup_cache_dynamic = v;
    else {
        std::fprintf(stderr, "unknown key %s\n", k.c_str());
        std::exit(2);
    }
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s TYPES [key=value ...] < stream.txt\n", argv[0]);
        return 2;
    }
    common_params_speculative p;
    p.types = common_speculative_types_from_names(string_split<std::string>(argv[1], ','));
    for (int i = 2; i < argc; ++i) {
        const std::string kv = argv[i];
        const size_t eq = kv.find('=');
        set_param(p, kv.substr(0, eq), kv.substr(eq + 1));
    }
    const std::vector<llama_token> prompt = read_line(), gen = read_line();
    std::vector<llama_token> text = prompt;
    text.insert(text.end(), gen.begin(), gen.end());

    common_speculative * spec = common_speculative_init(p, 1);
    if (!spec) return 1;
    common_speculative_begin(spec, 0, prompt);
    size_t c = prompt.size();
    while (c + 1 < text.size()) {
        llama_tokens cache(text.begin(), text.begin() + c), draft;
        common_speculative_get_draft_params(spec, 0) = {true, -1, (llama_pos) c, text[c], &cache, &draft};
        common_speculative_draft(spec);
        size_t n_acc = 0;
        while (n_acc < draft.size() && c + 1 + n_acc < text.size() && draft[n_acc] == text[c + 1 + n_acc]) ++n_acc;
        std::printf("R %zu %zu", c, n_acc);
        for (llama_token t : draft) std::printf(" %d", t);
        std::printf("\n");
        if (!draft.empty()) common_speculative_accept(spec, 0, (uint16_t) n_acc);
        c += n_acc + 1;
    }
    common_speculative_free(spec);
    return 0;
}
