// Prints llama.cpp's grammar decisions for a JSON list of cases, as reference data for
// pyllamaspec's grammar engine (tests/data/reference/grammar_masks_llamacpp.json, made by
// scripts/grammar_reference.py). Not part of the build or CI.
//
// For each case: the grammar (GBNF, start rule "root") is initialized for the model's
// vocabulary with llama_sampler_init_grammar, the prefix tokens are accepted one by one, then
// the grammar sampler is applied to every token of the vocabulary: the allowed ids are those it
// leaves finite. A grammar llama.cpp refuses gives {"error": true}.
//
// Build (LCPP = llama.cpp sources, B = its build dir):
//   g++ -O2 -std=c++17 scripts/llamacpp_grammar.cpp -I $LCPP/include -I $LCPP/ggml/include \
//       -I $LCPP/common -I $LCPP/vendor -o /tmp/llamacpp_grammar \
//       $B/common/libllama-common.a $B/vendor/cpp-httplib/libcpp-httplib.a \
//       $B/common/libllama-common-base.a $B/src/libllama.a $B/ggml/src/libggml.a \
//       $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -ldl -lm -fopenmp -lpthread
// Run:
//   /tmp/llamacpp_grammar MODEL.gguf < cases.json > out.json
// Input: [{"grammar": "...", "prefix": [ids]}, ...]
// Output: [{"allowed": [ids...]} or {"error": "..."}, ...]
#include "llama.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

using json = nlohmann::ordered_json;

static void quiet(ggml_log_level, const char *, void *) {}

static json run_case(const llama_vocab * vocab, const json & c) {
    const std::string g = c.at("grammar").get<std::string>();
    llama_sampler * s = llama_sampler_init_grammar(vocab, g.c_str(), "root");
    if (!s) return json{{"error", "refused"}};
    try {
        for (const auto & t : c.at("prefix")) llama_sampler_accept(s, t.get<llama_token>());
    } catch (const std::exception & e) {
        llama_sampler_free(s);
        return json{{"error", std::string("prefix: ") + e.what()}};
    }
    const int n = llama_vocab_n_tokens(vocab);
    std::vector<llama_token_data> data((size_t) n);
    for (int i = 0; i < n; ++i) data[(size_t) i] = {i, 0.0f, 0.0f};
    llama_token_data_array arr = {data.data(), data.size(), -1, false};
    llama_sampler_apply(s, &arr);
    json allowed = json::array();
    for (size_t i = 0; i < arr.size; ++i) {
        if (std::isfinite(arr.data[i].logit)) allowed.push_back(arr.data[i].id);
    }
    llama_sampler_free(s);
    return json{{"allowed", allowed}};
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf < cases.json\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    json out = json::array();
    for (const auto & c : json::parse(input)) out.push_back(run_case(vocab, c));
    std::cout << out.dump() << "\n";
    llama_model_free(model);
    return 0;
}
