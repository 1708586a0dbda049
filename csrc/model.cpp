// GGUF → hyper-parameters + weights in backend buffers (mmap'd on the CPU).
#include "model.h"

#include "error.h"
#include "host/compute_thread.h"
#include "host/huge_pages.h"
#include "kernels/matmul_rows.h"
#include "vocab/vocab.h"

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace psl {

// ---- tensors ----

TensorLoader::TensorLoader(psl_model & m, ggml_backend_buffer_type_t buft_cpu, ggml_backend_buffer_type_t buft_gpu,
                           std::vector<ggml_backend_buffer_type_t> cpu_extra)
    : m_(m), buft_cpu_(buft_cpu), buft_gpu_(buft_gpu), cpu_extra_(std::move(cpu_extra)) {}

TensorLoader::~TensorLoader() = default;

ggml_context * TensorLoader::ctx_for(ggml_backend_buffer_type_t buft) {
    for (auto & [b, c] : ctx_by_buft_) {
        if (b == buft) return c;
    }
    const size_t n = m_.files->n_tensors() + 8;
    ggml_init_params p = {ggml_tensor_overhead() * n, nullptr, /*no_alloc =*/ true};
    ggml_context * ctx = ggml_init(p);
    if (!ctx) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create a tensor context");
    m_.ctxs.push_back(ctx);
    ctx_by_buft_.emplace_back(buft, ctx);
    return ctx;
}

ggml_tensor * TensorLoader::create(const std::string & name, std::vector<int64_t> ne, Place where, int il,
                                   bool required) {
    return place(name, std::move(ne), where, il, required, false);
}

ggml_tensor * TensorLoader::matrix(const std::string & name, std::vector<int64_t> ne, Place where, int il,
                                   bool required) {
    return place(name, std::move(ne), where, il, required, true);
}

// Would the CPU backend run mul_mat(w, activations) from this buffer type? Asked the way
// llama.cpp asks: a dummy op whose weight sits in an empty buffer of that type.
bool cpu_supports_matmul(ggml_backend_dev_t dev_cpu, ggml_backend_buffer_type_t buft, const ggml_tensor * w,
                         int64_t n_expert_used) {
    ggml_init_params p = {ggml_tensor_overhead() * 4, nullptr, true};
    ggml_context * ctx = ggml_init(p);
    if (!ctx) return false;
    ggml_tensor * a = ggml_dup_tensor(ctx, w);
    ggml_tensor * op = nullptr;
    if (ggml_n_dims(w) == 3) {   // stacked experts: asked about mul_mat_id, which reads them
        const int64_t k = std::max<int64_t>(1, n_expert_used);
        ggml_tensor * b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, w->ne[0], k, 512);
        op = ggml_mul_mat_id(ctx, a, b, ggml_new_tensor_2d(ctx, GGML_TYPE_I32, k, 512));
    } else {
        op = ggml_mul_mat(ctx, a, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w->ne[0], 512));
    }
    ggml_backend_buffer_t dummy = ggml_backend_buft_alloc_buffer(buft, 0);
    bool ok = false;
    if (dummy) {
        a->buffer = dummy;
        ok = ggml_backend_dev_supports_op(dev_cpu, op);
        a->buffer = nullptr;
        ggml_backend_buffer_free(dummy);
    }
    ggml_free(ctx);
    return ok;
}

bool TensorLoader::supports_matmul(ggml_backend_buffer_type_t buft, const ggml_tensor * w) const {
    return cpu_supports_matmul(m_.dev_cpu, buft, w, m_.hp.n_expert_used);
}

ggml_backend_buffer_type_t TensorLoader::home(const std::string & name, Place place, int il, bool matrix) const {
    ggml_backend_dev_t dev = m_.dev_cpu;
    switch (place) {
        case Place::Input:  dev = m_.dev_cpu; break;
        case Place::Output: dev = m_.output_device(); break;
        case Place::Layer:  dev = m_.layer_device(il); break;
    }
    if (dev == m_.dev_gpu && buft_gpu_) return buft_gpu_;
    if (dev != m_.dev_cpu) return ggml_backend_dev_buffer_type(dev);
    const TensorSource * src = m_.files->find(name);
    const ggml_tensor * meta = src ? src->meta : nullptr;
    if (matrix && meta) {
        for (ggml_backend_buffer_type_t extra : cpu_extra_) {
            if (amx_copies_only(extra, meta->type)) continue;
            if (supports_matmul(extra, meta)) return extra;
        }
    }
    return buft_cpu_;
}

