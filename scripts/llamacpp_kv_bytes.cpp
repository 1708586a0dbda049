// Prints the bytes llama.cpp's KV cache holds per token for a model, F16 cache (its default):
// the growth per token of a sequence's saved state (llama_state_seq_get_size after 32 tokens
// minus after 16, over 16: its cells' K and V rows in every layer plus a few bytes of cell
// metadata), with an F32 cache minus with an F16 one (the metadata cancels; what is left is
// 2 bytes per cached value, the F16 cache's data). Layers whose cache does not grow with the
// context (a sliding window's ring) are not counted. Not part of the build or of CI
// (scripts/arch_reference.py runs it for the memory table of issue 24).
//
//   g++ -O1 -std=c++17 llamacpp_kv_bytes.cpp -I LLAMA/include -I LLAMA/ggml/include -o kv_bytes \
//       B/src/libllama.a B/ggml/src/libggml.a B/ggml/src/libggml-cpu.a B/ggml/src/libggml-base.a \
//       -ldl -lm -fopenmp -lpthread
//   kv_bytes MODEL
#include "llama.h"

#include <cstdio>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

static size_t state_after(llama_context * ctx, int n) {
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; ++i) {
        batch.token[i] = 2 + i % 30;
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i == n - 1;
    }
    batch.n_tokens = n;
    const bool ok = llama_decode(ctx, batch) == 0;
    llama_batch_free(batch);
    return ok ? llama_state_seq_get_size(ctx, 0) : 0;
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    size_t per_token[2];
    for (int f32 = 0; f32 < 2; ++f32) {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 512;
        cp.type_k = cp.type_v = f32 ? GGML_TYPE_F32 : GGML_TYPE_F16;
        llama_context * ctx = llama_init_from_model(model, cp);
        if (!ctx) return 1;
        const size_t a = state_after(ctx, 16), b = state_after(ctx, 32);
        llama_free(ctx);
        if (!a || !b) return 1;
        per_token[f32] = (b - a) / 16;
    }
    std::printf("%zu\n", per_token[1] - per_token[0]);
    llama_model_free(model);
    return 0;
}
