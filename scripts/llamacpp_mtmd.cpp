// Prints what llama.cpp's libmtmd does with one image in a prompt: the preprocessed image the
// vision encoder was fed, the image embeddings, the chunks, the logits after the prompt and a few
// greedy steps. For scripts/vision_reference.py (tests/data/reference/vision_gemma3.json) and
// scripts/vision_reference_qwen.py (vision_qwen3vl.json). Not part of the build or of CI.
//
//   L=/path/to/llama.cpp B=/path/to/build   (static: BUILD_SHARED_LIBS=OFF, target mtmd); one command:
//   g++ -O2 -std=c++17 llamacpp_mtmd.cpp -I $L/include -I $L/ggml/include -I $L/tools/mtmd
//       $B/tools/mtmd/libmtmd.a $B/vendor/hash/libvendor-hash.a $B/src/libllama.a $B/ggml/src/libggml.a
//       $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -fopenmp -lpthread -ldl -o /tmp/probe_mtmd
//   probe_mtmd TEXT_MODEL MMPROJ IMAGE PROMPT_BEFORE PROMPT_AFTER N_GEN
//
// The prompt is PROMPT_BEFORE + mtmd_default_marker() + PROMPT_AFTER, tokenized by mtmd_tokenize
// (add_special and parse_special, as llama-mtmd-cli does); the image is read by
// mtmd_helper_bitmap_init_from_file (stb_image). CPU, n_ctx 512, n_batch = n_ubatch 512, mtmd's
// defaults otherwise (flash attention auto, which the CPU enables for both; warmup). PROBE_THREADS
// sets the threads of both the text context and mtmd (default 2); PROBE_FLASH_ATTN=off disables
// flash attention in both (another set of kernels, to measure llama.cpp's own spread).
// PROBE_IMAGE_MIN_TOKENS / PROBE_IMAGE_MAX_TOKENS set mtmd's image_min_tokens / image_max_tokens
// (llama-mtmd-cli's --image-min-tokens / --image-max-tokens; default: the projector type's). The
// prompt is evaluated as mtmd_helper_eval_chunks does (each chunk by mtmd_helper_eval_chunk_single,
// which encodes an image and calls mtmd_helper_decode_image_chunk), except that an image chunk is
// decoded by that same call made here, with a post-decode callback that prints the positions the
// batch held. Output, one record a line, floats %.9g:
//   info n_embd N n_vocab N marker M
//   chunk I text N id id ...            a text chunk's token ids
//   chunk I image N_TOKENS N_POS NON_CAUSAL   an image chunk (NON_CAUSAL: mtmd_decode_use_non_causal)
//   grid I NX NY M                      its token grid (mtmd_image_tokens_get_nx / _ny), M: whether
//                                       mtmd_decode_use_mrope
//   pos I K p ...                       image chunk I's token K: the positions llama_decode got, one
//                                       per section (4 with M-RoPE: sections 0..3, else 1)
//   preproc NX NY v ...                 the encoder's input tensor "inp_raw" (planar RGB, NX*NY per
//                                       channel), read through the eval callback of the encode
//   embd I v ...                        row I of mtmd_get_output_embd after mtmd_encode_chunk
//   logits N v ...                      the last position's logits after mtmd_helper_eval_chunks
//   n_past N                            the position after the prompt
//   gen K id eog id:logit ...           greedy step K: the argmax (lowest id on ties), whether it is
//                                       an end-of-generation token, the top 5
#include "llama.h"
#include "ggml-backend.h"
#include "mtmd.h"
#include "mtmd-helper.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

struct capture {
    std::vector<float> data;
    long nx = 0, ny = 0;
};

// the scheduler asks about every node; the encoder's first node reads "inp_raw": copy that input
static ggml_tensor * inp_raw_of(ggml_tensor * t) {
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        if (t->src[i] && std::strcmp(t->src[i]->name, "inp_raw") == 0) return t->src[i];
    }
    return nullptr;
}

