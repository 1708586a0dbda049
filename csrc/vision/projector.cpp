// Loading an mmproj file (clip.cpp's keys and tensor names) and running its encoder on the CPU.
#include "vision/projector.h"

#include "error.h"
#include "gguf/gguf_file.h"

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "gguf.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace psl {

extern const ProjectorOps projector_gemma3;
extern const ProjectorOps projector_qwen3vl;
extern const ProjectorOps projector_qwen2vl;
extern const ProjectorOps projector_qwen25vl;
extern const ProjectorOps projector_gemma4v;
extern const ProjectorOps projector_pixtral;

const ProjectorOps * find_projector(const std::string & type) {
    static const ProjectorOps * const all[] = {&projector_gemma3, &projector_qwen3vl, &projector_qwen2vl,
                                               &projector_qwen25vl, &projector_gemma4v, &projector_pixtral};
    for (const ProjectorOps * o : all) {
        if (type == o->name) return o;
    }
    return nullptr;
}

namespace {

// Matrix types ggml's CPU products take (vec_dot and from_float exist for them).
bool is_matrix_type(ggml_type t) {
    switch (t) {
        case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0:
        case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K:
        case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
            return true;
        default:
            return false;
    }
}

std::string shape_str(const int64_t * ne, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// A float array key of at least n values (image_mean, image_std).
void get_floats(const GgufFile & f, const char * key, float * out, int n) {
    const int64_t id = gguf_find_key(f.gguf(), key);
    if (id < 0) fail(PSL_ERR_FORMAT, "'%s': required key '%s' is missing", f.path().c_str(), key);
    if (gguf_get_kv_type(f.gguf(), id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(f.gguf(), id) != GGUF_TYPE_FLOAT32 ||
        gguf_get_arr_n(f.gguf(), id) < (size_t) n) {
        fail(PSL_ERR_FORMAT, "'%s': key '%s' should be an array of at least %d float32", f.path().c_str(), key, n);
    }
    std::memcpy(out, gguf_get_arr_data(f.gguf(), id), sizeof(float) * (size_t) n);
}

int32_t positive(const GgufFile & f, const char * key, int64_t most) {
    const int64_t v = f.get_int(key);
    if (v <= 0 || v > most) fail(PSL_ERR_FORMAT, "'%s': %s = %lld is outside [1, %lld]", f.path().c_str(), key,
                                 (long long) v, (long long) most);
    return (int32_t) v;
}

// The keys every vision projector has (clip.cpp's load_hparams).
void common_hparams(const GgufFile & f, VitHParams & hp) {
    hp.n_embd = positive(f, "clip.vision.embedding_length", 1 << 16);
    hp.n_head = positive(f, "clip.vision.attention.head_count", 1024);
    hp.n_ff = positive(f, "clip.vision.feed_forward_length", 1 << 18);
    hp.n_layer = positive(f, "clip.vision.block_count", 1024);
    hp.image_size = positive(f, "clip.vision.image_size", 8192);
    hp.patch_size = positive(f, "clip.vision.patch_size", 1024);
    hp.eps = (float) f.get_float("clip.vision.attention.layer_norm_epsilon", 1e-6);
    if (!(hp.eps > 0.0f && hp.eps < 1.0f)) fail(PSL_ERR_FORMAT, "'%s': bad layer_norm_epsilon", f.path().c_str());
    if (hp.n_embd % hp.n_head != 0) {
        fail(PSL_ERR_FORMAT, "'%s': embedding_length %d is not a multiple of head_count %d", f.path().c_str(),
             hp.n_embd, hp.n_head);
    }
    if (hp.image_size % hp.patch_size != 0) {
        fail(PSL_ERR_FORMAT, "'%s': image_size %d is not a multiple of patch_size %d", f.path().c_str(),
             hp.image_size, hp.patch_size);
    }
    get_floats(f, "clip.vision.image_mean", hp.mean, 3);
    get_floats(f, "clip.vision.image_std", hp.std, 3);
    for (float s : hp.std) {
        if (!(s > 0.0f)) fail(PSL_ERR_FORMAT, "'%s': image_std must be positive", f.path().c_str());
    }
    const bool gelu = f.get_int("clip.use_gelu", 0) != 0, silu = f.get_int("clip.use_silu", 0) != 0;
    if (gelu && silu) fail(PSL_ERR_FORMAT, "'%s': both clip.use_gelu and clip.use_silu are set", f.path().c_str());
    hp.ffn = gelu ? VitHParams::Ffn::Gelu : silu ? VitHParams::Ffn::Silu : VitHParams::Ffn::GeluQuick;
}

}  // namespace

// The norms every ViT layout has: v.post_ln (optional) and each block's ln1 / ln2 (biases
// optional); sizes w.layers to n_layer.
void vit_norms(ProjectorLoader & l, VitWeights & w, const VitHParams & hp) {
    const int64_t e = hp.n_embd;
    w.post_ln_w = l.get("v.post_ln.weight", {e}, false);
    w.post_ln_b = l.get("v.post_ln.bias", {e}, false);
    w.layers.resize((size_t) hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        VitLayer & L = w.layers[(size_t) il];
        const std::string b = "v.blk." + std::to_string(il) + ".";
        L.ln1_w = l.get(b + "ln1.weight", {e});
        L.ln1_b = l.get(b + "ln1.bias", {e}, false);
        L.ln2_w = l.get(b + "ln2.weight", {e});
        L.ln2_b = l.get(b + "ln2.bias", {e}, false);
    }
}

// The ViT's tensors (clip.cpp's load_tensors, the layout SigLIP and CLIP share).
void vit_tensors(ProjectorLoader & l, VitWeights & w, const VitHParams & hp) {
    const int64_t e = hp.n_embd, p = hp.patch_size;
    w.patch_w = l.get_plain("v.patch_embd.weight", {p, p, 3, e});
    w.patch_b = l.get("v.patch_embd.bias", {e}, false);
    w.pos = l.get("v.position_embd.weight", {e, hp.n_patches()});
    vit_norms(l, w, hp);
    for (int il = 0; il < hp.n_layer; ++il) {
        VitLayer & L = w.layers[(size_t) il];
        const std::string b = "v.blk." + std::to_string(il) + ".";
        L.q_w = l.get(b + "attn_q.weight", {e, e});
        L.k_w = l.get(b + "attn_k.weight", {e, e});
        L.v_w = l.get(b + "attn_v.weight", {e, e});
        L.o_w = l.get(b + "attn_out.weight", {e, e});
        L.q_b = l.get(b + "attn_q.bias", {e}, false);
        L.k_b = l.get(b + "attn_k.bias", {e}, false);
        L.v_b = l.get(b + "attn_v.bias", {e}, false);
        L.o_b = l.get(b + "attn_out.bias", {e}, false);
        // Old conversions stored fc1 as ffn_down and fc2 as ffn_up (clip.cpp swaps them back
        // where ffn_down's rows are n_embd long): take whichever reads n_embd first.
        std::string up = b + "ffn_up.", down = b + "ffn_down.";
        L.up_w = l.get(up + "weight", {e, hp.n_ff}, false);
        if (!L.up_w) {   // the swapped naming: fc1 under ffn_down
            std::swap(up, down);
            L.up_w = l.get(up + "weight", {e, hp.n_ff});
        }
        L.up_b = l.get(up + "bias", {hp.n_ff}, false);
        L.down_w = l.get(down + "weight", {hp.n_ff, e});
        L.down_b = l.get(down + "bias", {e}, false);
    }
}

const ggml_tensor * ProjectorLoader::meta(const std::string & name) const {
    const ggml_tensor * t = ggml_get_tensor(f_.meta(), name.c_str());
    if (!t) fail(PSL_ERR_FORMAT, "'%s': tensor '%s' is missing", f_.path().c_str(), name.c_str());
    return t;
}

bool ProjectorLoader::scalar(const std::string & name, float & out) const {
    const ggml_tensor * t = ggml_get_tensor(f_.meta(), name.c_str());
    if (!t) return false;
    if (t->type != GGML_TYPE_F32 || ggml_nelements(t) != 1) {
        fail(PSL_ERR_FORMAT, "'%s': tensor '%s' should be one f32 value", f_.path().c_str(), name.c_str());
    }
    f_.read(f_.tensor_file_offset(name.c_str()), &out, sizeof(float));
    return true;
}

bool ProjectorLoader::has(const std::string & name) const {
    return ggml_get_tensor(f_.meta(), name.c_str()) != nullptr;
}

ggml_tensor * ProjectorLoader::get(const std::string & name, std::vector<int64_t> ne, bool required) {
    return take(name, ne, required, false);
}

ggml_tensor * ProjectorLoader::get_plain(const std::string & name, std::vector<int64_t> ne) {
    return take(name, ne, true, true);
}

ggml_tensor * ProjectorLoader::take(const std::string & name, const std::vector<int64_t> & ne, bool required,
                                    bool plain) {
    ggml_tensor * meta = ggml_get_tensor(f_.meta(), name.c_str());
    if (!meta) {
        if (required) fail(PSL_ERR_FORMAT, "'%s': tensor '%s' is missing", f_.path().c_str(), name.c_str());
        return nullptr;
    }
    int64_t want[GGML_MAX_DIMS] = {1, 1, 1, 1};
    std::copy(ne.begin(), ne.end(), want);
    for (int i = 0; i < GGML_MAX_DIMS; ++i) {
        if (meta->ne[i] != want[i]) {
            if (!required && ne.size() == 2 && i < 2) return nullptr;   // a matrix of the other naming (up/down)
            fail(PSL_ERR_FORMAT, "'%s': tensor '%s' has shape %s, expected %s", f_.path().c_str(), name.c_str(),
                 shape_str(meta->ne, GGML_MAX_DIMS).c_str(), shape_str(want, (int) ne.size()).c_str());
        }
    }
    const ggml_type t = meta->type;
    const bool ok = plain ? (t == GGML_TYPE_F32 || t == GGML_TYPE_F16)
                  : ne.size() == 1 ? t == GGML_TYPE_F32
                                   : is_matrix_type(t) && meta->ne[0] % ggml_blck_size(t) == 0;
    if (!ok) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': tensor '%s' of type %s is not supported here%s", f_.path().c_str(),
             name.c_str(), ggml_type_name(t), plain ? " (f32 or f16)"
                                              : ne.size() == 1 ? " (vectors: f32)" : "");
    }
    ggml_tensor * w = ggml_dup_tensor(ctx_, meta);
    ggml_set_name(w, name.c_str());
    names_.push_back(name);
    return w;
}

}  // namespace psl