// ggml's AMX buffer takes F16 weights but has no tile kernel for them: it copies them as they are
// and runs an AVX-512 loop, slower than vec_dot for one token and than ours / llamafile's for a
// few rows (Xeon, 2 threads, Gemma 3 F16: 35.7 ms a token against 32.1 in the plain buffer; 8
// rows 93.7 against 63.6). A CPU-only model keeps them in the plain buffer; a model that offloads
// keeps ggml's placement, as llama.cpp's.
bool TensorLoader::amx_copies_only(ggml_backend_buffer_type_t extra, ggml_type t) const {
    return m_.cpu_only() && t == GGML_TYPE_F16 &&
           std::string(ggml_backend_buft_name(extra)).find("AMX") != std::string::npos;
}

ggml_tensor * TensorLoader::place(const std::string & name, std::vector<int64_t> ne, Place place, int il,
                                  bool required, bool matrix) {
    const TensorSource * src = m_.files->find(name);
    if (!src) {
        if (!required) return nullptr;
        fail(PSL_ERR_FORMAT, "'%s': tensor '%s' is missing (architecture %s)", m_.file->path().c_str(),
             name.c_str(), m_.arch_name.c_str());
    }
    const ggml_tensor * meta = src->meta;
    const char * path = src->file->path().c_str();   // the shard that holds it
    ne.resize(GGML_MAX_DIMS, 1);
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (meta->ne[d] != ne[d]) {
            fail(PSL_ERR_FORMAT, "'%s': tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]",
                 path, name.c_str(), (long long) meta->ne[0], (long long) meta->ne[1],
                 (long long) meta->ne[2], (long long) meta->ne[3], (long long) ne[0], (long long) ne[1],
                 (long long) ne[2], (long long) ne[3]);
        }
    }
    // Types the kernels take: matrices in a float or quantized type, vectors (norms, biases) in F32.
    const bool ok_type = ggml_n_dims(meta) >= 2 ? (meta->type == GGML_TYPE_F32 || meta->type == GGML_TYPE_F16 ||
                                   meta->type == GGML_TYPE_BF16 || ggml_is_quantized(meta->type))
                                : meta->type == GGML_TYPE_F32;
    if (!ok_type) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': tensor '%s' has type %s, which this core does not run there",
             path, name.c_str(), ggml_type_name(meta->type));
    }
    ggml_context * ctx = ctx_for(home(name, place, il, matrix));
    // asked for again in the same memory (a tensor several layers read): the same tensor
    if (ggml_tensor * known = ggml_get_tensor(ctx, name.c_str())) return known;
    ggml_tensor * t = ggml_dup_tensor(ctx, meta);
    ggml_set_name(t, name.c_str());
    created_.emplace_back(t, src);
    return t;
}

ggml_tensor * TensorLoader::layer(int il, const char * suffix, std::vector<int64_t> ne, bool required) {
    return create("blk." + std::to_string(il) + "." + suffix, std::move(ne), Place::Layer, il, required);
}

ggml_tensor * TensorLoader::layer_matrix(int il, const char * suffix, std::vector<int64_t> ne, bool required) {
    return matrix("blk." + std::to_string(il) + "." + suffix, std::move(ne), Place::Layer, il, required);
}

