// Our code, force-included into ggml's AMX kernels (ggml-cpu/amx/mmq.cpp) when GCC compiles them
// (vendor/ggml/ggml.cmake; ggml itself is only fetched at build time). GCC's <amxtileintrin.h>
// (seen in GCC 12) gives ldtilecfg's memory operand as one pointer, 8 bytes, of the 64-byte tile
// configuration: at -O3 the stores of the rows and column widths that ggml writes into its local
// configuration are then dead to the compiler and dropped, ldtilecfg loads a palette with no tile
// configured, and the first tile instruction faults (SIGILL in the first batched product of
// Q4_0/Q4_1/Q8_0/K-quant weights on a CPU with AMX: Sapphire Rapids and later). This
// _tile_loadconfig names all 64 bytes.
#pragma once

#if defined(__AMX_TILE__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>   // its _tile_loadconfig first: the macro below then replaces later uses

typedef struct { unsigned char bytes[64]; } psl_amx_tilecfg_bytes;

static inline __attribute__((always_inline)) void psl_amx_tile_loadconfig(const void * config) {
    __asm__ volatile("ldtilecfg\t%0" : : "m"(*(const psl_amx_tilecfg_bytes *) config));
}

#define _tile_loadconfig(config) psl_amx_tile_loadconfig(config)
#endif
