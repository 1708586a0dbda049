// matmul_rows' kernels for x86 (AVX2, FMA, F16C; two weight rows at once on AVX-512): the
// activations as vec_dot reads them, a kernel per weight type and row count, and the node's
// per-thread loop (matmul_rows.h says what they compute; matmul_rows_arch.h what they provide).
#include "kernels/matmul_rows_arch.h"

#if defined(PSL_MM_X86)
#include "kernels/matmul_rows_f16.h"
#include "kernels/simd.h"

#include "ggml-cpu.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

// two weight rows side by side in a 512-bit register: each half is one row's 8 lanes of vec_dot
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define PSL_MM_AVX512 1
#endif

namespace psl::mm_arch {
namespace {

// PYLLAMASPEC_MATMUL_ROWS=avx2: ours a weight row at a time, as on an AVX2 build (to compare)
[[maybe_unused]] bool pairs_enabled() {
    const char * env = std::getenv("PYLLAMASPEC_MATMUL_ROWS");
    return !env || std::strcmp(env, "avx2") != 0;
}
// ggml's block layouts (ggml-common.h; their sizes are checked against ggml_type_size)
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[32]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
constexpr int64_t QK = 32;
constexpr int64_t QK_K = 256;

float f16(uint16_t h) { return _cvtsh_ss(h); }

// The activation rows as vec_dot reads them: quantized by ggml's own from_float to the weight
// type's vec_dot type, each block's scale (and Q8_1's d * sum) converted to F32 once; stored
// block-major (a block's rows side by side), so that one pointer walks all the rows.
struct Rows {
    int64_t n = 0, k = 0, nb = 0;
    std::vector<int8_t> qs;     // [nb][n][32]
    std::vector<float> d, s;    // [nb][n]
    std::vector<uint8_t> blocks;
    std::vector<float> f;       // F16 weights: [n][k], the rows rounded to F16 (vec_dot_f16's y)
    std::vector<BlockQ8_K> kq;  // K-quant weights: [n][k / 256], ggml's Q8_K blocks as they are
    const BlockQ8_K * k_block(int64_t r, int64_t b) const { return &kq[r * (k / QK_K) + b]; }
};

void quantize(const ggml_tensor * x, ggml_type vdt, Rows & a) {
    const int64_t k = x->ne[0];
    a.n = x->ne[1];
    a.k = k;
    a.nb = k / QK;
    a.blocks.resize(ggml_row_size(vdt, k));
    const ggml_from_float_t from_float = ggml_get_type_traits_cpu(vdt)->from_float;
    if (vdt == GGML_TYPE_F16) {
        a.f.resize(a.n * k);
        for (int64_t r = 0; r < a.n; ++r) {
            from_float((const float *) ((const char *) x->data + r * x->nb[1]), a.blocks.data(), k);
            ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) a.blocks.data(), &a.f[r * k], k);
        }
        return;
    }
    if (vdt == GGML_TYPE_Q8_K) {
        a.kq.resize(a.n * (k / QK_K));
        for (int64_t r = 0; r < a.n; ++r) {
            from_float((const float *) ((const char *) x->data + r * x->nb[1]), &a.kq[r * (k / QK_K)], k);
        }
        return;
    }
    a.qs.resize(a.n * k);
    a.d.resize(a.n * a.nb);
    a.s.resize(a.n * a.nb);
    for (int64_t r = 0; r < a.n; ++r) {
        from_float((const float *) ((const char *) x->data + r * x->nb[1]), a.blocks.data(), k);
        for (int64_t b = 0; b < a.nb; ++b) {
            const int64_t i = b * a.n + r;
            if (vdt == GGML_TYPE_Q8_1) {
                const BlockQ8_1 & blk = ((const BlockQ8_1 *) a.blocks.data())[b];
                a.d[i] = f16(blk.d);
                a.s[i] = f16(blk.s);
                std::memcpy(&a.qs[i * QK], blk.qs, QK);
            } else {
                const BlockQ8_0 & blk = ((const BlockQ8_0 *) a.blocks.data())[b];
                a.d[i] = f16(blk.d);
                std::memcpy(&a.qs[i * QK], blk.qs, QK);
            }
        }
    }
}

// ggml's hsum_float_8 (arch/x86/quants.c), in its order
float hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// u8 x s8 products summed by fours into int32 lanes: maddubs then madd by ones, or VNNI's dpbusd
// (the same integers: no pair reaches int16's limit for these types)
__m256i dot4(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(u, s));
#endif
}

