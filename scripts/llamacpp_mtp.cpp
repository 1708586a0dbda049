// Prints llama.cpp's MTP (NextN) draft logits for token-id prompts, the way its draft-mtp
// speculative driver computes them (common/speculative.cpp): the target decodes all but the
// last token, keeping its h_nextn rows; the MTP context catches up on (x_p, h_{p-1}) for those
// positions (h_{-1} = 0); then STEPS chained draft steps run from the last token, each feeding
// its greedy token and its own h_nextn row to the next. Not part of the build or of CI.
//
//   g++ -O2 -std=c++17 llamacpp_mtp.cpp -I LLAMA/include -I LLAMA/ggml/include -I LLAMA/src \
//       B/src/libllama.a B/ggml/src/libggml.a B/ggml/src/libggml-cpu.a B/ggml/src/libggml-base.a \
//       -fopenmp -lpthread -ldl -o probe_mtp
//   probe_mtp MODEL STEPS < prompts.txt     (one prompt a line: space-separated token ids)
// Output: one line a step: "p s token logit logit ..." (the step's input token, then every logit).
#include "llama.h"
#include "llama-ext.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

static bool add(llama_batch_ext * b, llama_token t, llama_pos pos, const float * h, int n_embd, bool out) {
    const int32_t idx = llama_batch_ext_add_token(b, 0, t);
    if (idx < 0) return false;
    llama_pos p[4] = {pos, 0, 0, 0};
    llama_batch_ext_set_pos(b, idx, p);
    if (h && !llama_batch_ext_set_embd_token(b, idx, {h, 1, (size_t) n_embd})) return false;
    if (out) llama_batch_ext_set_output_logits(b, idx, true);
    return true;
}

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL STEPS < prompts.txt\n", argv[0]);
        return 2;
    }
    const int steps = std::atoi(argv[2]);
    if (!std::getenv("PROBE_VERBOSE")) llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mtp = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = cp.n_ubatch = 512;
    llama_context * tgt = llama_init_from_model(model, cp);
    if (!tgt) return 1;
    llama_context_params cd = cp;
    cd.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cd.n_rs_seq = 0;
    cd.ctx_other = tgt;
    llama_context * mtp = llama_init_from_model(model, cd);
    if (!mtp) return 1;
    llama_set_embeddings_nextn(tgt, true, /*masked*/ false);
    llama_set_embeddings_nextn(mtp, true, /*masked*/ true);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int n_embd = llama_model_n_embd(model);
    llama_batch_ext * b = llama_batch_ext_init(tgt);
    llama_batch_ext * bm = llama_batch_ext_init(mtp);

    std::string line;
    for (int p = 0; std::getline(std::cin, line); ++p) {
        std::istringstream in(line);
        std::vector<llama_token> ids;
        for (llama_token t; in >> t;) ids.push_back(t);
        const int n = (int) ids.size() - 1;   // the target holds ids[0..n)
        llama_memory_clear(llama_get_memory(tgt), true);
        llama_memory_clear(llama_get_memory(mtp), true);
        llama_batch_ext_clear(b);
        for (int i = 0; i < n; ++i) add(b, ids[i], i, nullptr, n_embd, true);
        if (llama_process(tgt, LLAMA_PROCESS_TYPE_DECODE, b) != 0) return 1;
        std::vector<float> h((size_t) (n + 1) * n_embd, 0.0f);   // row i + 1: h_i; row 0: zeros
        for (int i = 0; i < n; ++i) {
            const float * r = llama_get_embeddings_nextn_ith(tgt, i);
            if (!r) return 1;
            std::copy(r, r + n_embd, h.begin() + (size_t) (i + 1) * n_embd);
        }
        llama_batch_ext_clear(bm);
        for (int i = 0; i < n; ++i) add(bm, ids[i], i, h.data() + (size_t) i * n_embd, n_embd, false);
        if (llama_process(mtp, LLAMA_PROCESS_TYPE_DECODE, bm) != 0) return 1;
        std::vector<float> cur(h.begin() + (size_t) n * n_embd, h.end());
        llama_token tok = ids[n];
        for (int s = 0; s < steps; ++s) {
            llama_batch_ext_clear(bm);
            add(bm, tok, n + s, cur.data(), n_embd, true);
            if (llama_process(mtp, LLAMA_PROCESS_TYPE_DECODE, bm) != 0) return 1;
            const float * lg = llama_get_logits_ith(mtp, 0);
            const float * hn = llama_get_embeddings_nextn_ith(mtp, 0);
            if (!lg || !hn) return 1;
            std::printf("%d %d %d", p, s, tok);
            for (int k = 0; k < n_vocab; ++k) std::printf(" %.9g", lg[k]);
            std::printf("\n");
            tok = (llama_token) (std::max_element(lg, lg + n_vocab) - lg);
            cur.assign(hn, hn + n_embd);
        }
    }
    llama_batch_ext_free(b);
    llama_batch_ext_free(bm);
    llama_free(mtp);
    llama_free(tgt);
    llama_model_free(model);
    return 0;
}
