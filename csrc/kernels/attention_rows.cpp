#include "kernels/attention_rows.h"
#include "kernels/simd.h"

#include "ggml-cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

namespace psl {
namespace {

using namespace kern;

constexpr int64_t TILE_ROWS = 64;      // ggml-cpu's GGML_FA_TILE_Q: from here ggml tiles, in F32
constexpr int64_t SPLIT_CELLS = 512;   // ggml splits one row's cells over the threads from here
// ggml's F16 step where its row path accumulates V in native F16 arithmetic (AVX512-FP16, ARM's
// FP16 vector arithmetic): from a head of that many values on it converts nothing and ggml's stays
// (measured on AVX512-FP16, Gemma 3's heads of 256, 8 rows: ggml 93 us a layer, this 150; ARM's
// assumed alike). 0: ggml converts to F32 lanes too, as this does.
#if defined(__AVX512FP16__)
constexpr int64_t NATIVE_F16_STEP = 128;
#elif defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
constexpr int64_t NATIVE_F16_STEP = 32;
#else
constexpr int64_t NATIVE_F16_STEP = 0;
#endif
constexpr int64_t BLOCK = 16;          // cells converted from F16 together, for every query

// One cell's step of the online softmax: the accumulator is scaled by ms, then v[cell] * vs is added.
struct Step {
    int64_t cell;
    float ms, vs;
};

// acc (F16 values in F32) after the steps, each rounded to F16 as ggml_vec_scale_f16 and
// ggml_vec_mad_f16 round it (one fused multiply-add, then rounded): U registers of acc stay in
// registers across a block's cells. v: [cells][dv].
void accumulate(float * acc, const float * v, int64_t dv, const Step * steps, int64_t n) {
    constexpr int U = 4;
    int64_t i = 0;
    for (; i + U * Vec::N <= dv; i += U * Vec::N) {
        Vec a[U];
        for (int u = 0; u < U; ++u) a[u] = Vec::load(acc + i + u * Vec::N);
        for (int64_t t = 0; t < n; ++t) {
            if (steps[t].ms != 1.0f) {
                const Vec ms = Vec::splat(steps[t].ms);
                for (int u = 0; u < U; ++u) a[u] = Vec::mul(a[u], ms).f16();
            }
            const Vec vs = Vec::splat(steps[t].vs);
            const float * vr = v + steps[t].cell * dv + i;
            for (int u = 0; u < U; ++u) a[u] = Vec::fma(Vec::load(vr + u * Vec::N), vs, a[u]).f16();
        }
        for (int u = 0; u < U; ++u) a[u].store(acc + i + u * Vec::N);
    }
    for (; i < dv; ++i) {
        float a = acc[i];
        for (int64_t t = 0; t < n; ++t) {
            if (steps[t].ms != 1.0f) a = to_f16(a * steps[t].ms);
            a = to_f16(a + v[steps[t].cell * dv + i] * steps[t].vs);   // as ggml's scalar leftovers
        }
        acc[i] = a;
    }
}

struct Scratch {
    std::vector<float> q;     // [nq][dk]: the queries, rounded to F16 as ggml's row path does
    std::vector<float> k;     // [BLOCK][dk]
    std::vector<float> v;     // [BLOCK][dv]
    std::vector<float> mv;    // [BLOCK]: one query row's mask over the block
    std::vector<float> acc;   // [nq][dv]: V weighted by the softmax so far (F16 values)
    std::vector<float> m, s;  // [nq]: running maximum and sum
};

// Queries j0..j1 of K/V head hk: query j is head hk*G + j / n_rows, row j % n_rows.
void attend(ggml_tensor * dst, int64_t hk, int64_t j0, int64_t j1, float scale, Scratch & w) {
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const ggml_tensor * v = dst->src[2];
    const ggml_tensor * mask = dst->src[3];
    const int64_t dk = k->ne[0], dv = v->ne[0], n_kv = k->ne[1], n_rows = q->ne[1];
    const int64_t group = q->ne[2] / k->ne[2], nq = j1 - j0;
    auto head = [&](int64_t jj) { return hk * group + (j0 + jj) / n_rows; };
    auto row = [&](int64_t jj) { return (j0 + jj) % n_rows; };

    w.q.resize(nq * dk), w.k.resize(BLOCK * dk), w.v.resize(BLOCK * dv);
    w.mv.resize(BLOCK), w.acc.assign(nq * dv, 0.0f), w.m.assign(nq, -INFINITY), w.s.assign(nq, 0.0f);
    for (int64_t jj = 0; jj < nq; ++jj) {
        const float * pq = (const float *) ((const char *) q->data + row(jj) * q->nb[1] + head(jj) * q->nb[2]);
        for (int64_t d = 0; d < dk; ++d) w.q[jj * dk + d] = to_f16(pq[d]);
    }
    auto mask_row = [&](int64_t jj) {
        return (const ggml_fp16_t *) ((const char *) mask->data + row(jj) * mask->nb[1]);
    };
    const ggml_fp16_t neg_inf = ggml_fp32_to_fp16(-INFINITY);

    for (int64_t c0 = 0; c0 < n_kv; c0 += BLOCK) {
        const int64_t nb = std::min(BLOCK, n_kv - c0);
        bool seen = false;   // a block no query sees (the future, unused cells) is not read
        for (int64_t jj = 0; jj < nq && !seen; ++jj) {
            const ggml_fp16_t * mr = mask_row(jj) + c0;
            for (int64_t c = 0; c < nb && !seen; ++c) seen = mr[c] != neg_inf;
        }
        if (!seen) continue;
        for (int64_t c = 0; c < nb; ++c) {
            const char * kr = (const char *) k->data + (c0 + c) * k->nb[1] + hk * k->nb[2];
            const char * vr = (const char *) v->data + (c0 + c) * v->nb[1] + hk * v->nb[2];
            ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) kr, &w.k[c * dk], dk);
            ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) vr, &w.v[c * dv], dv);
        }
        for (int64_t jj = 0; jj < nq; ++jj) {
            ggml_cpu_fp16_to_fp32(mask_row(jj) + c0, w.mv.data(), nb);
            if (std::all_of(w.mv.begin(), w.mv.begin() + nb, [](float x) { return x == -INFINITY; })) continue;
            // ggml's online softmax, cell by cell: its maximum and sum first (they do not depend
            // on V), then the accumulator through the same steps
            float & M = w.m[jj];
            float & S = w.s[jj];
            Step steps[BLOCK];
            int64_t n_steps = 0;
            for (int64_t c = 0; c < nb; ++c) {
                if (w.mv[c] == -INFINITY) continue;
                const float x = dot(&w.q[jj * dk], &w.k[c * dk], dk) * scale + w.mv[c];
                float ms = 1.0f, vs = 1.0f;
                if (x > M) {
                    const float m_old = M;
                    M = x;
                    ms = expf(m_old - M);
                } else {
                    vs = expf(x - M);
                }
                S = S * ms + vs;
                steps[n_steps++] = {c, ms, vs};
            }
            accumulate(&w.acc[jj * dv], w.v.data(), dv, steps, n_steps);
        }
    }
    for (int64_t jj = 0; jj < nq; ++jj) {
        const float inv = w.s[jj] == 0.0f ? 0.0f : 1.0f / w.s[jj];
        float * out = (float *) ((char *) dst->data + row(jj) * dst->nb[2] + head(jj) * dst->nb[1]);
        for (int64_t d = 0; d < dv; ++d) out[d] = w.acc[jj * dv + d] * inv;
    }
}