// 32 nibbles as bytes in [0, 15]: low halves first (ggml's bytes_from_nibbles_32)
__m256i nibbles(const uint8_t * qs) {
    const __m128i packed = _mm_loadu_si128((const __m128i *) qs);
    const __m256i both = _mm256_insertf128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1);
    return _mm256_and_si256(_mm256_set1_epi8(0xF), both);
}

// Signed weight types: a block's 32 int8 values (vec_dot's x) and its scale.
struct Q8_0 {
    using Block = BlockQ8_0;
    static __m256i values(const Block & b) { return _mm256_loadu_si256((const __m256i *) b.qs); }
};
struct Q5_0 {   // the fifth bit from qh: (nibble | bit << 4) - 16, as ggml's or of 0xF0 where it is clear
    using Block = BlockQ5_0;
    static __m256i values(const Block & b) {
        uint32_t bits;
        std::memcpy(&bits, b.qh, sizeof bits);
        const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int) bits),
                                                   _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                     0x0101010101010101, 0x0000000000000000));
        const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                                              _mm256_set1_epi64x(-1));
        return _mm256_or_si256(nibbles(b.qs), _mm256_andnot_si256(set, _mm256_set1_epi8((char) 0xF0)));
    }
};

struct Q4_0 {   // nibbles less 8 (ggml's bytes_from_nibbles_32 - 8)
    using Block = BlockQ4_0;
    static __m256i values(const Block & b) { return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8)); }
};

// R activation rows (from r0) times one weight row of a signed type (Q8_0, Q5_0, Q4_0, activations as
// Q8_0): ggml's AVX2 vec_dot loop per row (|x| times y signed by x; acc += (dx * dy) * sum, lane
// by lane; then hsum_float_8)
template <class T, int R>
void signed_rows(const void * wv, const Rows & a, int64_t r0, float * res) {
    const typename T::Block * w = (const typename T::Block *) wv;
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    const int8_t * qa = &a.qs[r0 * QK];
    const float * da = &a.d[r0];
    for (int64_t b = 0; b < a.nb; ++b, qa += a.n * QK, da += a.n) {
        const __m256 dw = _mm256_set1_ps(f16(w[b].d));
        const __m256i qx = T::values(w[b]);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        for (int r = 0; r < R; ++r) {
            const __m256i qy = _mm256_loadu_si256((const __m256i *) (qa + r * QK));
            const __m256 q = _mm256_cvtepi32_ps(dot4(ax, _mm256_sign_epi8(qy, qx)));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(da + r)), q, acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) res[r] = hsum8(acc[r]);
}

// R activation rows times one Q4_1 weight row: ggml_vec_dot_q4_1_q8_1's AVX2 loop per row
// (nibbles as u8 times y; acc += (dx * dy) * sum; summs += mx * sy, fused as ggml's build
// compiles it; then hsum_float_8 + summs)
template <int R>
void q4_1_rows(const void * wv, const Rows & a, int64_t r0, float * res) {
    const BlockQ4_1 * w = (const BlockQ4_1 *) wv;
    __m256 acc[R];
    float summs[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), summs[r] = 0.0f;
    const int8_t * qa = &a.qs[r0 * QK];
    const float * da = &a.d[r0];
    const float * sa = &a.s[r0];
    for (int64_t b = 0; b < a.nb; ++b, qa += a.n * QK, da += a.n, sa += a.n) {
        const __m256 dw = _mm256_set1_ps(f16(w[b].d));
        const float mw = f16(w[b].m);
        const __m256i qx = nibbles(w[b].qs);
        for (int r = 0; r < R; ++r) {
            summs[r] = std::fma(mw, sa[r], summs[r]);
            const __m256i qy = _mm256_loadu_si256((const __m256i *) (qa + r * QK));
            const __m256 xy = _mm256_cvtepi32_ps(dot4(qx, qy));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(da + r)), xy, acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) res[r] = hsum8(acc[r]) + summs[r];
}

// A Q4_K (or Q5_K) weight block as ggml_vec_dot_q4_K_q8_K's (q5_K's) AVX2 loop unpacks it: the
// 6-bit scales and mins (scales: the 8 scales as int16, in both halves); each 64 values' part j
// is unpacked where it is used (values_k4), the j-th 16-bit scales with get_scale_shuffle_k4(j)
// (scale_k4): kept in registers, not stored, so that one row costs what vec_dot's loop does.
struct K4Scales {
    float d, dmin;
    __m128i mins;
    __m256i scales;
};

template <class B>
void decode_scales(const B & w, K4Scales & o) {
    constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    o.d = f16(w.d), o.dmin = f16(w.dmin);
    uint32_t utmp[4];
    std::memcpy(utmp, w.scales, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
    const __m256i mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(utmp[3], utmp[2], utmp[1], utmp[0]));
    o.mins = _mm256_extracti128_si256(mins_and_scales, 1);
    const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
    o.scales = _mm256_inserti128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
}