// The weights stay in the page cache: one buffer wraps each shard's mapping, tensors point into it.
void TensorLoader::load_mapped(ggml_context * ctx, bool prefetch) {
    for (size_t i = 0; i < m_.files->n_files(); ++i) {
        GgufFile & f = m_.files->file(i);
        uint8_t * base = nullptr;
        ggml_backend_buffer_t buf = nullptr;
        for (auto & [t, src] : created_) {
            if (src->file != &f || ggml_get_tensor(ctx, ggml_get_name(t)) != t) continue;
            if (!buf) {
                base = (uint8_t *) f.map();
                buf = ggml_backend_cpu_buffer_from_ptr(base, f.file_size());
                if (!buf) fail(PSL_ERR_OUT_OF_MEMORY, "cannot wrap the mapping of '%s'", f.path().c_str());
                m_.bufs.push_back(buf);
                ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
            }
            if (ggml_backend_tensor_alloc(buf, t, base + src->offset) != GGML_STATUS_SUCCESS) {
                fail(PSL_ERR_BACKEND, "cannot place tensor '%s'", ggml_get_name(t));
            }
            if (prefetch) f.prefetch(src->offset, ggml_nbytes(t));
        }
    }
}

// The weights are copied (read, or from the mapping) into memory of their buffer type.
void TensorLoader::load_copied(ggml_context * ctx, ggml_backend_buffer_type_t buft) {
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
    if (!buf) {
        fail(PSL_ERR_OUT_OF_MEMORY, "cannot allocate %.1f MiB of %s memory for the weights",
             ggml_backend_alloc_ctx_tensors_from_buft_size(ctx, buft) / 1048576.0, ggml_backend_buft_name(buft));
    }
    m_.bufs.push_back(buf);
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    // a repacking buffer converts in set_tensor: only the plain CPU buffer is filled directly
    const bool host = buft == buft_cpu_ && ggml_backend_buffer_is_host(buf);
    advise_huge_pages(buf);
    if (!host) plain_twins(ctx);
    std::vector<uint8_t> staging;
    for (auto & [t, src] : created_) {
        if (ggml_get_tensor(ctx, ggml_get_name(t)) != t) continue;
        const GgufFile & f = *src->file;
        const size_t off = src->offset, n = ggml_nbytes(t);
        const auto twin = m_.plain_twins.find(t);
        if (host) {
            f.read(off, t->data, n);
        } else if (f.mapping()) {
            upload(t, f.mapping() + off, 0, n);
            if (twin != m_.plain_twins.end()) {
                std::memcpy(twin->second->data, f.mapping() + off, n);
            }
            f.release(off, n);   // the copy is what runs; the mapped pages may go
        } else {
            staging.resize(n);
            f.read(off, staging.data(), n);
            upload(t, staging.data(), 0, n);
            if (twin != m_.plain_twins.end()) std::memcpy(twin->second->data, staging.data(), n);
        }
    }
}

// The repacked weights that our products of a few rows take (a CPU-only model), and the AMX
// ones with PYLLAMASPEC_MATMUL_ROWS_AMX=1, get a twin in the plain layout: ours reads it for 1-16
// rows (vec_dot's numbers at every row count), ggml's repacked gemm or AMX tiles take prompts of
// 17+. The cost is a second copy of those weights in memory.
void TensorLoader::plain_twins(ggml_context * ctx) {
    std::vector<ggml_tensor *> want;
    for (auto & [t, src] : created_) {
        if (ggml_get_tensor(ctx, ggml_get_name(t)) != t) continue;
        const std::string buft = ggml_backend_buft_name(ggml_backend_buffer_get_type(t->buffer));
        const bool repacked = buft.find("REPACK") != std::string::npos || (buft.find("AMX") != std::string::npos &&
                                                                             matmul_rows_on_amx());
        if (m_.cpu_only() && repacked && matmul_rows_twins(t->type)) want.push_back(t);
    }
    if (want.empty()) return;
    ggml_init_params p = {ggml_tensor_overhead() * want.size(), nullptr, /*no_alloc =*/ true};
    ggml_context * tc = ggml_init(p);
    if (!tc) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the weights' plain twins");
    m_.twins_ctxs.push_back(tc);
    for (ggml_tensor * t : want) {
        ggml_tensor * twin = ggml_dup_tensor(tc, t);
        ggml_set_name(twin, ggml_get_name(t));
        m_.plain_twins[t] = twin;
    }
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(tc, buft_cpu_);
    if (!buf) fail(PSL_ERR_OUT_OF_MEMORY, "cannot allocate the plain twins of the repacked weights");
    // 2 MiB pages, as the weights read into memory get: ours streams two rows a thread through
    // them, and on 4 KiB pages one token read a Q4_K model's twins at 14.2 ms against 10.3
    advise_huge_pages(buf);
    m_.bufs.push_back(buf);
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
}

