// NEON kernels for matmul_rows (see matmul_rows_neon.h). Each follows the one-row NEON loop of
// ggml's vec_dot (ggml-cpu/arch/arm/quants.c) for its type: two blocks a step into two float
// accumulators, the same dot instructions, the same multiply-adds (vmlaq_n_f32, so the compiler
// contracts them as it does ggml's), a scalar tail for an odd block count and the same final sum.
// Only the loop over the R rows is ours, inside the block loop, so a block is unpacked once.
#include "matmul_rows_neon.h"

#if defined(PSL_ROWS_NEON)

#include <arm_neon.h>

namespace psl::neon {
namespace {

// ggml's block layouts (ggml-common.h), mirrored so this file needs no ggml header.
struct block_q8_0 { __fp16 d; int8_t qs[32]; };
struct block_q8_1 { __fp16 d; __fp16 s; int8_t qs[32]; };
struct block_q4_1 { __fp16 d; __fp16 m; uint8_t qs[16]; };
static_assert(sizeof(block_q8_0) == 34 && sizeof(block_q8_1) == 36 && sizeof(block_q4_1) == 20);

inline float f32(__fp16 h) { return (float) h; }

}  // namespace

template <int R>
void q8_0_rows(const void * w_row, const void * const * y, int64_t k, float * res) {
    const auto * x = static_cast<const block_q8_0 *>(w_row);
    const block_q8_0 * yr[R];
    for (int r = 0; r < R; ++r) yr[r] = static_cast<const block_q8_0 *>(y[r]);
    const int nb = (int) (k / 32);
    float32x4_t sumv0[R], sumv1[R];
    for (int r = 0; r < R; ++r) { sumv0[r] = vdupq_n_f32(0.0f); sumv1[r] = vdupq_n_f32(0.0f); }
    int ib = 0;
    for (; ib + 1 < nb; ib += 2) {
        const int8x16_t x0_0 = vld1q_s8(x[ib].qs), x0_1 = vld1q_s8(x[ib].qs + 16);
        const int8x16_t x1_0 = vld1q_s8(x[ib + 1].qs), x1_1 = vld1q_s8(x[ib + 1].qs + 16);
        const float d0 = f32(x[ib].d), d1 = f32(x[ib + 1].d);
        for (int r = 0; r < R; ++r) {
            const block_q8_0 * y0 = &yr[r][ib];
            const block_q8_0 * y1 = &yr[r][ib + 1];
            sumv0[r] = vmlaq_n_f32(sumv0[r], vcvtq_f32_s32(vaddq_s32(
                vdotq_s32(vdupq_n_s32(0), x0_0, vld1q_s8(y0->qs)),
                vdotq_s32(vdupq_n_s32(0), x0_1, vld1q_s8(y0->qs + 16)))), d0 * f32(y0->d));
            sumv1[r] = vmlaq_n_f32(sumv1[r], vcvtq_f32_s32(vaddq_s32(
                vdotq_s32(vdupq_n_s32(0), x1_0, vld1q_s8(y1->qs)),
                vdotq_s32(vdupq_n_s32(0), x1_1, vld1q_s8(y1->qs + 16)))), d1 * f32(y1->d));
        }
    }
    for (int r = 0; r < R; ++r) {
        float sumf = vaddvq_f32(sumv0[r]) + vaddvq_f32(sumv1[r]);
        // vec_dot's scalar tail, for an odd block count
        for (int jb = ib; jb < nb; ++jb) {
            int sumi = 0;
            for (int j = 0; j < 32; j++) sumi += x[jb].qs[j] * yr[r][jb].qs[j];
            sumf += sumi * (f32(x[jb].d) * f32(yr[r][jb].d));
        }
        res[r] = sumf;
    }
}

template <int R>
void q4_1_rows(const void * w_row, const void * const * y, int64_t k, float * res) {
    const auto * x = static_cast<const block_q4_1 *>(w_row);
    const block_q8_1 * yr[R];
    for (int r = 0; r < R; ++r) yr[r] = static_cast<const block_q8_1 *>(y[r]);
    const int nb = (int) (k / 32);
    float32x4_t sumv0[R], sumv1[R];
    float summs[R];
    for (int r = 0; r < R; ++r) {
        sumv0[r] = vdupq_n_f32(0.0f); sumv1[r] = vdupq_n_f32(0.0f); summs[r] = 0;
    }
    const uint8x16_t m4b = vdupq_n_u8(0x0F);
    int ib = 0;
    for (; ib + 1 < nb; ib += 2) {
        const block_q4_1 * x0 = &x[ib];
        const block_q4_1 * x1 = &x[ib + 1];
        const uint8x16_t v0_0 = vld1q_u8(x0->qs), v0_1 = vld1q_u8(x1->qs);
        const int8x16_t v0_0l = vreinterpretq_s8_u8(vandq_u8(v0_0, m4b));
        const int8x16_t v0_0h = vreinterpretq_s8_u8(vshrq_n_u8(v0_0, 4));
        const int8x16_t v0_1l = vreinterpretq_s8_u8(vandq_u8(v0_1, m4b));
        const int8x16_t v0_1h = vreinterpretq_s8_u8(vshrq_n_u8(v0_1, 4));
        for (int r = 0; r < R; ++r) {
            const block_q8_1 * y0 = &yr[r][ib];
            const block_q8_1 * y1 = &yr[r][ib + 1];
            // the same expression as ggml's, so the compiler contracts it the same way
            summs[r] += f32(x0->m) * f32(y0->s) + f32(x1->m) * f32(y1->s);
            const int32x4_t p_0 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), v0_0l, vld1q_s8(y0->qs)),
                                            v0_0h, vld1q_s8(y0->qs + 16));
            const int32x4_t p_1 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), v0_1l, vld1q_s8(y1->qs)),
                                            v0_1h, vld1q_s8(y1->qs + 16));
            sumv0[r] = vmlaq_n_f32(sumv0[r], vcvtq_f32_s32(p_0), f32(x0->d) * f32(y0->d));
            sumv1[r] = vmlaq_n_f32(sumv1[r], vcvtq_f32_s32(p_1), f32(x1->d) * f32(y1->d));
        }
    }
    for (int r = 0; r < R; ++r) {
        float sumf = vaddvq_f32(sumv0[r]) + vaddvq_f32(sumv1[r]) + summs[r];
        for (int jb = ib; jb < nb; ++jb) {
            const block_q8_1 & yb = yr[r][jb];
            int sumi0 = 0, sumi1 = 0;
            for (int j = 0; j < 16; ++j) {
                sumi0 += (x[jb].qs[j] & 0x0F) * yb.qs[j];
                sumi1 += (x[jb].qs[j] >> 4) * yb.qs[j + 16];
            }
            const int sumi = sumi0 + sumi1;
            sumf += (f32(x[jb].d) * f32(yb.d)) * sumi + f32(x[jb].m) * f32(yb.s);
        }
        res[r] = sumf;
    }
}

#define PSL_NEON_INST(fn)                                                                  \
    template void fn<1>(const void *, const void * const *, int64_t, float *);             \
    template void fn<2>(const void *, const void * const *, int64_t, float *);             \
    template void fn<3>(const void *, const void * const *, int64_t, float *);             \
    template void fn<4>(const void *, const void * const *, int64_t, float *);             \
    template void fn<5>(const void *, const void * const *, int64_t, float *);             \
    template void fn<6>(const void *, const void * const *, int64_t, float *);             \
    template void fn<7>(const void *, const void * const *, int64_t, float *);             \
    template void fn<8>(const void *, const void * const *, int64_t, float *);
PSL_NEON_INST(q8_0_rows)
PSL_NEON_INST(q4_1_rows)

}  // namespace psl::neon

#endif
