// Prints llama.cpp's EAGLE-3 / DFlash / Gemma 4 assistant draft logits for token-id prompts,
// computed the way its draft-eagle3 / draft-dflash / draft-mtp drivers compute them
// (common/speculative.cpp), and the draft tokens
// its own driver proposes (common_speculative_draft) for the same prompt, so that the logits are
// known to follow its conventions. Not part of the build or of CI.
//
//   g++ -O2 -std=c++17 llamacpp_heads.cpp -I LLAMA/include -I LLAMA/ggml/include -I LLAMA/src -I LLAMA/common \
//       B/common/libllama-common.a B/common/libllama-common-base.a B/src/libllama.a B/ggml/src/libggml.a \
//       B/ggml/src/libggml-cpu.a B/ggml/src/libggml-base.a -fopenmp -lpthread -ldl -o probe_heads
//   probe_heads TARGET HEAD STEPS < prompts.txt     (one prompt a line: space-separated token ids)
// The target holds all but the last token of a prompt; the last one is the token the draft
// follows. Output per prompt p: "L p s logit ..." per draft step s (EAGLE-3: the chained
// steps, each fed the previous step's greedy token; DFlash: the STEPS mask positions of one
// block; the assistant: its chained steps, all at the position after the cache), then
// "T p tok ..." (common_speculative_draft's tokens, greedy, STEPS at most).
#include "common.h"
#include "llama.h"
#include "llama-ext.h"
#include "speculative.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

struct Probe {
    llama_model * tgt_m = nullptr, * dft_m = nullptr;
    llama_context * tgt = nullptr, * dft = nullptr;
    std::vector<int32_t> ids;     // the head's target layers
    int n_embd = 0, n_vocab = 0, steps = 0;
    bool dflash = false, assistant = false;

    void contexts() {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 512;
        cp.n_batch = cp.n_ubatch = 512;
        tgt = llama_init_from_model(tgt_m, cp);
        llama_context_params cd = cp;
        cd.n_rs_seq = 0;
        cd.ctx_other = tgt;
        if (assistant) cd.ctx_type = LLAMA_CONTEXT_TYPE_MTP;   // as common_speculative_init_result makes it
        dft = llama_init_from_model(dft_m, cd);
        if (!tgt || !dft) std::exit(1);
    }
    void free_contexts() {
        llama_free(dft);
        llama_free(tgt);
    }

    // the target evaluates prompt[0..n): returns its layer-input rows [n][n_ids * n_embd]
    std::vector<float> target_features(const std::vector<llama_token> & p, int n) {
        common_batch b(tgt);
        for (int i = 0; i < n; ++i) b.add(p[i], i, 0, i == n - 1);
        if (llama_process(tgt, LLAMA_PROCESS_TYPE_DECODE, b.get()) != 0) std::exit(1);
        const size_t w = ids.size() * n_embd;
        std::vector<float> f((size_t) n * w);
        for (size_t k = 0; k < ids.size(); ++k) {
            const float * rows = llama_get_embeddings_layer_inp(tgt, ids[k]);
            if (!rows) std::exit(1);
            for (int i = 0; i < n; ++i) std::copy(rows + (size_t) i * n_embd, rows + (size_t) (i + 1) * n_embd, f.begin() + i * w + k * n_embd);
        }
        return f;
    }