using namespace psl;

psl_projector::psl_projector(const char * p, int32_t threads) : path(p ? p : "") {
    install_ggml_logger();
    GgufFile f(path);
    const std::string arch = f.get_str("general.architecture", "");
    if (arch != "clip") {
        fail(PSL_ERR_UNSUPPORTED, "'%s' is not a projector (mmproj) file: its architecture is '%s', not 'clip'",
             path.c_str(), arch.c_str());
    }
    if (f.has("clip.has_vision_encoder") && f.get_int("clip.has_vision_encoder") == 0) {
        fail(PSL_ERR_UNSUPPORTED, "'%s' has no vision encoder (an audio projector?)", path.c_str());
    }
    std::string type = f.get_str("clip.projector_type", "");
    if (type.empty()) type = f.get_str("clip.vision.projector_type", "");
    ops = find_projector(type);
    if (!ops) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': projector type '%s' is not supported (supported: gemma3, qwen3vl_merger, "
             "qwen2vl_merger, qwen2.5vl_merger, gemma4v, pixtral)", path.c_str(),
             type.c_str());
    }
    common_hparams(f, hp);
    ops->hparams(f, hp);

    const size_t n_tensors = (size_t) gguf_get_n_tensors(f.gguf());
    ggml_init_params ip = {(n_tensors + 1) * ggml_tensor_overhead(), nullptr, /*no_alloc =*/ true};
    ctx.reset(ggml_init(ip));
    if (!ctx) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the projector's tensor context");
    ProjectorLoader l(f, ctx.get());
    ops->tensors(l, w, hp);

    buf.reset(ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), ggml_backend_cpu_buffer_type()));
    if (!buf) fail(PSL_ERR_OUT_OF_MEMORY, "cannot allocate the projector's weights");
    for (const std::string & name : l.names()) {
        ggml_tensor * t = ggml_get_tensor(ctx.get(), name.c_str());
        f.read(f.tensor_file_offset(name.c_str()), t->data, ggml_nbytes(t));
    }
    backend.reset(ggml_backend_cpu_init());
    if (!backend) fail(PSL_ERR_BACKEND, "cannot start the CPU backend");
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    n_threads = threads > 0 ? threads : (int32_t) std::min(hw, 16u);
    graph_size = 256 + 96 * (size_t) hp.n_layer;   // a layer is about 30 nodes (gemma4v: up to about 60)
    graph_buf.resize(ggml_tensor_overhead() * graph_size + ggml_graph_overhead_custom(graph_size, false));
}

