// NEON kernels for matmul_rows (see matmul_rows_neon.h). Each follows the one-row NEON loop of
// ggml's vec_dot (ggml-cpu/arch/arm/quants.c) for its type: two blocks a step into two float
// accumulators, the same dot instructions, the same multiply-adds (vmlaq_n_f32, so the compiler
// contracts them as it does ggml's), a scalar tail for an odd block count and the same final sum.
// Only the loop over the R rows is ours, inside the block loop, so a block is unpacked once.
#include "matmul_rows_neon.h"

#if defined(PSL_ROWS_NEON)

#include <arm_neon.h>

#include <cstring>

namespace psl::neon {
namespace {

// ggml's block layouts (ggml-common.h), mirrored so this file needs no ggml header.
struct block_q8_0 { __fp16 d; int8_t qs[32]; };
struct block_q8_1 { __fp16 d; __fp16 s; int8_t qs[32]; };
struct block_q4_1 { __fp16 d; __fp16 m; uint8_t qs[16]; };
struct block_q4_K { __fp16 d; __fp16 dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(block_q8_0) == 34 && sizeof(block_q8_1) == 36 && sizeof(block_q4_1) == 20);
struct block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; __fp16 d; };
static_assert(sizeof(block_q6_K) == 210);
static_assert(sizeof(block_q4_K) == 144 && sizeof(block_q8_K) == 292);

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

// Q4_K's 12 bytes of 6-bit scales and mins, unpacked as ggml's NEON vec_dot does: scales[0..7]
// (bytes of utmp[0..1]) and the 8 mins widened to 16 bits.
struct Q4KScales { uint32_t utmp[4]; int16x8_t mins; };

inline Q4KScales q4_K_scales(const uint8_t * packed) {
    constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    Q4KScales s;
    std::memcpy(s.utmp, packed, 12);
    uint32x2_t mins8 = {0};
    mins8 = vset_lane_u32(s.utmp[1] & kmask1, mins8, 0);
    mins8 = vset_lane_u32(((s.utmp[2] >> 4) & kmask2) | (((s.utmp[1] >> 6) & kmask3) << 4), mins8, 1);
    s.utmp[1] = (s.utmp[2] & kmask2) | (((s.utmp[0] >> 6) & kmask3) << 4);
    s.utmp[0] &= kmask1;
    s.mins = vreinterpretq_s16_u16(vmovl_u8(vreinterpret_u8_u32(mins8)));
    return s;
}

template <int R>
void q4_K_rows(const void * w_row, const void * const * y, int64_t k, float * res) {
    const auto * x = static_cast<const block_q4_K *>(w_row);
    const block_q8_K * yr[R];
    for (int r = 0; r < R; ++r) yr[r] = static_cast<const block_q8_K *>(y[r]);
    const int nb = (int) (k / 256);
    const uint8x16_t m4b = vdupq_n_u8(0xf);
    const int32x4_t mzero = vdupq_n_s32(0);
    float sumf[R];
    for (int r = 0; r < R; ++r) sumf[r] = 0;
    for (int i = 0; i < nb; ++i) {
        const Q4KScales sc = q4_K_scales(x[i].scales);
        const uint8_t * scales = reinterpret_cast<const uint8_t *>(sc.utmp);
        // the block's 256 nibbles as bytes, once for all rows: q[4j..4j+1] low, q[4j+2..] high
        int8x16_t q[16];
        for (int j = 0; j < 4; ++j) {
            const uint8x16_t b0 = vld1q_u8(x[i].qs + 32 * j), b1 = vld1q_u8(x[i].qs + 32 * j + 16);
            q[4 * j + 0] = vreinterpretq_s8_u8(vandq_u8(b0, m4b));
            q[4 * j + 1] = vreinterpretq_s8_u8(vandq_u8(b1, m4b));
            q[4 * j + 2] = vreinterpretq_s8_u8(vshrq_n_u8(b0, 4));
            q[4 * j + 3] = vreinterpretq_s8_u8(vshrq_n_u8(b1, 4));
        }
        const float xd = f32(x[i].d), xdmin = f32(x[i].dmin);
        for (int r = 0; r < R; ++r) {
            const block_q8_K & yb = yr[r][i];
            const float d = yb.d * xd;
            const float dmin = yb.d * xdmin;
            const int16x8_t q8sums = vpaddq_s16(vld1q_s16(yb.bsums), vld1q_s16(yb.bsums + 8));
            const int32x4_t prod = vaddq_s32(vmull_s16(vget_low_s16(q8sums), vget_low_s16(sc.mins)),
                                             vmull_s16(vget_high_s16(q8sums), vget_high_s16(sc.mins)));
            sumf[r] -= dmin * vaddvq_s32(prod);
            int32_t sumi1 = 0, sumi2 = 0;
            for (int j = 0; j < 4; ++j) {
                const int8_t * q8 = yb.qs + 64 * j;
                const int32x4_t p1 = vdotq_s32(vdotq_s32(mzero, q[4 * j], vld1q_s8(q8)),
                                               q[4 * j + 1], vld1q_s8(q8 + 16));
                sumi1 += vaddvq_s32(p1) * scales[2 * j + 0];
                const int32x4_t p2 = vdotq_s32(vdotq_s32(mzero, q[4 * j + 2], vld1q_s8(q8 + 32)),
                                               q[4 * j + 3], vld1q_s8(q8 + 48));
                sumi2 += vaddvq_s32(p2) * scales[2 * j + 1];
            }
            sumf[r] += d * (sumi1 + sumi2);
        }
    }
    for (int r = 0; r < R; ++r) res[r] = sumf[r];
}

// Q6_K's 256 6-bit quants (biased by 32, which vec_dot takes off through the bsums) as bytes, in
// ggml's order: q[8h + 0..3] the low nibbles of half h's 64 ql bytes, q[8h + 4..7] the high ones.
inline void q6_K_unpack(const block_q6_K & b, int8x16_t q[16]) {
    const uint8x16_t m4b = vdupq_n_u8(0xF), mone = vdupq_n_u8(3);
    for (int h = 0; h < 2; ++h) {
        const uint8x16_t qh0 = vld1q_u8(b.qh + 32 * h), qh1 = vld1q_u8(b.qh + 32 * h + 16);
        const uint8x16_t hb[8] = {
            vshlq_n_u8(vandq_u8(mone, qh0), 4), vshlq_n_u8(vandq_u8(mone, qh1), 4),
            vshlq_n_u8(vandq_u8(mone, vshrq_n_u8(qh0, 2)), 4),
            vshlq_n_u8(vandq_u8(mone, vshrq_n_u8(qh1, 2)), 4),
            vshlq_n_u8(vandq_u8(mone, vshrq_n_u8(qh0, 4)), 4),
            vshlq_n_u8(vandq_u8(mone, vshrq_n_u8(qh1, 4)), 4),
            vshlq_n_u8(vandq_u8(mone, vshrq_n_u8(qh0, 6)), 4),
            vshlq_n_u8(vandq_u8(mone, vshrq_n_u8(qh1, 6)), 4)};
        for (int v = 0; v < 4; ++v) {
            const uint8x16_t lo = vld1q_u8(b.ql + 64 * h + 16 * v);
            q[8 * h + v] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(lo, m4b), hb[v]));
            q[8 * h + 4 + v] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(lo, 4), hb[4 + v]));
        }
    }
}