static bool on_eval(ggml_tensor * t, bool ask, void * ud) {
    ggml_tensor * src = inp_raw_of(t);
    if (ask) return src != nullptr;
    if (src) {
        auto * c = static_cast<capture *>(ud);
        c->data.resize(ggml_nelements(src));
        ggml_backend_tensor_get(src, c->data.data(), 0, ggml_nbytes(src));
        c->nx = src->ne[0];
        c->ny = src->ne[1];
    }
    return true;
}

static void print_row(const char * tag, long a, const float * v, long n) {
    std::printf("%s %ld", tag, a);
    for (long i = 0; i < n; ++i) std::printf(" %.9g", v[i]);
    std::printf("\n");
}


// each chunk's line; an image chunk is encoded: the encoder's input and the embeddings
static bool print_chunks(mtmd_context * mctx, const mtmd_input_chunks * chunks, capture & cap, int n_embd) {
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); ++i) {
        const mtmd_input_chunk * ch = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n = 0;
            const llama_token * ids = mtmd_input_chunk_get_tokens_text(ch, &n);
            std::printf("chunk %zu text %zu", i, n);
            for (size_t k = 0; k < n; ++k) std::printf(" %d", ids[k]);
            std::printf("\n");
            continue;
        }
        const size_t n_tok = mtmd_input_chunk_get_n_tokens(ch);
        std::printf("chunk %zu image %zu %d %d\n", i, n_tok, (int) mtmd_input_chunk_get_n_pos(ch),
                    (int) mtmd_decode_use_non_causal(mctx, ch));
        const mtmd_image_tokens * it = mtmd_input_chunk_get_tokens_image(ch);
        std::printf("grid %zu %zu %zu %d\n", i, it ? mtmd_image_tokens_get_nx(it) : 0,
                    it ? mtmd_image_tokens_get_ny(it) : 0, (int) mtmd_decode_use_mrope(mctx));
        cap.data.clear();
        if (mtmd_encode_chunk(mctx, ch) != 0) return false;
        std::printf("preproc %ld %ld", cap.nx, cap.ny);
        for (float v : cap.data) std::printf(" %.9g", v);
        std::printf("\n");
        const float * embd = mtmd_get_output_embd(mctx);
        for (size_t r = 0; r < n_tok; ++r) print_row("embd", (long) r, embd + r * n_embd, n_embd);
    }
    return true;
}

struct pos_sink {
    size_t chunk = 0;
    long next = 0;   // the chunk's tokens printed so far (the helper decodes in sub-batches)
};

// the helper's post-decode view: positions section-major, [n_pos][n_tokens]
static int32_t on_decoded(const mtmd_helper_embd_batch * b, void * ud) {
    auto * s = static_cast<pos_sink *>(ud);
    for (int32_t k = 0; k < b->n_tokens; ++k) {
        std::printf("pos %zu %ld", s->chunk, s->next++);
        for (int32_t j = 0; j < b->n_pos; ++j) std::printf(" %d", (int) b->pos[(size_t) j * b->n_tokens + k]);
        std::printf("\n");
    }
    return 0;
}

// mtmd_helper_eval_chunks' loop (mtmd-helper.cpp), an image chunk's decode with on_decoded
static bool eval_chunks(mtmd_context * mctx, llama_context * lctx, const mtmd_input_chunks * chunks,
                        int n_batch, llama_pos * n_past) {
    const size_t n = mtmd_input_chunks_size(chunks);
    for (size_t i = 0; i < n; ++i) {
        const mtmd_input_chunk * ch = mtmd_input_chunks_get(chunks, i);
        const bool last = i + 1 == n;
        if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            if (mtmd_helper_eval_chunk_single(mctx, lctx, ch, *n_past, 0, n_batch, last, n_past) != 0) return false;
            continue;
        }
        if (mtmd_encode_chunk(mctx, ch) != 0) return false;
        pos_sink sink{i, 0};
        if (mtmd_helper_decode_image_chunk(mctx, lctx, ch, mtmd_get_output_embd(mctx), *n_past, 0, n_batch, n_past,
                                           on_decoded, &sink) != 0) {
            return false;
        }
    }
    return true;
}