void psl_projector::encode(const float * pixels, int32_t width, int32_t height, float * out, int64_t out_cap) {
    if (!pixels || !out) fail(PSL_ERR_INVALID_ARGUMENT, "pixels or out is NULL");
    const int32_t n_rows = n_tokens(width, height);   // refuses sizes the type cannot take
    const int64_t need = (int64_t) n_rows * hp.row_width();
    if (out_cap < need) {
        fail(PSL_ERR_BUFFER_TOO_SMALL, "out holds %lld floats, %lld needed", (long long) out_cap, (long long) need);
    }
    ggml_init_params ip = {graph_buf.size(), graph_buf.data(), /*no_alloc =*/ true};
    ggml_context_ptr gctx(ggml_init(ip));
    if (!gctx) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the encoder's graph context");
    ggml_cgraph * gf = ggml_new_graph_custom(gctx.get(), graph_size, false);
    ProjectorGraph g{gctx.get(), hp, w};
    g.width = width;
    g.height = height;
    g.inp_raw = ggml_new_tensor_3d(gctx.get(), GGML_TYPE_F32, width, height, 3);
    ggml_set_input(g.inp_raw);
    ggml_tensor * res = ops->build(g);
    ggml_set_output(res);
    ggml_build_forward_expand(gf, res);
    ggml_gallocr_ptr alloc(ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend.get())));
    if (!alloc || !ggml_gallocr_alloc_graph(alloc.get(), gf)) {
        fail(PSL_ERR_OUT_OF_MEMORY, "cannot allocate the encoder's graph");
    }
    ggml_backend_tensor_set(g.inp_raw, pixels, 0, ggml_nbytes(g.inp_raw));
    // an input no node reads has no buffer
    for (const auto & [t, v] : g.inputs_i32) if (t->buffer) ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    for (const auto & [t, v] : g.inputs_f16) if (t->buffer) ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    ggml_backend_cpu_set_n_threads(backend.get(), n_threads);
    if (ggml_backend_graph_compute(backend.get(), gf) != GGML_STATUS_SUCCESS) {
        fail(PSL_ERR_BACKEND, "the encoder's graph failed");
    }
    if (res->ne[0] != hp.row_width() || res->ne[1] != n_rows || !ggml_is_contiguous(res)) {
        fail(PSL_ERR_INTERNAL, "the encoder made a [%lld, %lld] result", (long long) res->ne[0],
             (long long) res->ne[1]);
    }
    ggml_backend_tensor_get(res, out, 0, (size_t) need * sizeof(float));
}
