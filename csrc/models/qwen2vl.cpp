// Qwen2-VL / Qwen2.5-VL's text model (llama.cpp's "qwen2vl"): Qwen2's layer (q, k, v biases)
// with M-RoPE: the head's rotary pairs split into rope.dimension_sections (t, y, x, e), each
// rotated by its own position. A text token's positions are (p, p, p, 0), as llama.cpp's batch
// expands them; an image's rows placed 2-D (mrope_rows) get (t, t + y, t + x, 0) from the
// sequence's row spans (memory/row_spans.h), as libmtmd places them for this architecture.
#include "models/common/arch_common.h"

#include "gguf/gguf_file.h"

namespace psl {

namespace {

// rope.dimension_sections: required, as llama.cpp's loader has it; ggml's M-RoPE rotates all of
// a head (llama.cpp asserts n_rot == the head size) and cycles through the sections' sum.
void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const char * path = f.path().c_str();
    const std::string key = a + ".rope.dimension_sections";
    if (!f.has(key)) fail(PSL_ERR_FORMAT, "'%s': required key '%s' is missing", path, key.c_str());
    const std::vector<int64_t> sec = f.get_ints(key);
    if (sec.empty() || sec.size() > 4) {
        fail(PSL_ERR_FORMAT, "'%s': %s has %zu entries (1 to 4)", path, key.c_str(), sec.size());
    }
    int64_t sum = 0;
    for (size_t i = 0; i < sec.size(); ++i) {
        if (sec[i] < 0 || sec[i] > 4096) fail(PSL_ERR_FORMAT, "'%s': bad rope section %lld", path, (long long) sec[i]);
        hp.rope_sections[i] = (int32_t) sec[i];
        sum += sec[i];
    }
    if (sum <= 0) fail(PSL_ERR_FORMAT, "'%s': the rope sections sum to 0", path);
    if (hp.n_embd_head_k != hp.n_embd_head_v || hp.n_rot != hp.n_embd_head_k) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': qwen2vl needs rope over whole heads of one size (n_rot %d, key %d, value %d)",
             path, hp.n_rot, hp.n_embd_head_k, hp.n_embd_head_v);
    }
}

void tensors(TensorLoader & tl, psl_model & m) { create_llama_like(tl, m, /*bias =*/ true, /*qk_norm =*/ false); }

ggml_tensor * build(Graph & g) {
    g.inp_pos4 = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, 4 * (int64_t) g.n_tokens);
    ggml_set_name(g.inp_pos4, "inp_pos4");
    ggml_set_input(g.inp_pos4);
    return build_llama_like(g, GGML_ROPE_TYPE_MROPE);
}

}  // namespace

extern const ArchOps arch_qwen2vl = {"qwen2vl", hparams, tensors, build, nullptr, nullptr, false, /*takes_rows =*/ true,
                                     /*mrope_rows =*/ true};

}  // namespace psl