// greedy steps from the prompt's logits: the argmax (lowest id on ties) and the top 5, then decoded
static bool greedy(llama_context * lctx, const llama_vocab * vocab, std::vector<float> & logits, int n_gen) {
    const int n_vocab = (int) logits.size();
    std::vector<int> order(n_vocab);
    for (int k = 0; k < n_gen; ++k) {
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](int a, int b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        });
        llama_token id = order[0];
        std::printf("gen %d %d %d", k, id, (int) llama_vocab_is_eog(vocab, id));
        for (int j = 0; j < 5; ++j) std::printf(" %d:%.9g", order[j], logits[order[j]]);
        std::printf("\n");
        if (k + 1 == n_gen) break;
        // llama_batch_get_one: the context places the token after its memory's last position
        llama_batch b = llama_batch_get_one(&id, 1);
        if (llama_decode(lctx, b) != 0) return false;
        const float * lg = llama_get_logits_ith(lctx, -1);
        std::copy(lg, lg + n_vocab, logits.begin());
    }
    return true;
}

int main(int argc, char ** argv) {
    if (argc != 7) {
        std::fprintf(stderr, "usage: %s TEXT_MODEL MMPROJ IMAGE PROMPT_BEFORE PROMPT_AFTER N_GEN\n", argv[0]);
        return 2;
    }
    const int n_gen = std::atoi(argv[6]);
    const int threads = std::getenv("PROBE_THREADS") ? std::atoi(std::getenv("PROBE_THREADS")) : 2;
    const char * fa_env = std::getenv("PROBE_FLASH_ATTN");
    const llama_flash_attn_type fa = fa_env && std::string(fa_env) == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                           : LLAMA_FLASH_ATTN_TYPE_AUTO;
    if (!std::getenv("PROBE_VERBOSE")) {
        llama_log_set(quiet, nullptr);
        mtmd_helper_log_set(quiet, nullptr);
    }
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = fa;
    llama_context * lctx = llama_init_from_model(model, cp);
    if (!lctx) return 1;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const int n_embd = llama_model_n_embd_inp(model);

    capture cap;
    mtmd_context_params xp = mtmd_context_params_default();
    xp.use_gpu = false;
    xp.print_timings = false;
    xp.n_threads = threads;
    xp.flash_attn_type = fa;
    xp.cb_eval = on_eval;
    xp.cb_eval_user_data = &cap;
    if (const char * v = std::getenv("PROBE_IMAGE_MIN_TOKENS")) xp.image_min_tokens = std::atoi(v);
    if (const char * v = std::getenv("PROBE_IMAGE_MAX_TOKENS")) xp.image_max_tokens = std::atoi(v);
    mtmd_context * mctx = mtmd_init_from_file(argv[2], model, xp);
    if (!mctx) return 1;
    std::printf("info n_embd %d n_vocab %d marker %s\n", n_embd, n_vocab, mtmd_default_marker());

    mtmd_helper_bitmap_wrapper bw =
        mtmd_helper_bitmap_init_from_file(mctx, argv[3], false, mtmd_helper_init_opt_default());
    if (!bw.bitmap) return 1;
    const std::string prompt = std::string(argv[4]) + mtmd_default_marker() + argv[5];
    mtmd_input_text text = {prompt.c_str(), prompt.size(), true, true};
    mtmd_input_chunks * chunks = mtmd_input_chunks_init();
    const mtmd_bitmap * bitmaps[] = {bw.bitmap};
    if (mtmd_tokenize(mctx, chunks, &text, bitmaps, 1) != 0) return 1;
    if (!print_chunks(mctx, chunks, cap, n_embd)) return 1;

    llama_pos n_past = 0;
    if (!eval_chunks(mctx, lctx, chunks, 512, &n_past)) return 1;
    const float * last = llama_get_logits_ith(lctx, -1);
    std::vector<float> logits(last, last + n_vocab);
    print_row("logits", n_vocab, logits.data(), n_vocab);
    std::printf("n_past %d\n", (int) n_past);
    if (!greedy(lctx, vocab, logits, n_gen)) return 1;

    mtmd_input_chunks_free(chunks);
    mtmd_bitmap_free(bw.bitmap);
    mtmd_free(mctx);
    llama_free(lctx);
    llama_model_free(model);
    return 0;
}
