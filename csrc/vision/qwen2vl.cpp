// Qwen2-VL's and Qwen2.5-VL's projectors (clip.projector_type "qwen2vl_merger", "qwen2.5vl_merger"),
// as llama.cpp b11434's tools/mtmd (clip.cpp's hparams, tensors and inputs, models/qwen2vl.cpp's
// graph) runs them on a still image: the Conv3D's two temporal kernels summed, no bias and no
// learned positions; patches in mtmd's 2 x 2 order; pre-norm blocks (Qwen2-VL: LayerNorms and a
// quick-GELU MLP; Qwen2.5-VL: RMS norms, a gated SiLU MLP) with separate biased q, k, v and the
// 2-D vision rope; the merger (post_ln, 2 x 2 patches concatenated -> mm.0, GELU, mm.2).
// Qwen2.5-VL attends within windows of 112 x 112 pixels except in every n_wa_pattern-th layer:
// the merged rows are grouped window by window before the first layer, each window attends
// within itself (a mask), and the rows go back to raster order after the merger.
#include "vision/projector.h"

#include "error.h"
#include "gguf/gguf_file.h"

#include <algorithm>
#include <cmath>

namespace psl {

namespace {

constexpr int32_t kMerge = 2;                    // qwen2vl.cpp's reshapes hard-code 2 x 2
constexpr int64_t kMostPatches = 1 << 16;        // patches an image: the attention is n x n
constexpr int64_t kMostWindowPatches = 1 << 15;  // with windows: the F16 mask is n x n (2 GiB)
constexpr int32_t kWindowPixels = 112;           // clip.cpp's attn_window_size for qwen2.5vl (no key)

void hparams_common(const GgufFile & f, VitHParams & hp, bool v25) {
    const char * path = f.path().c_str();
    const int64_t merge = f.get_int("clip.vision.spatial_merge_size", kMerge);
    if (merge != kMerge) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': spatial_merge_size %lld (the Qwen2-VL encoder merges 2 x 2 patches)", path,
             (long long) merge);
    }
    hp.n_merge = kMerge;
    if ((hp.n_embd / hp.n_head) % 4 != 0) {
        fail(PSL_ERR_FORMAT, "'%s': the head size %d is not a multiple of 4 (the vision rope's 4 sections)", path,
             hp.n_embd / hp.n_head);
    }
    hp.rms_norm = v25;
    // clip.cpp requires the key of 2.5 only, and sets the windows' inputs for 2.5 only
    const char * key = "clip.vision.n_wa_pattern";
    const int64_t wa = v25 ? f.get_int(key) : f.get_int(key, 0);
    if (!v25 && wa != 0) fail(PSL_ERR_UNSUPPORTED, "'%s': n_wa_pattern on a qwen2vl_merger projector", path);
    if (wa < 0 || wa > 1 << 16) fail(PSL_ERR_FORMAT, "'%s': n_wa_pattern = %lld", path, (long long) wa);
    if (wa > 0 && kWindowPixels / hp.patch_size / kMerge < 1) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': patch_size %d is too large for %d-pixel attention windows", path,
             hp.patch_size, kWindowPixels);
    }
    hp.n_wa_pattern = (int32_t) wa;
}

void hparams_2(const GgufFile & f, VitHParams & hp) { hparams_common(f, hp, false); }
void hparams_25(const GgufFile & f, VitHParams & hp) { hparams_common(f, hp, true); }

// A block's MLP: up (fc1), an optional gate, down (fc2), each with an optional bias. Its width is
// the tensors' (Qwen2-VL's feed_forward_length is the text model's width, not the MLP's); old
// files named up and down the other way round (clip.cpp swaps them where ffn_down reads n_embd).
void ffn_tensors(ProjectorLoader & l, VitLayer & L, const std::string & b, int64_t e) {
    std::string up = b + "ffn_up.", down = b + "ffn_down.";
    if (l.meta(down + "weight")->ne[0] == e) std::swap(up, down);
    const int64_t f = l.meta(up + "weight")->ne[1];
    if (f <= 0 || f > (1 << 20)) fail(PSL_ERR_FORMAT, "an MLP %lld wide", (long long) f);
    L.up_w = l.get(up + "weight", {e, f});
    L.up_b = l.get(up + "bias", {f}, false);
    L.gate_w = l.get(b + "ffn_gate.weight", {e, f}, false);
    L.gate_b = l.get(b + "ffn_gate.bias", {f}, false);
    L.down_w = l.get(down + "weight", {f, e});
    L.down_b = l.get(down + "bias", {e}, false);
}

