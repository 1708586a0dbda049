// Prints llama.cpp's top-5 logits at every position of token-id prompts, to compare its
// numerics with ours on a device (e.g. CUDA vs CPU). Not part of the build or of CI.
//
//   g++ -O2 -std=c++17 llamacpp_logits.cpp -I LLAMA/include -I LLAMA/ggml/include -L BUILD/bin -lllama -o probe
//   (static llama.cpp build tree B: B/src/libllama.a B/ggml/src/libggml.a B/ggml/src/libggml-cpu.a
//    B/ggml/src/libggml-base.a -ldl -lm -fopenmp -lpthread in place of -lllama)
//   probe MODEL N_GPU_LAYERS [all | gen N | seq] < prompts.txt   (one prompt a line: space-separated ids)
// Output: one line a prompt position: "p i id:logit id:logit ..." (the 5 largest logits; with
// `all`, every logit in id order, %.9g, for tiny-vocabulary fixtures: scripts/moe_reference.py,
// scripts/qwen35_reference.py). With `gen N`, after the prompt's lines, up to N greedy steps
// (argmax of the raw logits, as llama-server at temperature 0), one line each:
// "p g s id:logit ..." (the top 5 that chose token id, the first), ending after an end-of-generation
// token (scripts/chat_reference.py). With `seq`, the prompt is evaluated one token at a time (the
// top-5 lines as without it): ggml's kernels depend on the batch size (scripts/fixture_spread.py
// compares the two). PROBE_THREADS sets the threads (default: llama.cpp's); PROBE_FLASH_ATTN=off
// disables flash attention (another set of kernels: llama.cpp's own spread).
// Each prompt starts from a cleared memory (KV cache or hybrid).
#include "llama.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL N_GPU_LAYERS [all | gen N | seq] < prompts.txt\n", argv[0]);
        return 2;
    }
    const bool all = argc > 3 && std::string(argv[3]) == "all";
    const int n_gen = argc > 4 && std::string(argv[3]) == "gen" ? std::atoi(argv[4]) : 0;
    const bool seq = argc > 3 && std::string(argv[3]) == "seq";
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = std::atoi(argv[2]);
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = cp.n_ubatch = 512;
    if (const char * t = std::getenv("PROBE_THREADS")) cp.n_threads = cp.n_threads_batch = std::atoi(t);
    if (const char * fa = std::getenv("PROBE_FLASH_ATTN"); fa && std::string(fa) == "off") {
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<int> order(n_vocab);
    auto top5 = [&](const float * lg) {
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                          [&](int a, int b) { return lg[a] > lg[b]; });
        for (int k = 0; k < 5; ++k) std::printf(" %d:%.6f", order[k], lg[order[k]]);
        std::printf("\n");
    };

    std::string line;
    for (int p = 0; std::getline(std::cin, line); ++p) {
        std::istringstream in(line);
        std::vector<llama_token> ids;
        for (llama_token t; in >> t;) ids.push_back(t);
        llama_memory_clear(llama_get_memory(ctx), true);
        if (seq) {
            for (size_t i = 0; i < ids.size(); ++i) {
                llama_batch one = llama_batch_get_one(&ids[i], 1);
                if (llama_decode(ctx, one) != 0) return 1;
                std::printf("%d %zu", p, i);
                top5(llama_get_logits_ith(ctx, -1));
            }
            continue;
        }
        llama_batch batch = llama_batch_init((int) ids.size(), 0, 1);
        for (size_t i = 0; i < ids.size(); ++i) {
            batch.token[i] = ids[i];
            batch.pos[i] = (llama_pos) i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = 1;
        }
        batch.n_tokens = (int) ids.size();
        if (llama_decode(ctx, batch) != 0) return 1;
        for (size_t i = 0; i < ids.size(); ++i) {
            const float * lg = llama_get_logits_ith(ctx, (int) i);
            if (all) {
                std::printf("%d %zu", p, i);
                for (int k = 0; k < n_vocab; ++k) std::printf(" %.9g", lg[k]);
                std::printf("\n");
                continue;
            }
            std::printf("%d %zu", p, i);
            top5(lg);
        }
        llama_batch_free(batch);
        const float * lg = llama_get_logits_ith(ctx, (int) ids.size() - 1);
        for (int s = 0; s < n_gen; ++s) {
            std::printf("%d g %d", p, s);
            top5(lg);
            llama_token t = order[0];
            if (llama_vocab_is_eog(vocab, t)) break;
            llama_batch one = llama_batch_get_one(&t, 1);
            if (llama_decode(ctx, one) != 0) return 1;
            lg = llama_get_logits_ith(ctx, -1);
        }
    }
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