// llama.cpp multiplies a weight by its ".scale" tensor where a file has one (NVFP4 and similar
// exports); an architecture here reads the few it knows (gemma4's router and expert scales): any
// other would be silently ignored, so such a file is refused.
void TensorLoader::check_scales() const {
    for (size_t i = 0; i < m_.files->n_files(); ++i) {
        gguf_context * g = m_.files->file(i).gguf();
        for (int64_t t = 0; t < gguf_get_n_tensors(g); ++t) {
            const std::string name = gguf_get_tensor_name(g, t);
            if (name.size() < 6 || name.compare(name.size() - 6, 6, ".scale") != 0) continue;
            bool read = false;
            for (const auto & [tensor, src] : created_) read = read || name == ggml_get_name(tensor);
            if (!read) {
                fail(PSL_ERR_UNSUPPORTED, "'%s': tensor '%s' scales a weight, which this core does not do for "
                     "architecture %s", m_.files->file(i).path().c_str(), name.c_str(), m_.arch_name.c_str());
            }
        }
    }
}

void TensorLoader::load(bool use_mmap, bool prefetch) {
    check_scales();
    for (auto & [buft, ctx] : ctx_by_buft_) {
        if (use_mmap && buft == buft_cpu_) {
            load_mapped(ctx, prefetch);
        } else {
            load_copied(ctx, buft);
        }
    }
    for (auto & [t, src] : created_) {
        (void) src;
        if (m_.tied_output && t == m_.output && t != m_.tok_embd) continue;   // a copy, not a parameter
        m_.size_bytes += ggml_nbytes(t);
        m_.n_params += (uint64_t) ggml_nelements(t);
    }
}

// ---- hyper-parameters ----

