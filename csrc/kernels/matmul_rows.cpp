// A weight matrix times a few activation rows, each weight block decoded once (matmul_rows.h).
#include "kernels/matmul_rows.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define PSL_MM_AVX2 1
#endif

namespace psl {
namespace {

bool enabled() {
    const char * env = std::getenv("PYLLAMASPEC_MATMUL_ROWS");
    return !env || std::strcmp(env, "ggml") != 0;
}

#if defined(PSL_MM_AVX2)

// ggml's block layouts (ggml-common.h; their sizes are checked against ggml_type_size)
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[32]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
constexpr int64_t QK = 32;

float f16(uint16_t h) { return _cvtsh_ss(h); }

// The activation rows as vec_dot reads them: quantized by ggml's own from_float to the weight
// type's vec_dot type, each block's scale (and Q8_1's d * sum) converted to F32 once; stored
// block-major (a block's rows side by side), so that one pointer walks all the rows.
struct Rows {
    int64_t n = 0, nb = 0;
    std::vector<int8_t> qs;     // [nb][n][32]
    std::vector<float> d, s;    // [nb][n]
    std::vector<uint8_t> blocks;
};

void quantize(const ggml_tensor * x, ggml_type vdt, Rows & a) {
    const int64_t k = x->ne[0];
    a.n = x->ne[1];
    a.nb = k / QK;
    a.qs.resize(a.n * k);
    a.d.resize(a.n * a.nb);
    a.s.resize(a.n * a.nb);
    a.blocks.resize(ggml_row_size(vdt, k));
    const ggml_from_float_t from_float = ggml_get_type_traits_cpu(vdt)->from_float;
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

// R activation rows (from r0) times one weight row of a signed type (Q8_0, Q5_0, activations as
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

constexpr int CHUNK = 8;   // activation rows whose accumulators stay in registers (AVX2 has 16)

using RowsKernel = void (*)(const void * w, const Rows & a, int64_t r0, float * res);

// The kernels for 1..CHUNK activation rows
template <class T>
RowsKernel signed_for(int r) {
    static constexpr RowsKernel table[CHUNK] = {signed_rows<T, 1>, signed_rows<T, 2>, signed_rows<T, 3>,
                                                signed_rows<T, 4>, signed_rows<T, 5>, signed_rows<T, 6>,
                                                signed_rows<T, 7>, signed_rows<T, 8>};
    return table[r - 1];
}

RowsKernel q4_1_for(int r) {
    static constexpr RowsKernel table[CHUNK] = {q4_1_rows<1>, q4_1_rows<2>, q4_1_rows<3>, q4_1_rows<4>,
                                                q4_1_rows<5>, q4_1_rows<6>, q4_1_rows<7>, q4_1_rows<8>};
    return table[r - 1];
}

RowsKernel kernel_for(ggml_type t, int r) {
    switch (t) {
        case GGML_TYPE_Q8_0: return signed_for<Q8_0>(r);
        case GGML_TYPE_Q5_0: return signed_for<Q5_0>(r);
        default: return q4_1_for(r);
    }
}

// ggml's custom-op callback: every thread quantizes the rows itself (a custom op has no barrier;
// the rows are few) and takes its share of the weight rows.
void compute(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * x = dst->src[1];
    thread_local Rows a;
    quantize(x, ggml_get_type_traits_cpu(w->type)->vec_dot_type, a);
    const int64_t n_w = w->ne[1];
    float res[CHUNK];
    for (int64_t i = n_w * ith / nth; i < n_w * (ith + 1) / nth; ++i) {
        const void * wr = (const char *) w->data + i * w->nb[1];
        for (int64_t r0 = 0; r0 < a.n; r0 += CHUNK) {
            const int r = (int) std::min<int64_t>(CHUNK, a.n - r0);
            kernel_for(w->type, r)(wr, a, r0, res);
            for (int j = 0; j < r; ++j) ((float *) ((char *) dst->data + (r0 + j) * dst->nb[1]))[i] = res[j];
        }
    }
}

bool type_takes(ggml_type t) {
    switch (t) {
        case GGML_TYPE_Q8_0: return ggml_type_size(t) == sizeof(BlockQ8_0) && ggml_blck_size(t) == QK;
        case GGML_TYPE_Q5_0: return ggml_type_size(t) == sizeof(BlockQ5_0) && ggml_blck_size(t) == QK &&
                                    ggml_type_size(GGML_TYPE_Q8_0) == sizeof(BlockQ8_0);
        case GGML_TYPE_Q4_1: return ggml_type_size(t) == sizeof(BlockQ4_1) && ggml_blck_size(t) == QK &&
                                    ggml_type_size(GGML_TYPE_Q8_1) == sizeof(BlockQ8_1);
        default: return false;
    }
}

#else
bool type_takes(ggml_type) { return false; }
void compute(ggml_tensor *, int, int, void *) {}
#endif

// The CPU's plain buffer (mapped or allocated), not a repacking or AMX one.
bool plain_cpu(const ggml_tensor * w) {
    const ggml_tensor * base = w->view_src ? w->view_src : w;
    if (!base->buffer) return false;
    const std::string name = ggml_backend_buft_name(ggml_backend_buffer_get_type(base->buffer));
    return name.rfind("CPU", 0) == 0 && name.find("REPACK") == std::string::npos &&
           name.find("AMX") == std::string::npos;
}

}  // namespace

bool matmul_rows_takes(ggml_type t) { return type_takes(t) && enabled(); }

bool matmul_rows_fit(const ggml_tensor * w, const ggml_tensor * x) {
    if (!matmul_rows_takes(w->type)) return false;
    if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) || x->ne[0] != w->ne[0]) return false;
    if (w->ne[2] != 1 || w->ne[3] != 1 || x->ne[2] != 1 || x->ne[3] != 1) return false;
    if (x->ne[1] < 2 || x->ne[1] > MATMUL_ROWS_MAX || w->nb[0] != ggml_type_size(w->type)) return false;
    return plain_cpu(w);
}

int matmul_rows_adopt(ggml_context * ctx, ggml_cgraph * gf) {
    ggml_tensor * op = nullptr;   // one scratch node: its op and parameters are every adopted node's
    int n = 0;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        if (node->op != GGML_OP_MUL_MAT || node->type != GGML_TYPE_F32 ||
            !matmul_rows_fit(node->src[0], node->src[1])) {
            continue;
        }
        if (!op) {
            ggml_tensor * args[2] = {node->src[0], node->src[1]};
            op = ggml_custom_4d(ctx, GGML_TYPE_F32, node->ne[0], node->ne[1], 1, 1, args, 2, compute,
                                GGML_N_TASKS_MAX, nullptr);
        }
        node->op = op->op;
        std::memcpy(node->op_params, op->op_params, sizeof(node->op_params));
        ++n;
    }
    return n;
}

}  // namespace psl
