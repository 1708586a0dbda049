// ggml's F32 vector arithmetic as this build's registers do it (one register type per
// instruction set: AVX-512, AVX2 with F16C and FMA, NEON, or scalar code), shared by our kernels
// so that their sums are ggml's own. Included by kernels/*.cpp only: they are compiled with the
// instruction sets of ggml's CPU variant (CMakeLists.txt).
#pragma once

#include "ggml.h"

#include <cstdint>

#if defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define PSL_F16_X86 1
#if defined(__AVX512F__)
#define PSL_F16_AVX512 1
#endif
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#define PSL_F16_NEON 1
#endif

namespace psl::kern {

inline float to_f16(float x) { return ggml_fp16_to_fp32(ggml_fp32_to_fp16(x)); }

// One SIMD register of F32 lanes, and the rounding to F16 that ggml's F16 accumulator takes at
// every step (round to nearest even, as its F16C / NEON conversions).
#if defined(PSL_F16_AVX512)
struct Vec {
    static constexpr int N = 16;
    __m512 r;
    static Vec load(const float * p) { return {_mm512_loadu_ps(p)}; }
    static Vec load_f16(const ggml_fp16_t * p) { return {_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) p))}; }
    void store(float * p) const { _mm512_storeu_ps(p, r); }
    static Vec splat(float x) { return {_mm512_set1_ps(x)}; }
    static Vec fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.r, b.r, c.r)}; }
    static Vec mul(Vec a, Vec b) { return {_mm512_mul_ps(a.r, b.r)}; }
    static Vec add(Vec a, Vec b) { return {_mm512_add_ps(a.r, b.r)}; }
    float sum() const { return _mm512_reduce_add_ps(r); }
    Vec f16() const { return {_mm512_cvtph_ps(_mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT))}; }
};
#elif defined(PSL_F16_X86)
struct Vec {
    static constexpr int N = 8;
    __m256 r;
    static Vec load(const float * p) { return {_mm256_loadu_ps(p)}; }
    static Vec load_f16(const ggml_fp16_t * p) { return {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p))}; }
    void store(float * p) const { _mm256_storeu_ps(p, r); }
    static Vec splat(float x) { return {_mm256_set1_ps(x)}; }
    static Vec fma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.r, b.r, c.r)}; }
    static Vec mul(Vec a, Vec b) { return {_mm256_mul_ps(a.r, b.r)}; }
    static Vec add(Vec a, Vec b) { return {_mm256_add_ps(a.r, b.r)}; }
    float sum() const {   // in the order of ggml's GGML_F32x8_REDUCE
        const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
        const __m128 t1 = _mm_hadd_ps(t0, t0);
        return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    }
    Vec f16() const { return {_mm256_cvtph_ps(_mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT))}; }
};
#elif defined(PSL_F16_NEON)
struct Vec {
    static constexpr int N = 4;
    float32x4_t r;
    static Vec load(const float * p) { return {vld1q_f32(p)}; }
    void store(float * p) const { vst1q_f32(p, r); }
    static Vec splat(float x) { return {vdupq_n_f32(x)}; }
    static Vec fma(Vec a, Vec b, Vec c) { return {vfmaq_f32(c.r, a.r, b.r)}; }
    static Vec mul(Vec a, Vec b) { return {vmulq_f32(a.r, b.r)}; }
    static Vec add(Vec a, Vec b) { return {vaddq_f32(a.r, b.r)}; }
    float sum() const { return vaddvq_f32(r); }
    Vec f16() const { return {vcvt_f32_f16(vcvt_f16_f32(r))}; }
};
#else
struct Vec {
    static constexpr int N = 1;
    float r;
    static Vec load(const float * p) { return {*p}; }
    void store(float * p) const { *p = r; }
    static Vec splat(float x) { return {x}; }
    static Vec fma(Vec a, Vec b, Vec c) { return {a.r * b.r + c.r}; }   // as ggml's scalar code: fused where the compiler fuses
    static Vec mul(Vec a, Vec b) { return {a.r * b.r}; }
    static Vec add(Vec a, Vec b) { return {a.r + b.r}; }
    float sum() const { return r; }
    Vec f16() const { return {to_f16(r)}; }
};
#endif

// q.k over a head (F16 values in F32: the products are exact, only the order of the sum matters),
// summed as ggml_vec_dot_f16 sums it with this build's registers: four accumulators over steps
// of four registers, joined (0 + 2) + (1 + 3), the lanes summed in its order, the rest added in
// double, in order (all of it below one step, and without SIMD). So it is ggml's own number on
// x86 (AVX2, AVX-512) and without SIMD. On ARM, whose ggml accumulates in F16 where the CPU
// has F16 arithmetic, it is an F32 sum: a rounding of the F16 accumulator then flips now and
// then (2^-11 of a value), as llama.cpp's builds for two instruction sets differ.
inline float dot(const float * q, const float * k, int64_t dk) {
    constexpr int N = Vec::N, STEP = 4 * N;
    const int64_t np = N > 1 ? dk - dk % STEP : 0;
    double s = 0.0;
    if (np > 0) {
        Vec a[4] = {Vec::splat(0.0f), Vec::splat(0.0f), Vec::splat(0.0f), Vec::splat(0.0f)};
        for (int64_t d = 0; d < np; d += STEP) {
            for (int j = 0; j < 4; ++j) a[j] = Vec::fma(Vec::load(q + d + j * N), Vec::load(k + d + j * N), a[j]);
        }
        s = Vec::add(Vec::add(a[0], a[2]), Vec::add(a[1], a[3])).sum();
    }
    for (int64_t d = np; d < dk; ++d) s += (double) (q[d] * k[d]);
    return (float) s;
}

}  // namespace psl::kern
