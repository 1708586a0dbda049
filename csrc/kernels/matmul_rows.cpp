// A weight matrix times a few activation rows, each weight block decoded once (matmul_rows.h):
// what ggml hands to ours, and the node. The kernels are per architecture (matmul_rows_arch.h).
#include "kernels/matmul_rows.h"
#include "kernels/matmul_rows_arch.h"

#include "ggml-backend.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace psl {

#if !defined(PSL_MM_ARCH)
namespace mm_arch {   // no kernels on this build: ggml's products stay
bool takes(ggml_type) { return false; }
void compute(ggml_tensor *, int, int, void *) {}
}  // namespace mm_arch
#endif

namespace {

bool enabled() {
    const char * env = std::getenv("PYLLAMASPEC_MATMUL_ROWS");
    return !env || std::strcmp(env, "ggml") != 0;
}

// The CPU's plain buffer (mapped or allocated), not a repacking or AMX one.
bool plain_cpu(const ggml_tensor * w) {
    const ggml_tensor * base = w->view_src ? w->view_src : w;
    if (!base->buffer) return false;
    const std::string name = ggml_backend_buft_name(ggml_backend_buffer_get_type(base->buffer));
    return name.rfind("CPU", 0) == 0 && name.find("REPACK") == std::string::npos &&
           name.find("AMX") == std::string::npos;
}

}  // namespace

bool matmul_rows_takes(ggml_type t) { return mm_arch::takes(t) && enabled(); }

bool matmul_rows_twins(ggml_type t) {
#if defined(PSL_MM_NEON)
    // ggml's repacked NEON gemv / gemm (dotprod, i8mm) against ours is unmeasured on ARM hardware
    // (the kernels are checked under qemu only): a repacked weight stays ggml's, with no plain copy
    (void) t;
    return false;
#else
    return matmul_rows_takes(t) && t != GGML_TYPE_Q4_0;
#endif
}

bool matmul_rows_on_amx() {
    const char * env = std::getenv("PYLLAMASPEC_MATMUL_ROWS_AMX");
    return env && std::strcmp(env, "1") == 0;
}

int64_t matmul_rows_max(ggml_type t) {
    if (!matmul_rows_takes(t)) return 0;
    if (t == GGML_TYPE_F16) return 4;
    return t == GGML_TYPE_Q5_K ? 8 : MATMUL_ROWS_MAX;
}

bool matmul_rows_fit(const ggml_tensor * w, const ggml_tensor * x) {
    if (!matmul_rows_takes(w->type)) return false;
    if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) || x->ne[0] != w->ne[0]) return false;
    if (w->ne[2] != 1 || w->ne[3] != 1 || x->ne[2] != 1 || x->ne[3] != 1) return false;
    return w->nb[0] == ggml_type_size(w->type) && x->ne[1] <= matmul_rows_max(w->type) &&
           plain_cpu(w);
}

int matmul_rows_adopt(ggml_context * ctx, ggml_cgraph * gf,
                      const std::unordered_map<const ggml_tensor *, ggml_tensor *> & plain) {
    ggml_tensor * op = nullptr;   // one scratch node: its op and parameters are every adopted node's
    int n = 0;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        if (node->op != GGML_OP_MUL_MAT || node->type != GGML_TYPE_F32) continue;
        // a repacked weight is read through its plain twin (ggml's repacked gemv and gemm sum
        // otherwise than vec_dot), so every row count gives the same numbers
        const auto twin = plain.find(node->src[0]);
        ggml_tensor * w = twin != plain.end() ? twin->second : node->src[0];
        if (!matmul_rows_fit(w, node->src[1])) continue;
        node->src[0] = w;
        if (!op) {
            ggml_tensor * args[2] = {node->src[0], node->src[1]};
            op = ggml_custom_4d(ctx, GGML_TYPE_F32, node->ne[0], node->ne[1], 1, 1, args, 2, mm_arch::compute,
                                GGML_N_TASKS_MAX, nullptr);
        }
        node->op = op->op;
        std::memcpy(node->op_params, op->op_params, sizeof(node->op_params));
        ++n;
    }
    return n;
}

}  // namespace psl