void tensors(ProjectorLoader & l, VitWeights & w, VitHParams & hp) {
    const int64_t e = hp.n_embd, p = hp.patch_size, e4 = 4 * hp.n_embd;
    w.patch_w = l.get_plain("v.patch_embd.weight", {p, p, 3, e});
    w.patch_w1 = l.get_plain("v.patch_embd.weight.1", {p, p, 3, e});
    if (l.get("v.patch_embd.bias", {e}, false)) {   // clip_graph_qwen2vl asserts there is none
        fail(PSL_ERR_FORMAT, "a qwen2vl_merger projector with a patch bias (its graph takes none)");
    }
    w.pre_ln_w = l.get("v.pre_ln.weight", {e}, false);
    w.pre_ln_b = l.get("v.pre_ln.bias", {e}, false);
    vit_norms(l, w, hp);
    for (int il = 0; il < hp.n_layer; ++il) {
        VitLayer & L = w.layers[(size_t) il];
        const std::string b = "v.blk." + std::to_string(il) + ".";
        L.q_w = l.get(b + "attn_q.weight", {e, e});
        L.k_w = l.get(b + "attn_k.weight", {e, e});
        L.v_w = l.get(b + "attn_v.weight", {e, e});
        L.q_b = l.get(b + "attn_q.bias", {e});      // the graph adds them unconditionally
        L.k_b = l.get(b + "attn_k.bias", {e});
        L.v_b = l.get(b + "attn_v.bias", {e});
        L.o_w = l.get(b + "attn_out.weight", {e, e});
        L.o_b = l.get(b + "attn_out.bias", {e}, false);
        ffn_tensors(l, L, b, e);
    }
    const int64_t h = l.meta("mm.0.weight")->ne[1], n_text = l.meta("mm.2.weight")->ne[1];
    if (h <= 0 || h > (1 << 20) || n_text <= 0 || n_text > (1 << 20)) {
        fail(PSL_ERR_FORMAT, "a merger of widths %lld, %lld", (long long) h, (long long) n_text);
    }
    hp.n_embd_text = (int32_t) n_text;
    w.mm0_w = l.get("mm.0.weight", {e4, h});
    w.mm0_b = l.get("mm.0.bias", {h});
    w.mm2_w = l.get("mm.2.weight", {h, n_text});
    w.mm2_b = l.get("mm.2.bias", {n_text});
}

ggml_tensor * norm(ProjectorGraph & g, ggml_tensor * x, ggml_tensor * wt, ggml_tensor * b) {
    if (!g.hp.rms_norm) return g.layer_norm(x, wt, b);
    x = ggml_rms_norm(g.ctx, x, g.hp.eps);
    if (wt) x = ggml_mul(g.ctx, x, wt);
    return b ? ggml_add(g.ctx, x, b) : x;
}

// clip.cpp's build_ffn: act(up) or act(gate) * up, then down.
ggml_tensor * ffn(ProjectorGraph & g, const VitLayer & L, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    using Ffn = VitHParams::Ffn;
    ggml_tensor * up = g.linear(x, L.up_w, L.up_b), * h;
    if (L.gate_w) {
        ggml_tensor * gate = g.linear(x, L.gate_w, L.gate_b);
        h = g.hp.ffn == Ffn::Silu ? ggml_swiglu_split(ctx, gate, up)
          : g.hp.ffn == Ffn::Gelu ? ggml_geglu_split(ctx, gate, up)
                                  : ggml_geglu_quick_split(ctx, gate, up);
    } else {
        h = g.hp.ffn == Ffn::Silu ? ggml_silu(ctx, up)
          : g.hp.ffn == Ffn::Gelu ? ggml_gelu(ctx, up)
                                  : ggml_gelu_quick(ctx, up);
    }
    return g.linear(h, L.down_w, L.down_b);
}

// The windows of a merged grid nx x ny (clip.cpp's qwen2.5vl inputs): slot[r] the place of merged
// row r when the rows are grouped window by window (windows of side `side` in raster order, each
// raster order inside), order the inverse; mask (F16 [n, n], n = 4 * nx * ny patches in the
// grouped order): 0 where query and key share a window, -inf elsewhere.
struct Windows {
    std::vector<int32_t> slot, order;
    std::vector<ggml_fp16_t> mask;
};

Windows windows(int32_t nx, int32_t ny, int32_t side, bool with_mask) {
    const size_t n_rows = (size_t) nx * ny, n = 4 * n_rows;
    Windows w{std::vector<int32_t>(n_rows), std::vector<int32_t>(n_rows),
              std::vector<ggml_fp16_t>(with_mask ? n * n : 0, ggml_fp32_to_fp16(-INFINITY))};
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f);
    size_t dst = 0;
    for (int32_t y = 0; y < ny; y += side) {
        for (int32_t x = 0; x < nx; x += side) {
            const size_t first = dst;
            for (int32_t dy = 0; dy < std::min(side, ny - y); ++dy) {
                for (int32_t dx = 0; dx < std::min(side, nx - x); ++dx, ++dst) {
                    const size_t src = (size_t) (y + dy) * nx + (x + dx);
                    w.slot[src] = (int32_t) dst;
                    w.order[dst] = (int32_t) src;
                }
            }
            for (size_t q = 4 * first; with_mask && q < 4 * dst; ++q) {
                const auto row = w.mask.begin() + (ptrdiff_t) (q * n);
                std::fill(row + (ptrdiff_t) (4 * first), row + (ptrdiff_t) (4 * dst), zero);
            }
        }
    }
    return w;
}

