/* The whole core on aarch64 (scripts/neon_e2e.sh runs it under qemu), through the public header
 * only: a tiny model's rows evaluated in one batch of n (1..16) after a context, by ours
 * (matmul_rows' NEON kernels) and by ggml's (PYLLAMASPEC_MATMUL_ROWS=ggml, read when a model is
 * loaded and when a graph is built). Checks, per n:
 *   batch invariance: ours' batched rows equal ours' rows a token at a time, bit for bit;
 *   a deterministic model (ggml's vec_dot at every batch size): ours' rows equal ggml's, bit for bit
 *   (without i8mm: see pairs_rows);
 *   and prints the max abs difference between ours' and ggml's batched rows (ggml's batched
 *   kernels sum otherwise than its one-token ones, so these only come close; its own batched rows
 *   against its rows a token at a time show how far);
 * and checks that the kernel record names ours (and, switched off, does not).
 *   neon_e2e MODEL.gguf      exit status 0 when every check passed */
#define _POSIX_C_SOURCE 200809L   /* setenv, unsetenv */
#include "pyllamaspec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_CONTEXT = 24, N_THREADS = 3, MAX_ROWS = 16 };
static const int ROWS[] = {1, 2, 7, 8, 9, 13, 16};   /* one chunk of 8, a chunk and a remainder */

static int n_vocab;

static void kernel(int ours) {
    if (ours) unsetenv("PYLLAMASPEC_MATMUL_ROWS");
    else setenv("PYLLAMASPEC_MATMUL_ROWS", "ggml", 1);
}

static psl_model * load(const char * path, int deterministic) {
    psl_model_params p = psl_model_default_params();
    p.deterministic = deterministic;
    /* on ARM ours takes plain weights only (matmul_rows_twins: a weight ggml repacked stays its):
       plain, every product is ours */
    p.use_repack = false;
    psl_model * m = NULL;
    if (psl_model_load(path, &p, &m) != PSL_OK) {
        fprintf(stderr, "load %s: %s\n", path, psl_last_error());
        exit(2);
    }
    return m;
}

/* The logits of rows[0..n) after the context: in one eval, or a token an eval */
static void logits(psl_model * m, const int32_t * context, const int32_t * rows, int n, int one_at_a_time,
                   float * out) {
    psl_context_params cp = psl_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = N_THREADS;
    psl_context * ctx = NULL;
    if (psl_context_new(m, &cp, &ctx) != PSL_OK ||
        psl_context_eval(ctx, context, N_CONTEXT, PSL_LOGITS_NONE, NULL, 0) != PSL_OK) {
        fprintf(stderr, "context: %s\n", psl_last_error());
        exit(2);
    }
    for (int i = 0; i < n; i += one_at_a_time ? 1 : n) {
        const int k = one_at_a_time ? 1 : n;
        if (psl_context_eval(ctx, rows + i, k, PSL_LOGITS_ALL, out + (int64_t) i * n_vocab,
                             (int64_t) k * n_vocab) != PSL_OK) {
            fprintf(stderr, "eval: %s\n", psl_last_error());
            exit(2);
        }
    }
    psl_context_free(ctx);
}

static double max_abs_diff(const float * a, const float * b, int64_t n) {
    double d = 0;
    for (int64_t i = 0; i < n; ++i) d = fmax(d, fabs((double) a[i] - (double) b[i]));
    return d;
}

/* The products' kernels as the model's record names them (psl_model_kernels); returns how many
 * of its weight kinds (type and buffer) ours multiplies */
