// matmul_rows' kernels for aarch64 with dotprod (Apple M1's level and up): the activations as
// ggml's NEON vec_dot reads them, the NEON kernels (matmul_rows_neon.cpp) for Q8_0, Q4_1, Q4_K and
// Q6_K, and the node's per-thread loop (matmul_rows.h says what they compute; matmul_rows_arch.h
// what they provide).
#include "kernels/matmul_rows_arch.h"

#if defined(PSL_MM_NEON)
#include "kernels/matmul_rows_neon.h"

#include "ggml-cpu.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace psl::mm_arch {
namespace {

// The NEON kernels take 1..8 rows a weight row (their accumulators in registers: aarch64 has 32)
constexpr int CHUNK = 8;

// The activation rows exactly as ggml's from_float writes them for the weight type's vec_dot
// type (Q8_0, Q8_1 or Q8_K blocks), a row after another: the kernels read ggml's own blocks, so
// each row's numbers are vec_dot's.
struct Rows {
    int64_t n = 0, k = 0;
    size_t row_bytes = 0;
    std::vector<uint8_t> blocks;   // [n][row_bytes]
    const void * row(int64_t r) const { return blocks.data() + r * row_bytes; }
};

void quantize(const ggml_tensor * x, ggml_type vdt, Rows & a) {
    a.n = x->ne[1];
    a.k = x->ne[0];
    a.row_bytes = ggml_row_size(vdt, a.k);
    a.blocks.resize(a.n * a.row_bytes);
    const ggml_from_float_t from_float = ggml_get_type_traits_cpu(vdt)->from_float;
    for (int64_t r = 0; r < a.n; ++r) {
        from_float((const float *) ((const char *) x->data + r * x->nb[1]), a.blocks.data() + r * a.row_bytes, a.k);
    }
}

using RowsKernel = void (*)(const void * w_row, const void * const * y, int64_t k, float * res);

// A kernel for each count of activation rows, 1..CHUNK: table[r - 1]. K wraps a kernel template
// (function templates cannot be passed as template arguments).
template <class K, int... R>
constexpr std::array<RowsKernel, sizeof...(R)> kernels_of(std::integer_sequence<int, R...>) {
    return {K::template rows<R + 1>...};
}

template <class K>
RowsKernel for_rows(int r) {
    static constexpr auto table = kernels_of<K>(std::make_integer_sequence<int, CHUNK>{});
    return table[r - 1];
}

struct Q8_0 { template <int R> static constexpr RowsKernel rows = neon::q8_0_rows<R>; };
struct Q4_1 { template <int R> static constexpr RowsKernel rows = neon::q4_1_rows<R>; };
struct Q4_K { template <int R> static constexpr RowsKernel rows = neon::q4_K_rows<R>; };
struct Q6_K { template <int R> static constexpr RowsKernel rows = neon::q6_K_rows<R>; };

RowsKernel kernel_for(ggml_type t, int r) {
    switch (t) {
        case GGML_TYPE_Q8_0: return for_rows<Q8_0>(r);
        case GGML_TYPE_Q4_K: return for_rows<Q4_K>(r);
        case GGML_TYPE_Q6_K: return for_rows<Q6_K>(r);
        default: return for_rows<Q4_1>(r);
    }
}

// Weight row i times every activation row into dst's column i, the rows CHUNK at a time (the
// weight row stays in cache between chunks)
void weight_row(ggml_tensor * dst, const Rows & a, int64_t i) {
    const ggml_tensor * w = dst->src[0];
    const char * wr = (const char *) w->data + i * w->nb[1];
    const void * y[CHUNK];
    float res[CHUNK];
    for (int64_t r0 = 0; r0 < a.n; r0 += CHUNK) {
        const int r = (int) std::min<int64_t>(CHUNK, a.n - r0);
        for (int j = 0; j < r; ++j) y[j] = a.row(r0 + j);
        kernel_for(w->type, r)(wr, y, a.k, res);
        for (int j = 0; j < r; ++j) ((float *) ((char *) dst->data + (r0 + j) * dst->nb[1]))[i] = res[j];
    }
}

// Whether weights of type t are in the layout the kernels mirror, with activations of type vdt
bool layout(ggml_type t, size_t size, int64_t block, ggml_type vdt, size_t vdt_size) {
    return ggml_type_size(t) == size && ggml_blck_size(t) == block && ggml_type_size(vdt) == vdt_size &&
           ggml_get_type_traits_cpu(t)->vec_dot_type == vdt;
}

}  // namespace

// ggml's custom-op callback: every thread quantizes the rows itself (a custom op has no barrier;
// the rows are few) and takes its contiguous share of the weight rows.
void compute(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * w = dst->src[0];
    thread_local Rows a;
    quantize(dst->src[1], ggml_get_type_traits_cpu(w->type)->vec_dot_type, a);
    const int64_t n_w = w->ne[1];
    const int64_t begin = n_w * ith / nth, end = n_w * (ith + 1) / nth;
    for (int64_t i = begin; i < end; ++i) weight_row(dst, a, i);
}

// ggml's block sizes (ggml-common.h), which matmul_rows_neon.cpp's structs mirror
bool takes(ggml_type t) {
    switch (t) {
        case GGML_TYPE_Q8_0: return layout(t, 34, 32, GGML_TYPE_Q8_0, 34);
        case GGML_TYPE_Q4_1: return layout(t, 20, 32, GGML_TYPE_Q8_1, 36);
        case GGML_TYPE_Q4_K: return layout(t, 144, 256, GGML_TYPE_Q8_K, 292);
        case GGML_TYPE_Q6_K: return layout(t, 210, 256, GGML_TYPE_Q8_K, 292);
        default: return false;
    }
}

}  // namespace psl::mm_arch
#endif