// scale i (0..7) in every 16-bit lane (ggml's get_scale_shuffle_k4(i))
__m256i scale_k4(__m256i scales, int i) {
    return _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short) (((2 * i + 1) << 8) | (2 * i))));
}

// Part j's 64 values as bytes: lo the low nibbles, hi the high ones; Q5_K's fifth bits from qh
// (bit 2j of each qh byte for lo, 2j + 1 for hi; hbits: qh loaded)
template <class B>
void values_k4(const B & w, int j, __m256i hbits, __m256i & lo, __m256i & hi) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i bits = _mm256_loadu_si256((const __m256i *) (w.qs + 32 * j));
    lo = _mm256_and_si256(bits, m4);
    hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    if constexpr (std::is_same_v<B, BlockQ5_K>) {
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one);
        const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
    }
}

template <class B>
__m256i qh_bits(const B & w) {
    if constexpr (std::is_same_v<B, BlockQ5_K>) return _mm256_loadu_si256((const __m256i *) w.qh);
    return _mm256_setzero_si256();
}

// the integer mins . bsums of a block (ggml's Q5_K loop sums prod's 4 lanes as integers)
int hsum4(__m128i prod) {
    const __m128i h = _mm_hadd_epi32(_mm_hadd_epi32(prod, _mm_setzero_si128()), _mm_setzero_si128());
    return _mm_extract_epi32(h, 0);
}

// Q8_K's 16 bsums summed by pairs (ggml's q8s: one per 32 values, in the mins' order)
__m128i q8_pair_sums(const BlockQ8_K & y) {
    const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y.bsums);
    return _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
}

// acc_m's 4 lanes summed as ggml sums them, added to hsum_float_8(acc)
float q4_K_total(__m256 acc, __m128 acc_m) {
    __m128 m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return hsum8(acc) + _mm_cvtss_f32(m);
}

// R activation rows times one Q4_K (B = BlockQ4_K) or Q5_K weight row: ggml_vec_dot_q4_K_q8_K's
// (q5_K's) AVX2 loop per row. A block's integer sums are exact (their order does not matter), its
// lanes as ggml's: values times q8 scaled by pairs of lanes, acc += d * sum per block, and for
// the mins Q4_K's acc_m += dmin * (mins . bsums) in 4 lanes, Q5_K's summs += dmin * (mins .
// bsums) summed as an integer first (fused, as ggml's build compiles it); then hsum_float_8(acc)
// + acc_m's sum in ggml's order, or + summs.
template <class B, int R>
void k4_rows(const void * wv, const Rows & a, int64_t r0, float * res) {
    constexpr bool q5 = std::is_same_v<B, BlockQ5_K>;
    const B * w = (const B *) wv;
    __m256 acc[R];
    __m128 acc_m[R];
    float summs[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), acc_m[r] = _mm_setzero_ps(), summs[r] = 0.0f;
    K4Scales x;
    for (int64_t b = 0; b < a.k / QK_K; ++b) {
        decode_scales(w[b], x);
        const __m256i hbits = qh_bits(w[b]);
        __m256i sumi[R];
        for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
            __m256i lo, hi;
            values_k4(w[b], j, hbits, lo, hi);
            const __m256i scale_l = scale_k4(x.scales, 2 * j), scale_h = scale_k4(x.scales, 2 * j + 1);
            for (int r = 0; r < R; ++r) {
                const int8_t * q8 = a.k_block(r0 + r, b)->qs + 64 * j;
                const __m256i p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *) q8)));
                const __m256i p16h =
                    _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *) (q8 + 32))));
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p16l, p16h));
            }
        }
        for (int r = 0; r < R; ++r) {
            const BlockQ8_K & y = *a.k_block(r0 + r, b);
            const float dmin = -y.d * x.dmin;
            const __m128i prod = _mm_madd_epi16(x.mins, q8_pair_sums(y));
            if constexpr (q5) {
                summs[r] = std::fma(dmin, (float) hsum4(prod), summs[r]);
            } else {
                acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[r]);
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * x.d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) res[r] = q5 ? hsum8(acc[r]) + summs[r] : q4_K_total(acc[r], acc_m[r]);
}

