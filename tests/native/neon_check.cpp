// Exactness check of the NEON matmul_rows kernels (csrc/kernels/matmul_rows_neon.cpp) against
// ggml's one-row vec_dot on the same aarch64 build: for each type, several row lengths and R = 1..8
// rows, every row's result must equal ggml's bit for bit. A negative control (one weight quant
// changed) must change the result, so a check that compares nothing cannot pass. Built and run
// under qemu by scripts/neon_check.sh; exits nonzero on any mismatch.
#include "matmul_rows_neon.h"

#include "ggml.h"
#include "ggml-cpu.h"

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#if !defined(PSL_ROWS_NEON)
#error "needs aarch64 with NEON and dotprod"
#endif

namespace {

using Kernel = void (*)(const void *, const void * const *, int64_t, float *);


struct Case { ggml_type type; const char * name; Kernel fns[8]; };

template <int R> void q8_0(const void * w, const void * const * y, int64_t k, float * s) {
    psl::neon::q8_0_rows<R>(w, y, k, s);
}
template <int R> void q4_1(const void * w, const void * const * y, int64_t k, float * s) {
    psl::neon::q4_1_rows<R>(w, y, k, s);
}

template <int R> void q4_K(const void * w, const void * const * y, int64_t k, float * s) {
    psl::neon::q4_K_rows<R>(w, y, k, s);
}

template <int R> void q6_K(const void * w, const void * const * y, int64_t k, float * s) {
    psl::neon::q6_K_rows<R>(w, y, k, s);
}

const Case CASES[] = {
    {GGML_TYPE_Q8_0, "q8_0", {q8_0<1>, q8_0<2>, q8_0<3>, q8_0<4>, q8_0<5>, q8_0<6>, q8_0<7>, q8_0<8>}},
    {GGML_TYPE_Q4_1, "q4_1", {q4_1<1>, q4_1<2>, q4_1<3>, q4_1<4>, q4_1<5>, q4_1<6>, q4_1<7>, q4_1<8>}},
    {GGML_TYPE_Q4_K, "q4_K", {q4_K<1>, q4_K<2>, q4_K<3>, q4_K<4>, q4_K<5>, q4_K<6>, q4_K<7>, q4_K<8>}},
    {GGML_TYPE_Q6_K, "q6_K", {q6_K<1>, q6_K<2>, q6_K<3>, q6_K<4>, q6_K<5>, q6_K<6>, q6_K<7>, q6_K<8>}},
};

std::mt19937 rng(47);

std::vector<float> randoms(int64_t n, float scale) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto & x : v) x = d(rng);
    return v;
}

struct Operands {
    std::vector<uint8_t> w;                  // one weight row, quantized
    std::vector<std::vector<uint8_t>> y;     // 8 activation rows in the vec_dot type
};

Operands make(ggml_type t, int64_t k) {
    const auto * cpu = ggml_get_type_traits_cpu(t);
    Operands o;
    const auto wf = randoms(k, 0.05f);
    o.w.resize(ggml_row_size(t, k));
    ggml_quantize_chunk(t, wf.data(), o.w.data(), 0, 1, k, nullptr);
    const auto * yt = ggml_get_type_traits_cpu(cpu->vec_dot_type);
    for (int r = 0; r < 8; ++r) {
        // rows of different magnitudes, as a verification's tokens have
        const auto yf = randoms(k, 0.5f + 2.0f * r);
        o.y.emplace_back(ggml_row_size(cpu->vec_dot_type, k));
        yt->from_float(yf.data(), o.y.back().data(), k);
    }
    return o;
}

float ggml_dot(ggml_type t, const Operands & o, int r, int64_t k) {
    float s = 0;
    ggml_get_type_traits_cpu(t)->vec_dot((int) k, &s, 0, o.w.data(), 0, o.y[r].data(), 0, 1);
    return s;
}

// Runs every R for one type and length; returns the number of mismatching rows.
int check(const Case & c, int64_t k) {
    Operands o = make(c.type, k);
    const void * yp[8];
    for (int r = 0; r < 8; ++r) yp[r] = o.y[r].data();
    float want[8];
    for (int r = 0; r < 8; ++r) want[r] = ggml_dot(c.type, o, r, k);
    int bad = 0;
    for (int R = 1; R <= 8; ++R) {
        float got[8];
        c.fns[R - 1](o.w.data(), yp, k, got);
        for (int r = 0; r < R; ++r) {
            if (std::memcmp(&got[r], &want[r], sizeof(float)) != 0) {
                if (bad < 5) std::printf("MISMATCH %s k=%lld R=%d row %d: %.9g vs ggml %.9g\n",
                                         c.name, (long long) k, R, r, got[r], want[r]);
                ++bad;
            }
        }
    }
    // negative control: a changed weight quant (in the last block, past any header) must show
    o.w[o.w.size() - 1] ^= 0x11;
    float got[8];
    c.fns[7](o.w.data(), yp, k, got);
    int same = 0;
    for (int r = 0; r < 8; ++r) same += std::memcmp(&got[r], &want[r], sizeof(float)) == 0;
    if (same == 8) {
        std::printf("CONTROL FAILED %s k=%lld: a changed weight left every result equal\n", c.name,
                    (long long) k);
        ++bad;
    }
    return bad;
}

}  // namespace

int main() {
    ggml_cpu_init();
    const int64_t ks[] = {32, 64, 96, 256, 288, 512, 768, 2048, 4096 + 32};
    int bad = 0, runs = 0;
    for (const Case & c : CASES) {
        for (int64_t k : ks) {
            if (k % ggml_blck_size(c.type) != 0) continue;
            for (int rep = 0; rep < 3; ++rep) { bad += check(c, k); ++runs; }
        }
    }
    std::printf("neon_check: %d cases (x R=1..8), %d mismatches\n", runs, bad);
    return bad == 0 ? 0 : 1;
}