namespace {

// YaRN as llama.cpp sets it up by default: extrapolation mix 1, and an attention factor whose
// 1 + 0.1 ln(factor) cancels the one ggml's rope applies itself (times rope.scaling.attn_factor).
void yarn_hparams(const GgufFile & f, const std::string & p, double factor, HParams & hp) {
    hp.rope_freq_scale = (float) (1.0 / factor);
    hp.rope_ext_factor = 1.0f;
    const float mscale = factor <= 1.0 ? 1.0f : (float) (0.1 * std::log(factor) + 1.0);
    hp.rope_attn_factor = mscale / (1.0f + 0.1f * logf((float) factor)) *
                          (float) f.get_float(p + "rope.scaling.attn_factor", 1.0);
    hp.n_ctx_orig_yarn = (int32_t) f.get_int(p + "rope.scaling.original_context_length", 0);
    if (!std::isfinite(hp.rope_freq_scale) || !std::isfinite(hp.rope_attn_factor) || hp.n_ctx_orig_yarn < 0) {
        fail(PSL_ERR_FORMAT, "'%s': YaRN parameters out of range (factor %g, original context %d)",
             f.path().c_str(), factor, hp.n_ctx_orig_yarn);
    }
}

// A per-layer key: a scalar, or an array with one value per layer (kept in arr); returns the
// first layer's value (llama.cpp's n_head() and n_ff()), dflt when absent.
int32_t layer_values(const GgufFile & f, const std::string & key, int32_t n_all, int32_t dflt,
                     std::vector<int32_t> & arr) {
    const std::vector<int64_t> v = f.get_ints(key);
    arr.clear();
    if (v.empty()) return dflt;
    if (v.size() > 1 || gguf_get_kv_type(f.gguf(), gguf_find_key(f.gguf(), key.c_str())) == GGUF_TYPE_ARRAY) {
        if ((int32_t) v.size() != n_all) {
            fail(PSL_ERR_FORMAT, "'%s': key '%s' has %zu values, expected one per layer (%d)", f.path().c_str(),
                 key.c_str(), v.size(), n_all);
        }
        for (int64_t x : v) {
            if (x < 0 || x > (1 << 24)) fail(PSL_ERR_FORMAT, "'%s': key '%s' has a value out of range", f.path().c_str(), key.c_str());
            arr.push_back((int32_t) x);
        }
    }
    return (int32_t) v[0];
}

bool heads_ok(int32_t n_head, int32_t n_head_kv) {
    return n_head > 0 && n_head <= 4096 && n_head_kv > 0 && n_head % n_head_kv == 0;
}

void check_attention_hparams(const GgufFile & f, const HParams & hp) {
    bool ok = hp.n_layer <= 4096 && hp.n_embd <= (1 << 20) && heads_ok(hp.n_head, hp.n_head_kv) &&
              hp.n_embd_head_k > 0 && hp.n_embd_head_v > 0 && hp.n_embd_head_k <= 4096 && hp.n_embd_head_v <= 4096 &&
              hp.n_rot > 0 && hp.n_rot % 2 == 0 && hp.n_rot <= hp.n_embd_head_k && std::isfinite(hp.rope_freq_base) &&
              hp.rope_freq_base > 0 && std::isfinite(hp.norm_eps) && hp.norm_eps > 0 && hp.norm_eps < 1;
    for (int il = 0; ok && il < hp.n_layer; ++il) ok = heads_ok(hp.head_count(il), hp.head_count_kv(il)) && hp.ff_length(il) >= 0;
    // sliding-window layers' own head sizes (0: the same as the others)
    ok = ok && hp.n_embd_head_k_swa >= 0 && hp.n_embd_head_k_swa <= 4096 && hp.n_embd_head_v_swa >= 0 &&
         hp.n_embd_head_v_swa <= 4096 && hp.n_rot_swa >= 0 && hp.n_rot_swa % 2 == 0 &&
         hp.n_rot_swa <= (hp.n_embd_head_k_swa > 0 ? hp.n_embd_head_k_swa : hp.n_embd_head_k);
    if (!ok) {
        fail(PSL_ERR_FORMAT, "'%s': inconsistent attention hyper-parameters (n_head %d, n_head_kv %d, head dims %d/%d, n_rot %d, rope base %g, eps %g)",
             f.path().c_str(), hp.n_head, hp.n_head_kv, hp.n_embd_head_k, hp.n_embd_head_v, hp.n_rot,
             hp.rope_freq_base, hp.norm_eps);
    }
}

void load_common_hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const std::string p = a + ".";
    hp.n_ctx_train = (int32_t) f.get_int(p + "context_length");
    hp.n_embd = (int32_t) f.get_int(p + "embedding_length");
    hp.n_layer = (int32_t) f.get_int(p + "block_count");
    if (hp.n_layer <= 0 || hp.n_layer > 4096) fail(PSL_ERR_FORMAT, "'%s': block_count %d out of range", f.path().c_str(), hp.n_layer);
    if (!f.has(p + "attention.head_count")) f.get_int(p + "attention.head_count");   // names the missing key
    // optional, as in llama.cpp (a mixture of experts may have no dense FFN): create_ffn checks it
    hp.n_ff = layer_values(f, p + "feed_forward_length", hp.n_layer, 0, hp.n_ff_arr);
    hp.n_head = layer_values(f, p + "attention.head_count", hp.n_layer, 0, hp.n_head_arr);
    if (hp.n_head <= 0 || hp.n_embd <= 0 || hp.n_ff < 0 || hp.n_ctx_train <= 0) {
        fail(PSL_ERR_FORMAT, "'%s': hyper-parameters out of range (n_embd %d, n_layer %d, n_head %d, n_ff %d, n_ctx %d)",
             f.path().c_str(), hp.n_embd, hp.n_layer, hp.n_head, hp.n_ff, hp.n_ctx_train);
    }
    hp.n_head_kv = layer_values(f, p + "attention.head_count_kv", hp.n_layer, hp.n_head, hp.n_head_kv_arr);
    if (hp.n_head_kv_arr.empty() && !hp.n_head_arr.empty() && !f.has(p + "attention.head_count_kv")) {
        hp.n_head_kv_arr = hp.n_head_arr;   // llama.cpp: n_head_kv defaults to n_head, layer by layer
    }
    hp.n_embd_head_k = (int32_t) f.get_int(p + "attention.key_length", hp.n_embd / hp.n_head);
    hp.n_embd_head_v = (int32_t) f.get_int(p + "attention.value_length", hp.n_embd / hp.n_head);
    hp.n_rot = (int32_t) f.get_int(p + "rope.dimension_count", hp.n_embd_head_k);
    hp.n_embd_head_k_swa = (int32_t) f.get_int(p + "attention.key_length_swa", 0);
    hp.n_embd_head_v_swa = (int32_t) f.get_int(p + "attention.value_length_swa", 0);
    hp.n_rot_swa = (int32_t) f.get_int(p + "rope.dimension_count_swa", 0);
    hp.rope_freq_base = (float) f.get_float(p + "rope.freq_base", 10000.0);
    hp.norm_eps = (float) f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5);

    const std::string scaling = f.get_str(p + "rope.scaling.type", "none");
    const double factor = f.get_float(p + "rope.scaling.factor", 0.0);
    if (scaling == "linear" && factor > 0.0) {
        hp.rope_freq_scale = (float) (1.0 / factor);
    } else if (scaling == "yarn" && factor > 0.0) {
        yarn_hparams(f, p, factor, hp);
    } else if (scaling != "none" && scaling != "linear" && factor != 0.0 && factor != 1.0) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': rope scaling '%s' is not supported", f.path().c_str(), scaling.c_str());
    }
    check_attention_hparams(f, hp);
}