// A Q6_K weight block as ggml_vec_dot_q6_K_q8_K's AVX2 loop unpacks it, half j (128 values) at a
// time where it is used, in registers: the 6-bit values as u8 and ggml's get_scale_shuffle(i) of
// the scales (scales 2i and 2i + 1, 8 lanes each); all 16 scales as int16 (for 32 * (scales .
// bsums)).
void values_q6(const BlockQ6_K & w, int j, __m256i q[4], __m256i sc[4]) {
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    const __m256i bits1 = _mm256_loadu_si256((const __m256i *) (w.ql + 64 * j));
    const __m256i bits2 = _mm256_loadu_si256((const __m256i *) (w.ql + 64 * j + 32));
    const __m256i bitsH = _mm256_loadu_si256((const __m256i *) (w.qh + 32 * j));
    const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(bitsH, m3), 4);
    const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(bitsH, _mm256_set1_epi8(12)), 2);
    const __m256i h2 = _mm256_and_si256(bitsH, _mm256_set1_epi8(48));
    const __m256i h3 = _mm256_srli_epi16(_mm256_and_si256(bitsH, _mm256_set1_epi8(-64)), 2);
    q[0] = _mm256_or_si256(_mm256_and_si256(bits1, m15), h0);
    q[1] = _mm256_or_si256(_mm256_and_si256(bits2, m15), h1);
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m15), h2);
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m15), h3);
    const __m128i scales = _mm_loadu_si128((const __m128i *) w.scales);
    for (int t = 0; t < 4; ++t) {
        const int i = 4 * j + t;
        const __m128i pick = _mm_set_epi64x(0x0101010101010101LL * (2 * i + 1), 0x0101010101010101LL * (2 * i));
        sc[t] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
    }
}

__m256i scales16_q6(const BlockQ6_K & w) { return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) w.scales)); }

// R activation rows times one Q6_K weight row: ggml_vec_dot_q6_K_q8_K's AVX2 loop per row (6-bit
// values as u8 times q8, scaled by pairs of lanes, less 32 * (scales . bsums); acc += d * sum per
// block; then hsum_float_8).
template <int R>
void q6_K_rows(const void * wv, const Rows & a, int64_t r0, float * res) {
    const BlockQ6_K * w = (const BlockQ6_K *) wv;
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.k / QK_K; ++b) {
        __m256i sumi[R];
        for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
        for (int j = 0; j < 2; ++j) {
            __m256i q[4], sc[4];
            values_q6(w[b], j, q, sc);
            for (int r = 0; r < R; ++r) {
                const int8_t * q8 = a.k_block(r0 + r, b)->qs + 128 * j;
                __m256i p[4];
                for (int t = 0; t < 4; ++t) {
                    const __m256i y = _mm256_loadu_si256((const __m256i *) (q8 + 32 * t));
                    p[t] = _mm256_madd_epi16(sc[t], _mm256_maddubs_epi16(q[t], y));
                }
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p[0], p[1]));
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p[2], p[3]));
            }
        }
        const __m256i scales_16 = scales16_q6(w[b]);
        const float dw = f16(w[b].d);
        for (int r = 0; r < R; ++r) {
            const BlockQ8_K & y = *a.k_block(r0 + r, b);
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y.bsums);
            const __m256i q8sclsub = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales_16), 5);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * dw), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[r], q8sclsub)),
                                     acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) res[r] = hsum8(acc[r]);
}

// R activation rows (from r0) times one F16 weight row (kernels/matmul_rows_f16.cpp)
template <int R>
void f16_rows(const void * w, const Rows & a, int64_t r0, float * res) {
    kern::f16_rows<R>((const ggml_fp16_t *) w, &a.f[r0 * a.k], a.k, res);
}

#if defined(PSL_MM_AVX512)
template <int R>
void f16_pairs(const void * w0, const void * w1, const Rows & a, int64_t r0, float * res0, float * res1) {
    kern::f16_pairs<R>((const ggml_fp16_t *) w0, (const ggml_fp16_t *) w1, &a.f[r0 * a.k], a.k, res0, res1);
}
#endif

#if defined(PSL_MM_AVX512)
// Two weight rows at once (w0's lanes low, w1's high): each half does vec_dot's 8-lane arithmetic
// for its row, so the numbers are the single-row kernels' (and ggml's), with half the
// instructions for the activations' side and the scales.
// (through the 64-bit lanes' insert and extract: AVX512F's, where the 32-bit ones are AVX512DQ's)
__m512 pair(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
__m512i pair(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
__m512 pair_set1(float lo, float hi) { return pair(_mm256_set1_ps(lo), _mm256_set1_ps(hi)); }

// one activation block (32 int8) in both halves
__m512i both_halves(const int8_t * q) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *) q)); }

__m512i dot4(__m512i u, __m512i s) {   // as the 256-bit dot4: the same integers
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
#else
    return _mm512_madd_epi16(_mm512_set1_epi16(1), _mm512_maddubs_epi16(u, s));
#endif
}

