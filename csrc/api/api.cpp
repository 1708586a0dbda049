// The C API boundary: argument checks, exceptions → status codes, handles.
#include "error.h"
#include "engine/context.h"
#include "engine/kernels.h"
#include "model.h"
#include "pyllamaspec.h"

#include "ggml-cpu.h"
#include "gguf.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <string>

using namespace psl;

namespace {

void init_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        install_ggml_logger();
        ggml_cpu_init();
    });
}

#define PSL_REQUIRE(cond, status, ...) \
    do {                               \
        if (!(cond)) fail(status, __VA_ARGS__); \
    } while (0)

const gguf_context * meta_of(const psl_model * m, int64_t i) {
    PSL_REQUIRE(m, PSL_ERR_INVALID_ARGUMENT, "model is NULL");
    PSL_REQUIRE(i >= 0 && i < gguf_get_n_kv(m->gguf), PSL_ERR_OUT_OF_RANGE, "metadata index %lld out of range [0, %lld)",
                (long long) i, (long long) gguf_get_n_kv(m->gguf));
    return m->gguf;
}

void copy_str(char * dst, size_t cap, const std::string & s) {
    const size_t n = std::min(cap - 1, s.size());
    memcpy(dst, s.data(), n);
    dst[n] = '\0';
}

}  // namespace

extern "C" {

// ---- library ----

const char * psl_last_error(void) { return last_error(); }

// Like llama.cpp's system info: the ggml it was built from, then each compiled backend with
// its features ("CPU : AVX2 = 1 | ...") and each accelerator device.
const char * psl_system_info(void) {
    static std::string info;
    static std::once_flag once;
    std::call_once(once, [] {
        init_once();
        info = std::string("ggml ") + ggml_version() + " (" + PSL_GGML_ORIGIN + "), CPU kernels " + PSL_CPU_KERNELS;
        for (size_t i = 0; i < ggml_backend_reg_count(); ++i) {
            ggml_backend_reg_t reg = ggml_backend_reg_get(i);
            info += std::string(" | ") + ggml_backend_reg_name(reg) + " :";
            auto features = (ggml_backend_get_features_t) ggml_backend_reg_get_proc_address(
                reg, "ggml_backend_get_features");
            for (const ggml_backend_feature * f = features ? features(reg) : nullptr; f && f->name; ++f) {
                info += std::string(" ") + f->name + " = " + f->value + " |";
            }
        }
        for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
            ggml_backend_dev_t d = ggml_backend_dev_get(i);
            if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_CPU) continue;
            info += std::string(" ") + ggml_backend_dev_name(d) + ": " + ggml_backend_dev_description(d) + " |";
        }
    });
    return info.c_str();
}

const char * psl_model_kernels(const psl_model * model) {
    static thread_local std::string record;
    try {
        record = model ? psl::describe_kernels(*model) : std::string();
    } catch (...) {   // out of memory: no record rather than an exception across the C boundary
        record.clear();
    }
    return record.c_str();
}

void psl_set_verbose(bool verbose) {
    init_once();
    set_verbose(verbose);
}

// ---- model ----

psl_model_params psl_model_default_params(void) {
    psl_model_params p;
    p.n_gpu_layers = 0;
    p.n_threads = 0;
    p.use_mmap = true;
    p.use_repack = true;
    p.load_vocab = true;
    p.prefetch = true;
    p.rpc_servers = nullptr;
    p.tensor_split = nullptr;
    p.n_tensor_split = 0;
    p.deterministic = false;
    return p;
}

