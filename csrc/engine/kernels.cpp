// The kernel record of a loaded model (kernels.h).
#include "engine/kernels.h"

#include "kernels/attention_rows.h"
#include "kernels/matmul_rows.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>

namespace psl {
namespace {

// Whether llamafile's sgemm takes batched products of weights of type t on this build: the
// types its dispatch (ggml 0.26.0, ggml-cpu/llamafile/sgemm.cpp) implements for the instruction
// sets this ggml was compiled with. Used for batches of 2+ rows (NEON: 4+ for f32, 8+ for f16).
bool sgemm_takes(ggml_type t) {
    if (!ggml_cpu_has_llamafile()) return false;
    const bool x86 = ggml_cpu_has_avx() || ggml_cpu_has_avx2() || ggml_cpu_has_avx512();
    switch (t) {
        case GGML_TYPE_F32: return x86 || ggml_cpu_has_neon();
        case GGML_TYPE_F16: return ggml_cpu_has_avx512() || (ggml_cpu_has_avx() && ggml_cpu_has_f16c()) ||
                                   ggml_cpu_has_neon();
        case GGML_TYPE_BF16: return ggml_cpu_has_avx512_bf16() || ggml_cpu_has_avx512() || ggml_cpu_has_avx2();
        case GGML_TYPE_Q8_0:
        case GGML_TYPE_Q4_0: return x86 || ggml_cpu_has_dotprod();
        case GGML_TYPE_Q5_0:
        case GGML_TYPE_IQ4_NL: return x86;
        default: return false;
    }
}

// Whether ggml's tiled K-quant products take batches of 8 rows and more of weights of type t
// (ggml 0.26.0, ggml-cpu/tiled/tiled.cpp: x86 builds, weights not repacked, GGML_CPU_TILED_MM
// not 0). They sum otherwise than vec_dot: logits change from 8 rows on.
bool tiled_takes(ggml_type t) {
    if (!(ggml_cpu_has_avx() || ggml_cpu_has_avx2() || ggml_cpu_has_avx512_vnni())) return false;
    const char * env = getenv("GGML_CPU_TILED_MM");
    if (env && atoi(env) == 0) return false;
    switch (t) {
        case GGML_TYPE_Q6_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q2_K:
        case GGML_TYPE_IQ4_XS: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S:
        case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: return true;
        default: return false;
    }
}

std::string vec_dot(ggml_type t) {
    const ggml_type_traits_cpu * tr = ggml_get_type_traits_cpu(t);
    const ggml_type act = tr ? tr->vec_dot_type : t;
    return std::string("vec_dot ") + ggml_type_name(t) + " x " + ggml_type_name(act);
}

// deterministic (ggml's use_ref): vec_dot for every row at every batch size, except where the
// type's vec_dot takes two rows at once (ARM's int8 matrix multiply: even batches)
std::string reference_path(ggml_type t) {
    const bool two_rows = ggml_get_type_traits_cpu(t)->nrows > 1;
    return vec_dot(t) + " at every batch size" +
           (two_rows ? " (2-row mmla on even batches: not batch-invariant)" : " (batch-invariant)");
}

// ours on a plain copy of a weight that `other` (ggml's repacked gemm, AMX tiles) multiplies
// above matmul_rows_max rows
std::string twin_path(ggml_type t, const std::string & other) {
    const int64_t most = matmul_rows_max(t);
    return "1-" + std::to_string(most) + " rows: ours (kernels/matmul_rows, on a plain copy: vec_dot's numbers); " +
           std::to_string(most + 1) + "+ rows: " + other;
}

std::string path(ggml_type t, const std::string & buft, bool experts, bool deterministic, bool cpu_only,
                 bool twins) {
    if (buft.find("REPACK") != std::string::npos) {
        const std::string act = ggml_type_name(ggml_get_type_traits_cpu(t)->vec_dot_type);
        if (twins) {   // TensorLoader::plain_twins: ours on a plain copy for 1-16 rows
            return twin_path(t, "repacked (ggml's gemm, activations as " + act + ")");
        }
        return "repacked (ggml's gemv/gemm, activations as " + act + ")";
    }
    if (buft.find("AMX") != std::string::npos) {
        if (twins) {   // PYLLAMASPEC_MATMUL_ROWS_AMX=1 (TensorLoader::plain_twins)
            return twin_path(t, "AMX tiles");
        }
        return "AMX tiles";
    }
    if (buft != "CPU" && buft.rfind("CPU", 0) != 0) return "the " + buft + " backend's kernels";
    // ours gives vec_dot's numbers row by row (kernels/matmul_rows.h), deterministic or not
    const int64_t most = matmul_rows_max(t);
    const std::string ours = !experts && cpu_only && most > 0
                                 ? "1-" + std::to_string(most) + " rows: ours (kernels/matmul_rows: each "
                                   "weight block decoded once for all the rows; vec_dot's numbers); "
                                 : "";
    if (deterministic) return ours + reference_path(t);
    if (experts) return vec_dot(t) + " (mul_mat_id: no llamafile)";
    const std::string batched = sgemm_takes(t) ? "llamafile sgemm" : vec_dot(t);
    if (!ours.empty()) return ours + std::to_string(most + 1) + "+ rows: " + (tiled_takes(t) ? "tiled" : batched);
    if (tiled_takes(t)) return "1 token: " + vec_dot(t) + "; 2-7 rows: " + batched + "; 8+ rows: tiled";
    return "1 token: " + vec_dot(t) + "; batched: " + batched;
}

}  // namespace

std::string describe_kernels(const psl_model & m) {
    // (type, buffer, experts) -> tensors; the matrices only (a vector is no product's weight)
    std::map<std::tuple<std::string, std::string, bool>, int> groups;
    std::map<std::tuple<std::string, std::string, bool>, ggml_type> types;
    for (ggml_context * ctx : m.ctxs) {
        for (ggml_tensor * t = ggml_get_first_tensor(ctx); t; t = ggml_get_next_tensor(ctx, t)) {
            if (ggml_n_dims(t) < 2 || !t->buffer) continue;
            const std::string buft = ggml_backend_buft_name(ggml_backend_buffer_get_type(t->buffer));
            const auto key = std::make_tuple(std::string(ggml_type_name(t->type)), buft, ggml_n_dims(t) == 3);
            ++groups[key];
            types[key] = t->type;
        }
    }
    std::string out;
    for (const auto & [key, n] : groups) {
        const auto & [type, buft, experts] = key;
        out += type + " x" + std::to_string(n) + (experts ? " experts " : " ") + buft + ": " +
               path(types[key], buft, experts, m.deterministic, m.cpu_only(),
                    std::any_of(m.plain_twins.begin(), m.plain_twins.end(),
                                [&](const auto & tw) { return tw.first->type == types[key]; })) + "\n";
    }
    if (m.deterministic) out += "attention: flash attention one query row at a time, over every cell in order\n";
    if (m.cpu_only()) {
        out += attention_rows_on(m.hp.n_embd_head_v)
                   ? "attention, below 64 query rows (F16 cache): ours (kernels/attention_rows: each K/V row read "
                     "once for all the rows; ggml's row-path numbers)\n"
                   : "attention, below 64 query rows: ggml's flash attention, a row at a time (native F16 "
                     "arithmetic for these heads, or PYLLAMASPEC_ATTN_ROWS=ggml)\n";
    }
    return out;
}

}  // namespace psl
