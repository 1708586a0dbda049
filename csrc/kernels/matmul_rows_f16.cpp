// One F16 weight row times a few activation rows, in ggml_vec_dot_f16's sums (matmul_rows_f16.h).
#include "kernels/matmul_rows_f16.h"

namespace psl::kern {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
namespace {

constexpr int N = Vec::N, STEP = 4 * N;

// How far ahead of its loads the kernel prefetches its weights (bytes: the rows after this one,
// a thread's share being contiguous). From two rows its loop takes about as long per weight as
// the bus brings one, and the hardware prefetcher alone left it stalled on the loads (Zen 4,
// one thread, Gemma 3's F16 model, docs/benchmarks.md): 4 KiB ahead was the best of 1-8 KiB.
constexpr int64_t PREFETCH = 4096;

void prefetch(const ggml_fp16_t * w) {
    for (int o = 0; o < STEP * 2; o += 64) _mm_prefetch((const char *) w + PREFETCH + o, _MM_HINT_T0);
}

// The lanes past the last step, in double and in order, and the sum: vec_dot_f16's tail
float finish(double s, const ggml_fp16_t * w, const float * y, int64_t np, int64_t k) {
    for (int64_t d = np; d < k; ++d) s += (double) (ggml_fp16_to_fp32(w[d]) * y[d]);
    return (float) s;
}

// ggml_vec_dot_f16 per row, as kern::dot sums it (four accumulators over steps of four registers,
// joined (0 + 2) + (1 + 3), the lanes in ggml's order, the rest in double): the four accumulators
// of every row together (4R independent sums in flight), each weight register converted once for
// the R rows.
template <int R>
void rows_together(const ggml_fp16_t * w, const float * y, int64_t k, float * res) {
    const int64_t np = k - k % STEP;
    Vec acc[R][4];
    for (int r = 0; r < R; ++r) {
        for (int j = 0; j < 4; ++j) acc[r][j] = Vec::splat(0.0f);
    }
    for (int64_t d = 0; d < np; d += STEP) {
        prefetch(w + d);
        Vec x[4];
        for (int j = 0; j < 4; ++j) x[j] = Vec::load_f16(w + d + j * N);
        for (int r = 0; r < R; ++r) {
            for (int j = 0; j < 4; ++j) acc[r][j] = Vec::fma(x[j], Vec::load(y + r * k + d + j * N), acc[r][j]);
        }
    }
    for (int r = 0; r < R; ++r) {
        const double s = np > 0 ? Vec::add(Vec::add(acc[r][0], acc[r][2]), Vec::add(acc[r][1], acc[r][3])).sum() : 0.0;
        res[r] = finish(s, w, y + r * k, np, k);
    }
}

#if defined(PSL_F16_AVX512)
// rows_together for two weight rows (w0, w1: half a thread's share apart, two prefetch streams):
// each activation register loaded once for both, each row's four accumulators per weight row in
// rows_together's order, so both results are the one-row kernel's numbers. 8R accumulators and
// the two weight registers of a step's j-th part fit AVX-512's 32 registers up to R = 3.
template <int R>
void pairs_together(const ggml_fp16_t * w0, const ggml_fp16_t * w1, const float * y, int64_t k, float * res0,
                    float * res1) {
    const int64_t np = k - k % STEP;
    Vec acc0[R][4], acc1[R][4];
    for (int r = 0; r < R; ++r) {
        for (int j = 0; j < 4; ++j) acc0[r][j] = acc1[r][j] = Vec::splat(0.0f);
    }
    for (int64_t d = 0; d < np; d += STEP) {
        prefetch(w0 + d);
        prefetch(w1 + d);
        for (int j = 0; j < 4; ++j) {
            const Vec x0 = Vec::load_f16(w0 + d + j * N), x1 = Vec::load_f16(w1 + d + j * N);
            for (int r = 0; r < R; ++r) {
                const Vec yr = Vec::load(y + r * k + d + j * N);
                acc0[r][j] = Vec::fma(x0, yr, acc0[r][j]);
                acc1[r][j] = Vec::fma(x1, yr, acc1[r][j]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        const auto total = [&](Vec (&a)[4]) {
            return np > 0 ? (double) Vec::add(Vec::add(a[0], a[2]), Vec::add(a[1], a[3])).sum() : 0.0;
        };
        res0[r] = finish(total(acc0[r]), w0, y + r * k, np, k);
        res1[r] = finish(total(acc1[r]), w1, y + r * k, np, k);
    }
}
#endif

}  // namespace

template <int R>
void f16_rows(const ggml_fp16_t * w, const float * y, int64_t k, float * res) {
    static_assert(R >= 1 && R <= F16_ROWS_MAX, "rows per call");
    rows_together<R>(w, y, k, res);
}

#if defined(PSL_F16_AVX512)
template <int R>
void f16_pairs(const ggml_fp16_t * w0, const ggml_fp16_t * w1, const float * y, int64_t k, float * res0,
               float * res1) {
    static_assert(R >= 1 && R <= F16_PAIR_ROWS_MAX, "rows per call");
    pairs_together<R>(w0, w1, y, k, res0, res1);
}
template void f16_pairs<1>(const ggml_fp16_t *, const ggml_fp16_t *, const float *, int64_t, float *, float *);
template void f16_pairs<2>(const ggml_fp16_t *, const ggml_fp16_t *, const float *, int64_t, float *, float *);
template void f16_pairs<3>(const ggml_fp16_t *, const ggml_fp16_t *, const float *, int64_t, float *, float *);
#endif

#define PSL_F16_ROWS(R) template void f16_rows<R>(const ggml_fp16_t *, const float *, int64_t, float *);
PSL_F16_ROWS(1)
PSL_F16_ROWS(2)
#if defined(PSL_F16_AVX512)
PSL_F16_ROWS(3)
PSL_F16_ROWS(4)
#endif
#undef PSL_F16_ROWS
#endif

}  // namespace psl::kern
