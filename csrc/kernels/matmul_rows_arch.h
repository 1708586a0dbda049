// What each architecture's matmul_rows kernels provide to the node (matmul_rows.cpp): one file a
// CPU architecture (matmul_rows_x86.cpp, matmul_rows_arm.cpp), the build's instruction set
// choosing which one compiles (the others compile to nothing).
// Every file of the node is built with the same kernel flags (CMakeLists.txt), so they agree.
#pragma once

#include "ggml.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define PSL_MM_X86 1
#define PSL_MM_ARCH 1
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define PSL_MM_NEON 1
#define PSL_MM_ARCH 1
#endif

namespace psl::mm_arch {

// Whether this build has a kernel for weights of type t (its block layout checked against ggml's).
bool takes(ggml_type t);

// ggml's custom-op callback for a matmul_rows node: dst = src[0] (the weight) x src[1] (F32
// activation rows); thread ith of nth takes its share of the weight rows.
void compute(ggml_tensor * dst, int ith, int nth, void *);

}  // namespace psl::mm_arch