    void eagle3(const std::vector<llama_token> & p, int pi) {
        const int n = (int) p.size() - 1, nd = llama_model_n_embd(dft_m);
        const size_t w = ids.size() * n_embd;
        std::vector<float> f = target_features(p, n);
        common_batch enc(dft);
        for (int i = 0; i < n; ++i) {
            llama_pos pos = i;
            enc.add_embd({f.data() + i * w, 1, w}, &pos, 0, true);
        }
        if (llama_process(dft, LLAMA_PROCESS_TYPE_ENCODE, enc.get()) != 0) std::exit(1);
        std::vector<float> g(llama_get_embeddings_nextn(dft), llama_get_embeddings_nextn(dft) + (size_t) n * nd);
        common_batch dec(dft);
        for (int P = 0; P + 1 < n; ++P) {   // the entry at P pairs the token at P + 1 with g of P
            const int32_t idx = dec.add(p[P + 1], P, 0, false);
            dec.set_embd(idx, {g.data() + (size_t) P * nd, 1, (size_t) nd});
        }
        if (dec.size() && llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, dec.get()) != 0) std::exit(1);
        std::vector<float> cur(g.end() - nd, g.end());
        llama_token tok = p[n];
        for (int s = 0; s < steps; ++s) {
            dec.clear();
            const int32_t idx = dec.add(tok, n - 1 + s, 0, true);
            dec.set_embd(idx, {cur.data(), 1, (size_t) nd});
            if (llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, dec.get()) != 0) std::exit(1);
            const float * lg = llama_get_logits_ith(dft, 0);
            const float * h = llama_get_embeddings_nextn_ith(dft, 0);
            print(pi, s, lg);
            tok = (llama_token) (std::max_element(lg, lg + n_vocab) - lg);
            cur.assign(h, h + nd);
        }
    }

    void dflash_block(const std::vector<llama_token> & p, int pi) {
        const int n = (int) p.size() - 1;
        const size_t w = ids.size() * n_embd;
        std::vector<float> f = target_features(p, n);
        common_batch inj(dft);
        for (int i = 0; i < n; ++i) {
            const llama_pos pos[4] = {i, i, i, 0};
            inj.add_embd({f.data() + i * w, 1, w}, pos, 0, false);
        }
        if (llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, inj.get()) != 0) std::exit(1);
        const llama_token mask = llama_vocab_mask(llama_model_get_vocab(dft_m));
        common_batch blk(dft);
        for (int i = 0; i <= steps; ++i) blk.add(i == 0 ? p[n] : mask, n + i, 0, true);
        if (llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, blk.get()) != 0) std::exit(1);
        for (int s = 0; s < steps; ++s) print(pi, s, llama_get_logits_ith(dft, s + 1));
    }

    // Gemma 4's assistant (draft-mtp with the target's memory shared): every step at the
    // position after the cache, fed the target's final normed row, then its own projected state
    void gemma4_assistant(const std::vector<llama_token> & p, int pi) {
        const int n = (int) p.size() - 1;
        common_batch b(tgt);
        for (int i = 0; i < n; ++i) b.add(p[i], i, 0, i == n - 1);
        if (llama_process(tgt, LLAMA_PROCESS_TYPE_DECODE, b.get()) != 0) std::exit(1);
        const float * hr = llama_get_embeddings_nextn_ith(tgt, n - 1);
        if (!hr) std::exit(1);
        std::vector<float> h(hr, hr + n_embd);
        common_batch d(dft);
        llama_token tok = p[n];
        for (int s = 0; s < steps; ++s) {
            d.clear();
            const int32_t idx = d.add(tok, n, 0, true);
            d.set_embd(idx, {h.data(), 1, (size_t) n_embd});
            if (llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, d.get()) != 0) std::exit(1);
            const float * lg = llama_get_logits_ith(dft, 0);
            const float * hn = llama_get_embeddings_nextn_ith(dft, 0);
            if (!lg || !hn) std::exit(1);
            print(pi, s, lg);
            tok = (llama_token) (std::max_element(lg, lg + n_vocab) - lg);
            h.assign(hn, hn + n_embd);
        }
    }

    // llama.cpp's own driver on the same prompt
    void driver(const std::vector<llama_token> & p, int pi) {
        common_params_speculative sp;
        sp.types = {assistant ? COMMON_SPECULATIVE_TYPE_DRAFT_MTP
                    : dflash  ? COMMON_SPECULATIVE_TYPE_DRAFT_DFLASH
                              : COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3};
        sp.draft.n_max = steps;
        sp.draft.n_min = 0;
        sp.draft.p_min = 0.0f;
        sp.draft.backend_sampling = false;
        sp.draft.ctx_tgt = tgt;
        sp.draft.ctx_dft = dft;
        common_speculative * spec = common_speculative_init(sp, 1);
        if (!spec) std::exit(1);
        const int n = (int) p.size() - 1;
        llama_tokens prompt(p.begin(), p.begin() + n), result;
        common_batch b(tgt);
        for (int i = 0; i < n; ++i) b.add(p[i], i, 0, i == n - 1);
        if (llama_process(tgt, LLAMA_PROCESS_TYPE_DECODE, b.get()) != 0) std::exit(1);
        if (!common_speculative_process(spec, b)) std::exit(1);
        common_speculative_begin(spec, 0, prompt);
        common_speculative_get_draft_params(spec, 0) = {true, -1, n, p[n], &prompt, &result};
        common_speculative_draft(spec);
        std::printf("T %d", pi);
        for (llama_token t : result) std::printf(" %d", t);
        std::printf("\n");
        common_speculative_free(spec);
    }

    void print(int pi, int s, const float * lg) const {
        std::printf("L %d %d", pi, s);
        for (int k = 0; k < n_vocab; ++k) std::printf(" %.9g", lg[k]);
        std::printf("\n");
    }
};