// each half's 8 lanes summed as ggml's hsum_float_8
void hsum_pair(__m512 acc, float & lo, float & hi) {
    lo = hsum8(_mm512_castps512_ps256(acc));
    hi = hsum8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

// signed_rows for two weight rows: x's sign moved to y as _mm256_sign_epi8 moves it (y negated
// where x < 0; where x is 0, |x| is 0 and so is the product)
template <class T, int R>
void signed_pairs(const void * wv0, const void * wv1, const Rows & a, int64_t r0, float * res0, float * res1) {
    const typename T::Block * w0 = (const typename T::Block *) wv0;
    const typename T::Block * w1 = (const typename T::Block *) wv1;
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const int8_t * qa = &a.qs[r0 * QK];
    const float * da = &a.d[r0];
    for (int64_t b = 0; b < a.nb; ++b, qa += a.n * QK, da += a.n) {
        const __m512 dw = pair_set1(f16(w0[b].d), f16(w1[b].d));
        const __m512i qx = pair(T::values(w0[b]), T::values(w1[b]));
        const __m512i ax = _mm512_abs_epi8(qx);
        const __mmask64 neg = _mm512_movepi8_mask(qx);
        for (int r = 0; r < R; ++r) {
            const __m512i qy = both_halves(qa + r * QK);
            const __m512i sy = _mm512_mask_sub_epi8(qy, neg, _mm512_setzero_si512(), qy);
            const __m512 q = _mm512_cvtepi32_ps(dot4(ax, sy));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da[r])), q, acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) hsum_pair(acc[r], res0[r], res1[r]);
}

// q4_1_rows for two weight rows; summs a lane per activation row (lane r: fma(m, s_r, summs_r),
// the scalar fma of the single-row kernel)
template <int R>
void q4_1_pairs(const void * wv0, const void * wv1, const Rows & a, int64_t r0, float * res0, float * res1) {
    static_assert(R <= 16, "one summs lane per row");
    const BlockQ4_1 * w0 = (const BlockQ4_1 *) wv0;
    const BlockQ4_1 * w1 = (const BlockQ4_1 *) wv1;
    const __mmask16 lanes = (__mmask16) ((1u << R) - 1);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    __m512 summs0 = _mm512_setzero_ps(), summs1 = _mm512_setzero_ps();
    const int8_t * qa = &a.qs[r0 * QK];
    const float * da = &a.d[r0];
    const float * sa = &a.s[r0];
    for (int64_t b = 0; b < a.nb; ++b, qa += a.n * QK, da += a.n, sa += a.n) {
        const __m512 dw = pair_set1(f16(w0[b].d), f16(w1[b].d));
        const __m512 s = _mm512_maskz_loadu_ps(lanes, sa);
        summs0 = _mm512_fmadd_ps(_mm512_set1_ps(f16(w0[b].m)), s, summs0);
        summs1 = _mm512_fmadd_ps(_mm512_set1_ps(f16(w1[b].m)), s, summs1);
        const __m512i qx = pair(nibbles(w0[b].qs), nibbles(w1[b].qs));
        for (int r = 0; r < R; ++r) {
            const __m512 xy = _mm512_cvtepi32_ps(dot4(qx, both_halves(qa + r * QK)));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da[r])), xy, acc[r]);
        }
    }
    float m0[16], m1[16];
    _mm512_storeu_ps(m0, summs0);
    _mm512_storeu_ps(m1, summs1);
    for (int r = 0; r < R; ++r) {
        hsum_pair(acc[r], res0[r], res1[r]);
        res0[r] += m0[r];
        res1[r] += m1[r];
    }
}

__m256 low(__m512 x) { return _mm512_castps512_ps256(x); }
__m256 high(__m512 x) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)); }

