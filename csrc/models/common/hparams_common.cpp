// Hyper-parameter rules a few architectures share: YaRN's attention factor with a log
// multiplier (deepseek2, mistral3), the vocabulary size before the tokenizer is loaded.
#include "models/common/arch_common.h"

#include "gguf.h"

namespace psl {

namespace {
// llama.cpp's get_mscale
float mscale_of(float scale, float mscale) { return scale <= 1.0f ? 1.0f : 0.1f * mscale * logf(scale) + 1.0f; }
}  // namespace

void set_yarn_log_mul(const GgufFile & f, const std::string & a, HParams & hp, float log_mul, bool deepseek) {
    hp.rope_yarn_log_mul = log_mul;
    if (hp.rope_ext_factor == 0.0f || log_mul == 0.0f) return;   // not YaRN, or the plain YaRN factor
    // llama_context's YaRN setup: mscale 1 (DeepSeek V2: mscale_all_dims when it is not 1), over
    // the all-dims mscale, with ggml's own 1 + 0.1 ln(factor) cancelled, times the file's factor
    const float factor = 1.0f / hp.rope_freq_scale;
    const float mscale = deepseek && log_mul != 1.0f ? log_mul : 1.0f;
    hp.rope_attn_factor = mscale_of(factor, mscale) / mscale_of(factor, log_mul) / (1.0f + 0.1f * logf(factor)) *
                          (float) f.get_float(a + ".rope.scaling.attn_factor", 1.0);
    if (!std::isfinite(hp.rope_attn_factor)) fail(PSL_ERR_FORMAT, "'%s': YaRN log multiplier out of range", f.path().c_str());
}

void load_attn_temperature(const GgufFile & f, const std::string & a, HParams & hp, int32_t floor_dflt) {
    hp.attn_temp_scale = (float) f.get_float(a + ".attention.temperature_scale", 0.0);
    hp.attn_temp_floor = (int32_t) f.get_int(a + ".attention.temperature_length", floor_dflt);
    if (hp.attn_temp_scale != 0.0f && (hp.attn_temp_floor <= 0 || !std::isfinite(hp.attn_temp_scale))) {
        fail(PSL_ERR_FORMAT, "'%s': attention temperature scaling needs a positive length (got %d)", f.path().c_str(),
             hp.attn_temp_floor);
    }
}

int64_t vocab_size(const GgufFile & f, const std::string & a) {
    if (f.has(a + ".vocab_size")) return f.get_int(a + ".vocab_size");
    const int64_t id = gguf_find_key(f.gguf(), "tokenizer.ggml.tokens");
    return id >= 0 && gguf_get_kv_type(f.gguf(), id) == GGUF_TYPE_ARRAY ? (int64_t) gguf_get_arr_n(f.gguf(), id) : 0;
}

}  // namespace psl
