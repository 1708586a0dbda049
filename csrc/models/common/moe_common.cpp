// What the mixture-of-experts architectures share when loading: expert counts and widths, the
// router and the stacked expert tensors.
#include "models/common/arch_common.h"

namespace psl {

void load_moe_hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const std::string p = a + ".";
    hp.n_expert = (int32_t) f.get_int(p + "expert_count");
    hp.n_expert_used = (int32_t) f.get_int(p + "expert_used_count");
    // llama.cpp's fallback when the file gives no expert width
    hp.n_ff_exp = (int32_t) f.get_int(p + "expert_feed_forward_length",
                                      hp.n_expert_used > 0 ? hp.n_ff / hp.n_expert_used : 0);
    hp.n_ff_shexp = (int32_t) f.get_int(p + "expert_shared_feed_forward_length", hp.n_ff);
    hp.expert_weights_scale = (float) f.get_float(p + "expert_weights_scale", 0.0);
    hp.n_expert_shared = (int32_t) f.get_int(p + "expert_shared_count", 0);
    hp.n_layer_dense_lead = (int32_t) f.get_int(p + "leading_dense_block_count", 0);
    // group-limited routing applies to every architecture that gives groups (as in llama.cpp)
    hp.n_expert_groups = (int32_t) f.get_int(p + "expert_group_count", 0);
    hp.n_group_used = (int32_t) f.get_int(p + "expert_group_used_count", 0);
    // ggml's mul_mat_id and the top-k selection take at most this many (llama.cpp's limit)
    constexpr int32_t k_max_experts = 512;
    if (hp.n_expert <= 0 || hp.n_expert > k_max_experts || hp.n_expert_used <= 0 ||
        hp.n_expert_used > hp.n_expert || hp.n_ff_exp <= 0 || hp.n_ff_exp > (1 << 20) || hp.n_ff_shexp < 0 ||
        !std::isfinite(hp.expert_weights_scale) || hp.n_expert_shared < 0 || hp.n_expert_shared > 64 ||
        hp.n_layer_dense_lead < 0 || hp.n_layer_dense_lead > hp.n_layer) {
        fail(PSL_ERR_FORMAT, "'%s': mixture-of-experts hyper-parameters out of range (%d experts, %d used, width %d)",
             f.path().c_str(), hp.n_expert, hp.n_expert_used, hp.n_ff_exp);
    }
    if (hp.n_expert_groups > 1) {
        const int32_t per = hp.n_expert / hp.n_expert_groups;
        // each kept group offers `per` experts, and its score needs two of them
        if (hp.n_expert_groups >= hp.n_expert || hp.n_expert % hp.n_expert_groups != 0 || per < 2 ||
            hp.n_group_used <= 0 || hp.n_group_used >= hp.n_expert_groups || hp.n_group_used * per < hp.n_expert_used) {
            fail(PSL_ERR_FORMAT, "'%s': expert groups out of range (%d experts in %d groups, %d groups used, %d experts used)",
                 f.path().c_str(), hp.n_expert, hp.n_expert_groups, hp.n_group_used, hp.n_expert_used);
        }
    }
}

void create_moe(TensorLoader & tl, psl_model & m, int il, bool bias) {
    const int64_t n_embd = m.hp.n_embd, n_ff = m.hp.n_ff_exp, n_exp = m.hp.n_expert;
    Layer & l = m.layers[il];
    // The stacked experts are matrices too: on the CPU they are repacked where mul_mat_id can
    // read them so (as llama.cpp does).
    l.ffn_gate_inp = tl.layer_matrix(il, "ffn_gate_inp.weight", {n_embd, n_exp});
    // gate and up stacked in one matrix (gate rows first) where a converter fused them
    l.ffn_gate_up_exps = tl.layer_matrix(il, "ffn_gate_up_exps.weight", {n_embd, 2 * n_ff, n_exp}, false);
    if (!l.ffn_gate_up_exps) {
        l.ffn_gate_exps = tl.layer_matrix(il, "ffn_gate_exps.weight", {n_embd, n_ff, n_exp});
        l.ffn_up_exps = tl.layer_matrix(il, "ffn_up_exps.weight", {n_embd, n_ff, n_exp});
    }
    l.ffn_down_exps = tl.layer_matrix(il, "ffn_down_exps.weight", {n_ff, n_embd, n_exp});
    if (bias) {
        l.ffn_gate_inp_b = tl.layer(il, "ffn_gate_inp.bias", {n_exp});
        l.ffn_gate_exps_b = tl.layer(il, "ffn_gate_exps.bias", {n_ff, n_exp});
        l.ffn_up_exps_b = tl.layer(il, "ffn_up_exps.bias", {n_ff, n_exp});
        l.ffn_down_exps_b = tl.layer(il, "ffn_down_exps.bias", {n_embd, n_exp});
    }
}

}  // namespace psl

namespace psl {

void create_shared_expert(TensorLoader & tl, psl_model & m, int il, int64_t n_ff, bool gated) {
    const int64_t n_embd = m.hp.n_embd;
    Layer & l = m.layers[il];
    if (gated) l.ffn_gate_inp_shexp = tl.layer(il, "ffn_gate_inp_shexp.weight", {n_embd});
    l.ffn_gate_shexp = tl.layer_matrix(il, "ffn_gate_shexp.weight", {n_embd, n_ff});
    l.ffn_up_shexp = tl.layer_matrix(il, "ffn_up_shexp.weight", {n_embd, n_ff});
    l.ffn_down_shexp = tl.layer_matrix(il, "ffn_down_shexp.weight", {n_ff, n_embd});
}

}  // namespace psl
