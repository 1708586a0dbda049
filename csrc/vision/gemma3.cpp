// Gemma 3's projector (clip.projector_type "gemma3"): the SigLIP ViT, its patch grid averaged in
// n_merge x n_merge blocks (clip.vision.projector.scale_factor, 4 by default: 64x64 patches ->
// 256 rows), an RMS norm and a linear projection to the text model's width. In the text model an
// image's rows attend to each other both ways (llama.cpp's mtmd_decode_use_non_causal).
#include "vision/projector.h"

#include "error.h"
#include "gguf/gguf_file.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, VitHParams & hp) {
    const int64_t merge = f.get_int("clip.vision.projector.scale_factor", 4);
    if (merge <= 0 || hp.patches_side() % merge != 0) {
        fail(PSL_ERR_FORMAT, "'%s': projector scale_factor %lld does not divide the %d patches of a side",
             f.path().c_str(), (long long) merge, hp.patches_side());
    }
    hp.n_merge = (int32_t) merge;
}

void tensors(ProjectorLoader & l, VitWeights & w, VitHParams & hp) {
    vit_tensors(l, w, hp);
    w.mm_soft_norm_w = l.get("mm.soft_emb_norm.weight", {hp.n_embd});
    // [n_embd_text, n_embd]: the text model's width is the file's to say
    const int64_t n_text = l.meta("mm.input_projection.weight")->ne[0];
    if (n_text <= 0 || n_text > (1 << 20)) fail(PSL_ERR_FORMAT, "projection to a width of %lld", (long long) n_text);
    hp.n_embd_text = (int32_t) n_text;
    w.mm_proj_w = l.get_plain("mm.input_projection.weight", {hp.n_embd_text, hp.n_embd});
}

ggml_tensor * build(ProjectorGraph & g) {
    ggml_context * ctx = g.ctx;
    const int64_t side = g.hp.patches_side(), e = g.hp.n_embd, k = g.hp.n_merge;
    ggml_tensor * x = g.vit();                                               // [n_embd, side * side]
    x = ggml_cont_3d(ctx, ggml_transpose(ctx, x), side, side, e);            // [side, side, n_embd]
    x = ggml_pool_2d(ctx, x, GGML_OP_POOL_AVG, (int) k, (int) k, (int) k, (int) k, 0, 0);
    x = ggml_reshape_2d(ctx, x, x->ne[0] * x->ne[1], e);
    x = ggml_cont(ctx, ggml_transpose(ctx, x));                              // [n_embd, n_tokens]
    x = ggml_mul(ctx, ggml_rms_norm(ctx, x, g.hp.eps), g.w.mm_soft_norm_w);
    // the file stores the projection as [n_embd_text, n_embd] (ne): its transpose multiplies
    return ggml_mul_mat(ctx, ggml_cont(ctx, ggml_transpose(ctx, g.w.mm_proj_w)), x);
}

// The square image_size only (mtmd resizes every image into it).
void grid(const VitHParams & hp, int64_t width, int64_t height, int32_t & nx, int32_t & ny) {
    if (width != hp.image_size || height != hp.image_size) {
        fail(PSL_ERR_INVALID_ARGUMENT, "the projector takes %dx%d images (preprocessed), got %lldx%lld",
             hp.image_size, hp.image_size, (long long) width, (long long) height);
    }
    nx = ny = hp.patches_side() / hp.n_merge;
}

}  // namespace

extern const ProjectorOps projector_gemma3 = {"gemma3", /*non_causal =*/ true, /*mrope =*/ false, hparams,
                                          tensors, build, grid};

}  // namespace psl