// ggml's custom-op callback: the K/V heads' queries in parts, dealt out to the threads.
void compute(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const float scale = *(const float *) userdata;
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const int64_t n_kv_heads = k->ne[2];
    const int64_t per_head = q->ne[2] / n_kv_heads * q->ne[1];
    // as few parts as deal out evenly (each part converts its K/V blocks again); a part holds
    // whole heads' rows where it can, so that causal rows (more cells seen later) even out
    const int64_t parts = std::clamp<int64_t>(nth / std::gcd<int64_t>(n_kv_heads, nth), 1, per_head);
    thread_local Scratch w;
    for (int64_t u = ith; u < n_kv_heads * parts; u += nth) {
        const int64_t hk = u / parts, p = u % parts;
        attend(dst, hk, p * per_head / parts, (p + 1) * per_head / parts, scale, w);
    }
}

bool enabled() {
    const char * env = std::getenv("PYLLAMASPEC_ATTN_ROWS");
    return !env || std::strcmp(env, "ggml") != 0;
}

}  // namespace

bool attention_rows_fit(const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v, const ggml_tensor * mask) {
    if (q->type != GGML_TYPE_F32 || k->type != GGML_TYPE_F16 || v->type != GGML_TYPE_F16) return false;
    if (!mask || mask->type != GGML_TYPE_F16) return false;
    if (q->ne[3] != 1 || k->ne[3] != 1 || v->ne[3] != 1 || k->ne[2] != v->ne[2] || q->ne[2] % k->ne[2] != 0) {
        return false;
    }
    if (q->nb[0] != sizeof(float) || k->nb[0] != sizeof(ggml_fp16_t) || v->nb[0] != sizeof(ggml_fp16_t)) return false;
    const int64_t n_rows = q->ne[1];
    if (n_rows >= TILE_ROWS || (n_rows == 1 && k->ne[1] >= SPLIT_CELLS)) return false;
    return attention_rows_on(v->ne[0]);
}

bool attention_rows_on(int64_t dv) {
    return !(NATIVE_F16_STEP > 0 && dv >= NATIVE_F16_STEP) && enabled();
}

ggml_tensor * attention_rows(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                             ggml_tensor * mask, const float * scale) {
    ggml_tensor * args[4] = {q, k, v, mask};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, v->ne[0], q->ne[2], q->ne[1], 1, args, 4, compute, GGML_N_TASKS_MAX,
                          (void *) scale);
}

}  // namespace psl