ggml_tensor * input_i32(ProjectorGraph & g, std::vector<int32_t> v) {
    ggml_tensor * t = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, (int64_t) v.size());
    ggml_set_input(t);
    g.inputs_i32.emplace_back(t, std::move(v));
    return t;
}

ggml_tensor * block(ProjectorGraph & g, const VitLayer & L, ggml_tensor * x, ggml_tensor * pos, ggml_tensor * mask) {
    ggml_context * ctx = g.ctx;
    const int64_t e = g.hp.n_embd, n_head = g.hp.n_head, d = e / n_head, n = x->ne[1];
    ggml_tensor * h = norm(g, x, L.ln1_w, L.ln1_b);
    ggml_tensor * q = ggml_reshape_3d(ctx, g.linear(h, L.q_w, L.q_b), d, n_head, n);
    ggml_tensor * k = ggml_reshape_3d(ctx, g.linear(h, L.k_w, L.k_b), d, n_head, n);
    ggml_tensor * v = ggml_reshape_3d(ctx, g.linear(h, L.v_w, L.v_b), d, n_head, n);
    ggml_tensor * a = g.attention(g.vision_rope(q, pos), g.vision_rope(k, pos), v, mask);
    x = ggml_add(ctx, g.linear(a, L.o_w, L.o_b), x);
    return ggml_add(ctx, x, ffn(g, L, norm(g, x, L.ln2_w, L.ln2_b)));
}

ggml_tensor * build(ProjectorGraph & g) {
    ggml_context * ctx = g.ctx;
    const int p = g.hp.patch_size, wa = g.hp.n_wa_pattern;
    const int64_t e = g.hp.n_embd, px = g.width / p, py = g.height / p, n = px * py;
    ggml_tensor * x = g.temporal_patches(px, py);                               // [e, n]
    if (g.w.pre_ln_w) x = norm(g, x, g.w.pre_ln_w, g.w.pre_ln_b);
    ggml_tensor * mask = nullptr, * back = nullptr;
    Windows win;
    if (wa > 0) {
        // n_wa_pattern 1: every layer attends in full (no mask), the rows grouped all the same
        win = windows((int32_t) px / kMerge, (int32_t) py / kMerge, kWindowPixels / p / kMerge, wa > 1);
        if (wa > 1) {
            mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n, n);
            ggml_set_input(mask);
            g.inputs_f16.emplace_back(mask, std::move(win.mask));
        }
        x = ggml_get_rows(ctx, ggml_reshape_2d(ctx, x, 4 * e, n / 4), input_i32(g, win.order));   // grouped
        x = ggml_reshape_2d(ctx, x, e, n);
        back = input_i32(g, win.slot);
    }
    ggml_tensor * pos = g.rope_positions(px, py, wa > 0 ? &win.slot : nullptr);
    for (size_t il = 0; il < g.w.layers.size(); ++il) {
        const bool full = wa == 0 || (il + 1) % (size_t) wa == 0;
        x = block(g, g.w.layers[il], x, pos, full ? nullptr : mask);
    }
    if (g.w.post_ln_w) x = norm(g, x, g.w.post_ln_w, g.w.post_ln_b);
    x = ggml_reshape_2d(ctx, x, 4 * e, n / 4);                                  // 2 x 2 patches a row
    x = g.linear(ggml_gelu(ctx, g.linear(x, g.w.mm0_w, g.w.mm0_b)), g.w.mm2_w, g.w.mm2_b);
    return back ? ggml_get_rows(ctx, x, back) : x;                              // [n_embd_text, n_tokens]
}

// Rectangles of whole 2 x 2 patch blocks (the smart resize makes them).
void grid(const VitHParams & hp, int64_t width, int64_t height, int32_t & nx, int32_t & ny) {
    grid_2x2(hp, width, height, hp.n_wa_pattern > 0 ? kMostWindowPatches : kMostPatches, nx, ny);
}

}  // namespace

extern const ProjectorOps projector_qwen2vl = {"qwen2vl_merger", /*non_causal =*/ false, /*mrope =*/ true,
                                               hparams_2, tensors, build, grid};
extern const ProjectorOps projector_qwen25vl = {"qwen2.5vl_merger", /*non_causal =*/ false, /*mrope =*/ true,
                                                hparams_25, tensors, build, grid};

}  // namespace psl