// k4_rows for two weight rows (acc_m: w0's 4 lanes low, w1's high; summs a pair of scalars)
template <class B, int R>
void k4_pairs(const void * wv0, const void * wv1, const Rows & a, int64_t r0, float * res0, float * res1) {
    constexpr bool q5 = std::is_same_v<B, BlockQ5_K>;
    const B * w0 = (const B *) wv0;
    const B * w1 = (const B *) wv1;
    __m512 acc[R];
    __m256 acc_m[R];
    float summs[R][2];
    for (int r = 0; r < R; ++r) {
        acc[r] = _mm512_setzero_ps(), acc_m[r] = _mm256_setzero_ps(), summs[r][0] = summs[r][1] = 0.0f;
    }
    K4Scales x0, x1;
    for (int64_t b = 0; b < a.k / QK_K; ++b) {
        decode_scales(w0[b], x0);
        decode_scales(w1[b], x1);
        const __m256i hbits0 = qh_bits(w0[b]), hbits1 = qh_bits(w1[b]);
        __m512i sumi[R];
        for (int r = 0; r < R; ++r) sumi[r] = _mm512_setzero_si512();
        for (int j = 0; j < 4; ++j) {
            __m256i lo0, hi0, lo1, hi1;
            values_k4(w0[b], j, hbits0, lo0, hi0);
            values_k4(w1[b], j, hbits1, lo1, hi1);
            const __m512i lo = pair(lo0, lo1), hi = pair(hi0, hi1);
            const __m512i scale_l = pair(scale_k4(x0.scales, 2 * j), scale_k4(x1.scales, 2 * j));
            const __m512i scale_h = pair(scale_k4(x0.scales, 2 * j + 1), scale_k4(x1.scales, 2 * j + 1));
            for (int r = 0; r < R; ++r) {
                const int8_t * q8 = a.k_block(r0 + r, b)->qs + 64 * j;
                const __m512i p16l = _mm512_madd_epi16(scale_l, _mm512_maddubs_epi16(lo, both_halves(q8)));
                const __m512i p16h = _mm512_madd_epi16(scale_h, _mm512_maddubs_epi16(hi, both_halves(q8 + 32)));
                sumi[r] = _mm512_add_epi32(sumi[r], _mm512_add_epi32(p16l, p16h));
            }
        }
        const __m256i mins = _mm256_inserti128_si256(_mm256_castsi128_si256(x0.mins), x1.mins, 1);
        for (int r = 0; r < R; ++r) {
            const BlockQ8_K & y = *a.k_block(r0 + r, b);
            const __m512 d = pair_set1(y.d * x0.d, y.d * x1.d);
            const __m256 dmin = _mm256_set_m128(_mm_set1_ps(-y.d * x1.dmin), _mm_set1_ps(-y.d * x0.dmin));
            const __m256i prod = _mm256_madd_epi16(mins, _mm256_broadcastsi128_si256(q8_pair_sums(y)));
            if constexpr (q5) {
                summs[r][0] = std::fma(-y.d * x0.dmin, (float) hsum4(_mm256_castsi256_si128(prod)), summs[r][0]);
                summs[r][1] = std::fma(-y.d * x1.dmin, (float) hsum4(_mm256_extracti128_si256(prod, 1)), summs[r][1]);
            } else {
                acc_m[r] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(prod), acc_m[r]);
            }
            acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) {
        if constexpr (q5) {
            res0[r] = hsum8(low(acc[r])) + summs[r][0];
            res1[r] = hsum8(high(acc[r])) + summs[r][1];
        } else {
            res0[r] = q4_K_total(low(acc[r]), _mm256_castps256_ps128(acc_m[r]));
            res1[r] = q4_K_total(high(acc[r]), _mm256_extractf128_ps(acc_m[r], 1));
        }
    }
}

// q6_K_rows for two weight rows
template <int R>
void q6_K_pairs(const void * wv0, const void * wv1, const Rows & a, int64_t r0, float * res0, float * res1) {
    const BlockQ6_K * w0 = (const BlockQ6_K *) wv0;
    const BlockQ6_K * w1 = (const BlockQ6_K *) wv1;
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < a.k / QK_K; ++b) {
        __m512i sumi[R];
        for (int r = 0; r < R; ++r) sumi[r] = _mm512_setzero_si512();
        for (int j = 0; j < 2; ++j) {
            __m256i q0[4], sc0[4], q1[4], sc1[4];
            values_q6(w0[b], j, q0, sc0);
            values_q6(w1[b], j, q1, sc1);
            __m512i q[4], sc[4];
            for (int t = 0; t < 4; ++t) q[t] = pair(q0[t], q1[t]), sc[t] = pair(sc0[t], sc1[t]);
            for (int r = 0; r < R; ++r) {
                const int8_t * q8 = a.k_block(r0 + r, b)->qs + 128 * j;
                __m512i p[4];
                for (int t = 0; t < 4; ++t) p[t] = _mm512_madd_epi16(sc[t], _mm512_maddubs_epi16(q[t], both_halves(q8 + 32 * t)));
                sumi[r] = _mm512_add_epi32(sumi[r], _mm512_add_epi32(p[0], p[1]));
                sumi[r] = _mm512_add_epi32(sumi[r], _mm512_add_epi32(p[2], p[3]));
            }
        }
        const __m512i scales_16 = pair(scales16_q6(w0[b]), scales16_q6(w1[b]));
        const float d0 = f16(w0[b].d), d1 = f16(w1[b].d);
        for (int r = 0; r < R; ++r) {
            const BlockQ8_K & y = *a.k_block(r0 + r, b);
            const __m512i q8sums = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *) y.bsums));
            const __m512i q8sclsub = _mm512_slli_epi32(_mm512_madd_epi16(q8sums, scales_16), 5);
            acc[r] = _mm512_fmadd_ps(pair_set1(y.d * d0, y.d * d1), _mm512_cvtepi32_ps(_mm512_sub_epi32(sumi[r], q8sclsub)),
                                     acc[r]);
        }
    }
    for (int r = 0; r < R; ++r) hsum_pair(acc[r], res0[r], res1[r]);
}
#endif