// The vocabulary size: the embeddings' rows; a draft head may borrow its target's embeddings,
// and then says it in {arch}.vocab_size (else its tokenizer's length).
int32_t vocab_size(const GgufFile & f, const psl_model & m) {
    const TensorSource * embd_src = m.files->find("token_embd.weight");
    int64_t n = -1;
    if (embd_src) {
        n = embd_src->meta->ne[1];
    } else if (m.arch->is_head()) {
        n = f.get_int(m.arch_name + ".vocab_size", -1);
        const int64_t i = gguf_find_key(f.gguf(), "tokenizer.ggml.tokens");
        if (n < 0 && i >= 0 && gguf_get_kv_type(f.gguf(), i) == GGUF_TYPE_ARRAY) n = (int64_t) gguf_get_arr_n(f.gguf(), i);
        if (n < 0) fail(PSL_ERR_FORMAT, "'%s': a draft head without token_embd must give %s.vocab_size", f.path().c_str(), m.arch_name.c_str());
    } else {
        fail(PSL_ERR_FORMAT, "'%s': tensor 'token_embd.weight' is missing", f.path().c_str());
    }
    if (n <= 0 || n > INT32_MAX) fail(PSL_ERR_FORMAT, "'%s': bad vocabulary size", f.path().c_str());
    return (int32_t) n;
}

void pick_devices(psl_model & m, int32_t n_gpu_layers) {
    m.dev_cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!m.dev_cpu) fail(PSL_ERR_BACKEND, "no CPU backend");
    ggml_backend_dev_t gpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_GPU);
    if (!gpu) gpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_IGPU);
    // llama.cpp's count: the output layer first, then the repeating layers from the last one
    // (n = 1: the head alone; n = n_layer + 1 or -1: everything)
    const int32_t want = n_gpu_layers < 0 ? m.hp.n_layer + 1 : n_gpu_layers;
    if (gpu && want > 0) {
        m.dev_gpu = gpu;
        m.n_gpu_layers = std::min(want - 1, m.hp.n_layer);
        m.output_on_gpu = true;
    }
}

}  // namespace