int main(int argc, char ** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s TARGET HEAD STEPS < prompts.txt\n", argv[0]);
        return 2;
    }
    if (!std::getenv("PROBE_VERBOSE")) llama_log_set(quiet, nullptr);
    llama_backend_init();
    Probe pr;
    pr.steps = std::atoi(argv[3]);
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    pr.tgt_m = llama_model_load_from_file(argv[1], mp);
    pr.dft_m = llama_model_load_from_file(argv[2], mp);
    if (!pr.tgt_m || !pr.dft_m) return 1;
    char arch[64] = {};
    llama_model_meta_val_str(pr.dft_m, "general.architecture", arch, sizeof(arch));
    pr.dflash = std::strcmp(arch, "dflash") == 0;
    pr.assistant = std::strcmp(arch, "gemma4-assistant") == 0;
    if (!pr.assistant) {
        pr.ids.assign(llama_model_target_layer_ids(pr.dft_m),
                      llama_model_target_layer_ids(pr.dft_m) + llama_model_target_layer_ids_n(pr.dft_m));
    }
    pr.n_embd = llama_model_n_embd(pr.tgt_m);
    pr.n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(pr.tgt_m));
    std::vector<std::vector<llama_token>> prompts;
    for (std::string line; std::getline(std::cin, line);) {
        std::istringstream in(line);
        prompts.emplace_back();
        for (llama_token t; in >> t;) prompts.back().push_back(t);
    }
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
        pr.contexts();
        for (int32_t id : pr.ids) llama_set_embeddings_layer_inp(pr.tgt, (uint32_t) id, true);
        llama_set_embeddings_nextn(pr.dft, true, /*masked*/ true);
        if (pr.assistant) {
            llama_set_embeddings_nextn(pr.tgt, true, /*masked*/ false);
            pr.gemma4_assistant(prompts[pi], (int) pi);
        } else if (pr.dflash) {
            char c[16] = {};
            const bool causal = llama_model_meta_val_str(pr.dft_m, "dflash.attention.causal", c, sizeof(c)) >= 0 &&
                                std::strcmp(c, "true") == 0;
            llama_set_causal_attn(pr.dft, causal);
            pr.dflash_block(prompts[pi], (int) pi);
        } else {
            pr.eagle3(prompts[pi], (int) pi);
        }
        pr.free_contexts();
        pr.contexts();
        pr.driver(prompts[pi], (int) pi);
        pr.free_contexts();
    }
    llama_model_free(pr.dft_m);
    llama_model_free(pr.tgt_m);
    return 0;
}