constexpr int CHUNK = 8;   // activation rows whose accumulators stay in registers (AVX2 has 16)
constexpr int F16_CHUNK = kern::F16_ROWS_MAX;

using RowsKernel = void (*)(const void * w, const Rows & a, int64_t r0, float * res);

// A kernel for each count of activation rows, 1..C: table[r - 1]. K wraps a kernel template
// (function templates cannot be passed as template arguments).
template <class K, int... R>
constexpr std::array<RowsKernel, sizeof...(R)> kernels_of(std::integer_sequence<int, R...>) {
    return {K::template rows<R + 1>...};
}

template <class K, int C = CHUNK>
RowsKernel for_rows(int r) {
    static constexpr auto table = kernels_of<K>(std::make_integer_sequence<int, C>{});
    return table[r - 1];
}

using PairKernel = void (*)(const void * w0, const void * w1, const Rows & a, int64_t r0, float * res0,
                            float * res1);

#if defined(PSL_MM_AVX512)
#define PSL_MM_PAIRS(f) template <int R> static constexpr PairKernel pairs = f<R>;
#else
#define PSL_MM_PAIRS(f)
#endif
template <class T> struct Signed {
    template <int R> static constexpr RowsKernel rows = signed_rows<T, R>;
#if defined(PSL_MM_AVX512)
    template <int R> static constexpr PairKernel pairs = signed_pairs<T, R>;
#endif
};
struct Q4_1 { template <int R> static constexpr RowsKernel rows = q4_1_rows<R>; PSL_MM_PAIRS(q4_1_pairs) };
template <class B> struct K4 {
    template <int R> static constexpr RowsKernel rows = k4_rows<B, R>;
#if defined(PSL_MM_AVX512)
    template <int R> static constexpr PairKernel pairs = k4_pairs<B, R>;
#endif
};
using Q4_K = K4<BlockQ4_K>;
using Q5_K = K4<BlockQ5_K>;
struct Q6_K { template <int R> static constexpr RowsKernel rows = q6_K_rows<R>; PSL_MM_PAIRS(q6_K_pairs) };
struct F16 { template <int R> static constexpr RowsKernel rows = f16_rows<R>; PSL_MM_PAIRS(f16_pairs) };
#undef PSL_MM_PAIRS

RowsKernel kernel_for(ggml_type t, int r) {
    switch (t) {
        case GGML_TYPE_F16: return for_rows<F16, F16_CHUNK>(r);
        case GGML_TYPE_Q4_K: return for_rows<Q4_K>(r);
        case GGML_TYPE_Q5_K: return for_rows<Q5_K>(r);
        case GGML_TYPE_Q6_K: return for_rows<Q6_K>(r);
        case GGML_TYPE_Q8_0: return for_rows<Signed<Q8_0>>(r);
        case GGML_TYPE_Q5_0: return for_rows<Signed<Q5_0>>(r);
        case GGML_TYPE_Q4_0: return for_rows<Signed<Q4_0>>(r);
        default: return for_rows<Q4_1>(r);
    }
}

#if defined(PSL_MM_AVX512)
template <class K, int... R>
constexpr std::array<PairKernel, sizeof...(R)> pairs_of(std::integer_sequence<int, R...>) {
    return {K::template pairs<R + 1>...};
}

template <class K, int C = CHUNK>
PairKernel for_pairs(int r) {
    static constexpr auto table = pairs_of<K>(std::make_integer_sequence<int, C>{});
    return table[r - 1];
}

// The kernel for two weight rows at once, where there is one (nullptr: a row at a time)
PairKernel pair_kernel_for(ggml_type t, int r) {
    switch (t) {
        case GGML_TYPE_Q8_0: return for_pairs<Signed<Q8_0>>(r);
        case GGML_TYPE_Q5_0: return for_pairs<Signed<Q5_0>>(r);
        case GGML_TYPE_Q4_0: return for_pairs<Signed<Q4_0>>(r);
        case GGML_TYPE_Q4_1: return for_pairs<Q4_1>(r);
        case GGML_TYPE_Q4_K: return for_pairs<Q4_K>(r);
        case GGML_TYPE_Q5_K: return for_pairs<Q5_K>(r);
        case GGML_TYPE_Q6_K: return for_pairs<Q6_K>(r);
        case GGML_TYPE_F16: return for_pairs<F16, kern::F16_PAIR_ROWS_MAX>(r);
        default: return nullptr;
    }
}
#else
PairKernel pair_kernel_for(ggml_type, int) { return nullptr; }
#endif