psl_model * load_model(const std::string & path, const psl_model_params & params) {
    if (params.n_gpu_layers < -1) fail(PSL_ERR_INVALID_ARGUMENT, "n_gpu_layers must be >= -1 (got %d)", params.n_gpu_layers);
    if (params.n_threads < 0 || params.n_threads > max_threads()) {
        fail(PSL_ERR_INVALID_ARGUMENT, "n_threads must be in [0, %d] (got %d)", max_threads(), params.n_threads);
    }

    auto m = std::make_unique<psl_model>();
    m->files = std::make_unique<GgufSplit>(path);
    m->file = &m->files->first();
    m->gguf = m->file->gguf();
    const GgufFile & f = *m->file;

    if (!f.has("general.architecture")) {
        fail(PSL_ERR_FORMAT, "'%s' has no general.architecture: not a model file", path.c_str());
    }
    m->arch_name = f.get_str("general.architecture");
    m->arch = find_arch(m->arch_name);
    if (!m->arch) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': unsupported architecture '%s' (supported: %s)", path.c_str(),
             m->arch_name.c_str(), supported_archs().c_str());
    }
    m->name = f.get_str("general.name", "");
    m->file_type = (int32_t) f.get_int("general.file_type", -1);

    load_common_hparams(f, m->arch_name, m->hp);
    m->arch->load_hparams(f, m->arch_name, m->hp);
    check_attention_hparams(f, m->hp);   // again: with the architecture's layer count and window layers

    m->hp.n_vocab = vocab_size(f, *m);

    pick_devices(*m, params.n_gpu_layers);
    if (params.rpc_servers && *params.rpc_servers) split_layers(*m, params);
    // Why CPU only: ggml's reference paths (one vec_dot per row and weight row, flash attention
    // row by row) are the CPU backend's; a GPU's or an RPC server's kernels pick their own by batch.
    if (params.deterministic && (m->dev_gpu || !m->split_devs.empty())) {
        fail(PSL_ERR_UNSUPPORTED, "deterministic numerics run on the CPU only: load with n_gpu_layers=0 "
             "(-ngl 0) and no RPC servers");
    }
    m->deterministic = params.deterministic;
    ggml_backend_buffer_type_t buft_cpu = ggml_backend_dev_buffer_type(m->dev_cpu);
    ggml_backend_buffer_type_t buft_gpu = m->dev_gpu ? ggml_backend_dev_buffer_type(m->dev_gpu) : nullptr;

    m->layers.resize(m->hp.n_layer);
    std::vector<ggml_backend_buffer_type_t> extra;
    if (params.use_repack && !params.deterministic) {   // repacked kernels sum by blocks of rows
        auto get_extra = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(
            ggml_backend_dev_backend_reg(m->dev_cpu), "ggml_backend_dev_get_extra_bufts");
        for (ggml_backend_buffer_type_t * b = get_extra ? get_extra(m->dev_cpu) : nullptr; b && *b; ++b) {
            extra.push_back(*b);
        }
    }
    TensorLoader tl(*m, buft_cpu, buft_gpu, extra);
    m->arch->create_tensors(tl, *m);
    tl.load(params.use_mmap, params.prefetch);

    if (params.load_vocab) m->vocab = load_vocab(m->gguf);
    return m.release();
}

}  // namespace psl

std::vector<ggml_backend_dev_t> psl_model::offload_devices() const {
    std::vector<ggml_backend_dev_t> out;
    if (dev_gpu) out.push_back(dev_gpu);
    for (ggml_backend_dev_t d : split_devs) {
        if (d != dev_cpu && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
    }
    return out;
}

namespace psl {

void retain(psl_model * m) { m->refs.fetch_add(1); }

void release(psl_model * m) {
    if (m && m->refs.fetch_sub(1) == 1) delete m;
}

}  // namespace psl

psl_model::~psl_model() {
    for (ggml_backend_buffer_t b : bufs) ggml_backend_buffer_free(b);
    for (ggml_context * c : ctxs) ggml_free(c);
    for (ggml_context * c : twins_ctxs) ggml_free(c);
}