template <int R>
void q6_K_rows(const void * w_row, const void * const * y, int64_t k, float * res) {
    const auto * x = static_cast<const block_q6_K *>(w_row);
    const block_q8_K * yr[R];
    for (int r = 0; r < R; ++r) yr[r] = static_cast<const block_q8_K *>(y[r]);
    const int nb = (int) (k / 256);
    const int32x4_t vzero = vdupq_n_s32(0);
    float sum[R];
    for (int r = 0; r < R; ++r) sum[r] = 0;
    for (int i = 0; i < nb; ++i) {
        int8x16_t q[16];
        q6_K_unpack(x[i], q);
        const float d_all = f32(x[i].d);
        const int8_t * scale = x[i].scales;
        const int8x16_t scales = vld1q_s8(scale);
        const int16x8_t sc0 = vmovl_s8(vget_low_s8(scales)), sc1 = vmovl_s8(vget_high_s8(scales));
        for (int r = 0; r < R; ++r) {
            const block_q8_K & yb = yr[r][i];
            const int16x8_t s0 = vld1q_s16(yb.bsums), s1 = vld1q_s16(yb.bsums + 8);
            const int32x4_t prod = vaddq_s32(
                vaddq_s32(vmull_s16(vget_low_s16(s0), vget_low_s16(sc0)),
                          vmull_s16(vget_high_s16(s0), vget_high_s16(sc0))),
                vaddq_s32(vmull_s16(vget_low_s16(s1), vget_low_s16(sc1)),
                          vmull_s16(vget_high_s16(s1), vget_high_s16(sc1))));
            const int32_t isum_mins = vaddvq_s32(prod);
            // integer sums: exact in any order, so one loop over the 16 groups of 16
            int32_t isum = 0;
            for (int g = 0; g < 16; ++g) {
                isum += vaddvq_s32(vdotq_s32(vzero, q[g], vld1q_s8(yb.qs + 16 * g))) * scale[g];
            }
            sum[r] += d_all * yb.d * (isum - 32 * isum_mins);
        }
    }
    for (int r = 0; r < R; ++r) res[r] = sum[r];
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
PSL_NEON_INST(q4_K_rows)
PSL_NEON_INST(q6_K_rows)

}  // namespace psl::neon

#endif