// Weight row i times every activation row into dst's column i; with gap > 0, row i + gap too,
// through the pair kernel.
void weight_rows(ggml_tensor * dst, const Rows & a, int64_t i, int64_t gap) {
    const ggml_tensor * w = dst->src[0];
    const int chunk = w->type == GGML_TYPE_F16 ? F16_CHUNK : CHUNK;
    const char * wr = (const char *) w->data + i * w->nb[1];
    float res[2][CHUNK];
    for (int64_t r0 = 0; r0 < a.n; r0 += chunk) {
        const int r = (int) std::min<int64_t>(chunk, a.n - r0);
        if (gap > 0) {
            pair_kernel_for(w->type, r)(wr, wr + gap * w->nb[1], a, r0, res[0], res[1]);
        } else {
            kernel_for(w->type, r)(wr, a, r0, res[0]);
        }
        for (int j = 0; j < r; ++j) {
            float * o = (float *) ((char *) dst->data + (r0 + j) * dst->nb[1]);
            o[i] = res[0][j];
            if (gap > 0) o[i + gap] = res[1][j];
        }
    }
}

}  // namespace

// ggml's custom-op callback: every thread quantizes the rows itself (a custom op has no barrier;
// the rows are few) and takes its share of the weight rows, two at a time where a pair kernel
// exists: rows half a share apart, each pair's two streams in pages of their own. Adjacent rows
// (i, i + 1) interleave their loads within the same pages, which the hardware prefetcher does not
// follow: they ran at half the bandwidth of one row (Zen 4, docs/benchmarks.md).
void compute(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * w = dst->src[0];
    thread_local Rows a;
    quantize(dst->src[1], ggml_get_type_traits_cpu(w->type)->vec_dot_type, a);
    const int64_t n_w = w->ne[1];
    const int64_t begin = n_w * ith / nth, end = n_w * (ith + 1) / nth;
    // F16 pairs hold 8 accumulators an activation row: up to 3 rows (kern::F16_PAIR_ROWS_MAX)
    const bool pairs = pair_kernel_for(w->type, 1) != nullptr && pairs_enabled() &&
                       (w->type != GGML_TYPE_F16 || a.n <= kern::F16_PAIR_ROWS_MAX);
    const int64_t half = pairs ? (end - begin) / 2 : 0;
    for (int64_t i = begin; i < begin + half; ++i) weight_rows(dst, a, i, half);
    for (int64_t i = begin + 2 * half; i < end; ++i) weight_rows(dst, a, i, 0);
}

bool takes(ggml_type t) {
    switch (t) {
        case GGML_TYPE_F16: return true;
        case GGML_TYPE_Q4_K: return ggml_type_size(t) == sizeof(BlockQ4_K) &&
                                    ggml_type_size(GGML_TYPE_Q8_K) == sizeof(BlockQ8_K);
        case GGML_TYPE_Q5_K: return ggml_type_size(t) == sizeof(BlockQ5_K) &&
                                    ggml_type_size(GGML_TYPE_Q8_K) == sizeof(BlockQ8_K);
        case GGML_TYPE_Q6_K: return ggml_type_size(t) == sizeof(BlockQ6_K) &&
                                    ggml_type_size(GGML_TYPE_Q8_K) == sizeof(BlockQ8_K);
        case GGML_TYPE_Q8_0: return ggml_type_size(t) == sizeof(BlockQ8_0) && ggml_blck_size(t) == QK;
        case GGML_TYPE_Q5_0: return ggml_type_size(t) == sizeof(BlockQ5_0) && ggml_blck_size(t) == QK &&
                                    ggml_type_size(GGML_TYPE_Q8_0) == sizeof(BlockQ8_0);
        case GGML_TYPE_Q4_0: return ggml_type_size(t) == sizeof(BlockQ4_0) && ggml_blck_size(t) == QK &&
                                    ggml_type_size(GGML_TYPE_Q8_0) == sizeof(BlockQ8_0);
        case GGML_TYPE_Q4_1: return ggml_type_size(t) == sizeof(BlockQ4_1) && ggml_blck_size(t) == QK &&
                                    ggml_type_size(GGML_TYPE_Q8_1) == sizeof(BlockQ8_1);
        default: return false;
    }
}

}  // namespace psl::mm_arch
#endif