static int print_kernels(psl_model * m, const char * who) {
    const char * rec = psl_model_kernels(m);
    int ours = 0;
    for (const char * s = rec; (s = strstr(s, "ours (kernels/matmul_rows")) != NULL; ++s) ++ours;
    printf("kernel record (%s): %d weight kinds by ours\n%s", who, ours, rec);
    return ours;
}

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
        return 2;
    }
    const char * path = argv[1];
    printf("== %s\n%s\n", path, psl_system_info());
    /* with i8mm ggml's vec_dot takes two rows at once (nrc == 2, smmla) where the activation rows
     * are even (ggml-cpu.c's num_rows_per_vec_dot), summing otherwise than one row: its
     * deterministic rows then move with the batch (ours do not), so ours must equal them at odd
     * row counts only */
    const int pairs_rows = strstr(psl_system_info(), "MATMUL_INT8 = 1") != NULL;
    int32_t context[N_CONTEXT], rows[MAX_ROWS];
    unsigned seed = 12345;
    kernel(1);
    psl_model * ours = load(path, 0), * ours_det = load(path, 1);
    psl_model_info info;
    psl_model_get_info(ours, &info);
    n_vocab = info.n_vocab;
    for (int i = 0; i < N_CONTEXT; ++i) context[i] = (int32_t) ((seed = seed * 1103515245u + 12345u) >> 16) % n_vocab;
    for (int i = 0; i < MAX_ROWS; ++i) rows[i] = (int32_t) ((seed = seed * 1103515245u + 12345u) >> 16) % n_vocab;
    /* without ours in the graphs (a build without the kernels) every check would pass */
    int failures = print_kernels(ours, "ours") == 0;
    kernel(0);
    psl_model * ggml = load(path, 0), * ggml_det = load(path, 1);
    failures += print_kernels(ggml, "PYLLAMASPEC_MATMUL_ROWS=ggml") != 0;
    const int64_t cap = (int64_t) MAX_ROWS * n_vocab;
    float * b = malloc(cap * sizeof(float)), * one = malloc(cap * sizeof(float));
    float * g = malloc(cap * sizeof(float)), * gone = malloc(cap * sizeof(float));
    float * bd = malloc(cap * sizeof(float)), * gd = malloc(cap * sizeof(float));
    for (size_t t = 0; t < sizeof ROWS / sizeof ROWS[0]; ++t) {
        const int n = ROWS[t];
        const int64_t len = (int64_t) n * n_vocab;
        kernel(1);
        logits(ours, context, rows, n, 0, b);
        logits(ours, context, rows, n, 1, one);
        logits(ours_det, context, rows, n, 0, bd);
        kernel(0);
        logits(ggml, context, rows, n, 0, g);
        logits(ggml, context, rows, n, 1, gone);
        logits(ggml_det, context, rows, n, 0, gd);
        const int invariant = memcmp(b, one, len * sizeof(float)) == 0;
        const int det_equal = memcmp(bd, gd, len * sizeof(float)) == 0;
        const int det_required = !pairs_rows || n % 2 == 1;
        failures += !invariant + (!det_equal && det_required);
        printf("n=%2d  batched == one at a time: %s (max diff %.3g)  deterministic ours == ggml: %s (max diff %.3g)"
               "  ours vs ggml batched: max abs diff %.3g (ggml's own batched vs one at a time: %.3g)\n",
               n, invariant ? "bit-equal" : "DIFFER", max_abs_diff(b, one, len),
               det_equal ? "bit-equal" : det_required ? "DIFFER" : "differ (i8mm pairs)", max_abs_diff(bd, gd, len),
               max_abs_diff(b, g, len), max_abs_diff(g, gone, len));
        printf("      logits row 0: %.6f %.6f %.6f %.6f  row %d: %.6f %.6f %.6f %.6f\n", b[0], b[1], b[2], b[3],
               n - 1, b[len - n_vocab], b[len - n_vocab + 1], b[len - n_vocab + 2], b[len - n_vocab + 3]);
    }
    printf("%s: %d failures\n", path, failures);
    free(b), free(one), free(g), free(gone), free(bd), free(gd);
    psl_model_free(ours), psl_model_free(ours_det), psl_model_free(ggml), psl_model_free(ggml_det);
    return failures ? 1 : 0;
}
