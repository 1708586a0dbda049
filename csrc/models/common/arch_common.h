// What an architecture file needs: the graph pieces and the tensor loader.
#pragma once

#include "error.h"
#include "models/common/graph_common.h"

#include <cmath>

namespace psl {

// token_embd, output_norm and the output head; the head is token_embd itself (tied) when the
// file has no output.weight.
void create_embeddings(TensorLoader & tl, psl_model & m);
// q, k, v, output projections and the attention pre-norm of layer il (+ q/k/v biases,
// + per-head q/k norms).
void create_attention(TensorLoader & tl, psl_model & m, int il, bool bias, bool qk_norm);
// The FFN pre-norm and the gated FFN (gate, up, down).
void create_ffn(TensorLoader & tl, psl_model & m, int il);

// The llama layer (pre-norm attention + pre-norm SwiGLU FFN), shared by llama, qwen2, qwen3:
// tensors (optional q/k/v biases, optional per-head q/k norms) and graph (rope mode varies).
void create_llama_like(TensorLoader & tl, psl_model & m, bool bias, bool qk_norm);
ggml_tensor * build_llama_like(Graph & g, int rope_mode);

// YaRN with a log multiplier (rope.scaling.yarn_log_multiplier): the attention factor as
// llama.cpp's context sets it up (deepseek: DeepSeek V2's mscale rule).
void set_yarn_log_mul(const GgufFile & f, const std::string & a, HParams & hp, float log_mul, bool deepseek);
// Llama-4 style attention temperature (attention.temperature_scale / temperature_length).
void load_attn_temperature(const GgufFile & f, const std::string & a, HParams & hp, int32_t floor_dflt);
// The vocabulary size from {arch}.vocab_size or the token list (0 when neither is there).
int64_t vocab_size(const GgufFile & f, const std::string & a);

// Mixture of experts: n_expert / n_expert_used / n_ff_exp (+ the shared expert's width) and the
// routing-weight options from the file, checked.
void load_moe_hparams(const GgufFile & f, const std::string & arch, HParams & hp);
// The router and the stacked expert matrices of layer il (+ their biases).
void create_moe(TensorLoader & tl, psl_model & m, int il, bool bias);
// The shared expert of layer il (width n_ff), with its sigmoid gate vector when gated.
void create_shared_expert(TensorLoader & tl, psl_model & m, int il, int64_t n_ff, bool gated);

// Draft heads (head_common.cpp): {arch}.target_layers; the d2t table (draft row -> target id,
// checked) and the rows of the head's output (its length, else n_vocab); the embeddings and
// output head, the head's own else its target's; the head's feature input [width, n_tokens] and
// its token embeddings.
void load_head_layers(const GgufFile & f, const std::string & arch, HParams & hp);
void load_d2t(psl_model & m);
int64_t head_vocab(const psl_model & m);
ggml_tensor * head_tok_embd(const Graph & g);
ggml_tensor * head_output(const Graph & g);
ggml_tensor * head_input(Graph & g, int64_t width);
ggml_tensor * head_tokens(Graph & g);

}  // namespace psl