psl_status psl_model_load(const char * path, const psl_model_params * params, psl_model ** out) {
    return guard([&] {
        init_once();
        PSL_REQUIRE(out, PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        *out = nullptr;
        PSL_REQUIRE(path, PSL_ERR_INVALID_ARGUMENT, "path is NULL");
        const psl_model_params p = params ? *params : psl_model_default_params();
        *out = load_model(path, p);
    });
}

void psl_model_free(psl_model * model) { release(model); }

psl_status psl_model_get_info(const psl_model * m, psl_model_info * out) {
    return guard([&] {
        PSL_REQUIRE(m && out, PSL_ERR_INVALID_ARGUMENT, "model or out is NULL");
        memset(out, 0, sizeof(*out));
        const HParams & hp = m->hp;
        copy_str(out->arch, sizeof(out->arch), m->arch_name);
        copy_str(out->name, sizeof(out->name), m->name);
        out->n_vocab = hp.n_vocab;
        out->n_ctx_train = hp.n_ctx_train;
        out->n_layer = hp.n_layer;
        out->n_embd = hp.n_embd;
        out->n_head = hp.n_head;
        out->n_head_kv = hp.n_head_kv;
        out->n_embd_head_k = hp.n_embd_head_k;
        out->n_embd_head_v = hp.n_embd_head_v;
        out->n_ff = hp.n_ff;
        out->n_rot = hp.n_rot;
        out->rope_freq_base = hp.rope_freq_base;
        out->rope_freq_scale = hp.rope_freq_scale;
        out->norm_eps = hp.norm_eps;
        out->file_type = m->file_type;
        out->size_bytes = m->size_bytes;
        out->n_params = m->n_params;
        out->n_gpu_layers = m->n_gpu_layers;
        out->tied_output = m->tied_output;
        out->n_embd_inp = hp.n_embd_inp();
    });
}

int64_t psl_model_meta_count(const psl_model * m) { return m ? gguf_get_n_kv(m->gguf) : 0; }

int64_t psl_model_meta_find(const psl_model * m, const char * key) {
    return (m && key) ? gguf_find_key(m->gguf, key) : -1;
}

psl_status psl_model_meta_key(const psl_model * m, int64_t i, const char ** key) {
    return guard([&] {
        const gguf_context * g = meta_of(m, i);
        PSL_REQUIRE(key, PSL_ERR_INVALID_ARGUMENT, "key is NULL");
        *key = gguf_get_key(g, i);
    });
}

psl_status psl_model_meta_type(const psl_model * m, int64_t i, int32_t * type, int32_t * array_type,
                               uint64_t * array_len) {
    return guard([&] {
        const gguf_context * g = meta_of(m, i);
        const gguf_type t = gguf_get_kv_type(g, i);
        if (type) *type = (int32_t) t;
        if (array_type) *array_type = t == GGUF_TYPE_ARRAY ? (int32_t) gguf_get_arr_type(g, i) : -1;
        if (array_len) *array_len = t == GGUF_TYPE_ARRAY ? gguf_get_arr_n(g, i) : 0;
    });
}

psl_status psl_model_meta_get_int(const psl_model * m, int64_t i, int64_t * out) {
    return guard([&] {
        const gguf_context * g = meta_of(m, i);
        PSL_REQUIRE(out, PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        *out = m->file->get_int(gguf_get_key(g, i));
    });
}

psl_status psl_model_meta_get_float(const psl_model * m, int64_t i, double * out) {
    return guard([&] {
        const gguf_context * g = meta_of(m, i);
        PSL_REQUIRE(out, PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        const gguf_type t = gguf_get_kv_type(g, i);
        PSL_REQUIRE(t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64, PSL_ERR_INVALID_ARGUMENT,
                    "metadata '%s' is not a float", gguf_get_key(g, i));
        *out = t == GGUF_TYPE_FLOAT32 ? gguf_get_val_f32(g, i) : gguf_get_val_f64(g, i);
    });
}

psl_status psl_model_meta_get_str(const psl_model * m, int64_t i, const char ** out, size_t * len) {
    return guard([&] {
        const gguf_context * g = meta_of(m, i);
        PSL_REQUIRE(out, PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        PSL_REQUIRE(gguf_get_kv_type(g, i) == GGUF_TYPE_STRING, PSL_ERR_INVALID_ARGUMENT,
                    "metadata '%s' is not a string", gguf_get_key(g, i));
        *out = gguf_get_val_str(g, i);
        if (len) *len = strlen(*out);
    });
}

psl_status psl_model_meta_get_array(const psl_model * m, int64_t i, const void ** data) {
    return guard([&] {
        const gguf_context * g = meta_of(m, i);
        PSL_REQUIRE(data, PSL_ERR_INVALID_ARGUMENT, "data is NULL");
        PSL_REQUIRE(gguf_get_kv_type(g, i) == GGUF_TYPE_ARRAY, PSL_ERR_INVALID_ARGUMENT,
                    "metadata '%s' is not an array", gguf_get_key(g, i));
        const gguf_type at = gguf_get_arr_type(g, i);
        PSL_REQUIRE(at != GGUF_TYPE_STRING && at != GGUF_TYPE_ARRAY, PSL_ERR_INVALID_ARGUMENT,
                    "metadata '%s' is not a numeric array", gguf_get_key(g, i));
        *data = gguf_get_arr_data(g, i);
    });
}

psl_status psl_model_meta_get_array_str(const psl_model * m, int64_t i, uint64_t j, const char ** out, size_t * len) {
    return guard([&] {
        const gguf_context * g = meta_of(m, i);
        PSL_REQUIRE(out, PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        PSL_REQUIRE(gguf_get_kv_type(g, i) == GGUF_TYPE_ARRAY && gguf_get_arr_type(g, i) == GGUF_TYPE_STRING,
                    PSL_ERR_INVALID_ARGUMENT, "metadata '%s' is not a string array", gguf_get_key(g, i));
        PSL_REQUIRE(j < gguf_get_arr_n(g, i), PSL_ERR_OUT_OF_RANGE, "index %llu out of range [0, %zu)",
                    (unsigned long long) j, gguf_get_arr_n(g, i));
        *out = gguf_get_arr_str(g, i, j);
        if (len) *len = strlen(*out);
    });
}

// ---- context ----

psl_context_params psl_context_default_params(void) {
    psl_context_params p;
    p.n_ctx = 0;
    p.n_batch = 0;
    p.n_threads = 0;
    p.type_k = GGML_TYPE_F16;   // llama.cpp's default: the same answers as llama.cpp, on every backend
    p.type_v = GGML_TYPE_F16;   // (PSL_KV_AUTO or f32 are one choice away: README, "KV cache types")
    p.n_seq_max = 0;
    return p;
}

psl_status psl_context_new(psl_model * model, const psl_context_params * params, psl_context ** out) {
    return guard([&] {
        init_once();
        PSL_REQUIRE(out, PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        *out = nullptr;
        PSL_REQUIRE(model, PSL_ERR_INVALID_ARGUMENT, "model is NULL");
        PSL_REQUIRE(model->arch, PSL_ERR_UNSUPPORTED, "a vocabulary-only model (psl_vocab_load) cannot evaluate");
        PSL_REQUIRE(!model->arch->is_head(), PSL_ERR_UNSUPPORTED,
                    "'%s' is a draft head (%s): it drafts for a target model (as its draft), it cannot evaluate on its own",
                    model->file->path().c_str(), model->arch_name.c_str());
        const psl_context_params p = params ? *params : psl_context_default_params();
        retain(model);
        try {
            *out = new psl_context(model, p);
        } catch (...) {
            // the constructor did not finish, so its destructor will not release the model
            release(model);
            throw;
        }
    });
}

void psl_context_free(psl_context * ctx) { delete ctx; }

psl_status psl_context_get_params(const psl_context * ctx, psl_context_params * out) {
    return guard([&] {
        PSL_REQUIRE(ctx && out, PSL_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
        *out = ctx->params;
    });
}

psl_status psl_context_set_threads(psl_context * ctx, int32_t n_threads) {
    return guard([&] {
        PSL_REQUIRE(ctx, PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->set_threads(n_threads);
    });
}

psl_status psl_context_eval(psl_context * ctx, const int32_t * tokens, int32_t n, int32_t logits_mode, float * out,
                            int64_t out_cap) {
    return guard([&] {
        PSL_REQUIRE(ctx, PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        const auto t0 = std::chrono::steady_clock::now();
        ctx->eval(tokens, n, logits_mode, out, out_cap);
        ctx->perf.t_eval_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        ctx->perf.n_evals += 1;
        ctx->perf.n_tokens += n;
    });
}

psl_status psl_context_embed(psl_context * ctx, const int32_t * tokens, int32_t n, float * out, int64_t out_cap) {
    return guard([&] {
        PSL_REQUIRE(ctx, PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->embed(tokens, n, out, out_cap);
    });
}

psl_status psl_context_get_perf(const psl_context * ctx, psl_perf * out) {
    return guard([&] {
        PSL_REQUIRE(ctx && out, PSL_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
        *out = ctx->perf;
        out->n_compactions = ctx->mem->compactions() - ctx->compactions_base;
    });
}

void psl_context_reset_perf(psl_context * ctx) {
    if (!ctx) return;
    ctx->perf = psl_perf{0.0, 0, 0, ctx->perf.n_threads_last, 0};
    ctx->compactions_base = ctx->mem->compactions();
}

int32_t psl_context_n_past(const psl_context * ctx) { return ctx ? ctx->mem->n_past() : 0; }

int32_t psl_context_max_rollback(const psl_context * ctx) {
    if (!ctx) return 0;
    return ctx->mem->max_rollback();
}

psl_status psl_context_memory(const psl_context * ctx, uint64_t * kv_bytes, int32_t * n_cells,
                              uint64_t * recurrent_bytes) {
    return guard([&] {
        PSL_REQUIRE(ctx, PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        if (kv_bytes) *kv_bytes = ctx->mem->kv().bytes();
        if (n_cells) *n_cells = ctx->mem->kv().size();
        if (recurrent_bytes) *recurrent_bytes = ctx->mem->rs() ? ctx->mem->rs()->bytes() : 0;
    });
}

psl_status psl_context_truncate(psl_context * ctx, int32_t n_keep) {
    return guard([&] {
        PSL_REQUIRE(ctx, PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->truncate(0, n_keep);
    });
}

psl_status psl_context_set_output_ids(psl_context * ctx, const int32_t * ids, int32_t n) {
    return guard([&] {
        PSL_REQUIRE(ctx, PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        PSL_REQUIRE(n >= 0 && (n == 0 || ids), PSL_ERR_INVALID_ARGUMENT, "ids is NULL or n < 0");
        ctx->set_output_ids(ids, n);
    });
}

psl_status psl_context_add_output_ids(psl_context * ctx, const int32_t * ids, int32_t n) {
    return guard([&] {
        PSL_REQUIRE(ctx, PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        PSL_REQUIRE(n >= 0 && (n == 0 || ids), PSL_ERR_INVALID_ARGUMENT, "ids is NULL or n < 0");
        ctx->add_output_ids(ids, n);
    });
}

void psl_context_clear(psl_context * ctx) {
    if (ctx) ctx->clear();
}

void psl_context_interrupt(psl_context * ctx) {
    if (ctx) ctx->interrupt = true;
}

void psl_context_clear_interrupt(psl_context * ctx) {
    if (ctx) ctx->interrupt = false;
}

int32_t psl_max_threads(void) { return psl::max_threads(); }

void psl_context_set_catch_sigint(psl_context * ctx, bool on) {
    if (ctx) ctx->catch_sigint = on;
}

}  // extern "C"
