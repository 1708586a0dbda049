/*
 * pyllamaspec.h: the whole public C API of the pyllamaspec core.
 *
 * Opaque handles, explicit status codes and a per-thread last-error message; no C++ type or
 * exception crosses this boundary. Every function that can fail returns psl_status; on failure
 * psl_last_error() says why. Pointers handed out (logits, metadata strings) stay valid until
 * the call named in their comment.
 *
 * The Python layer (cffi, ABI mode) reads the declarations between the markers
 * "cffi-begin" and "cffi-end" verbatim, so that part stays plain C without macros.
 */
#ifndef PYLLAMASPEC_H
#define PYLLAMASPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  define PSL_API __declspec(dllexport)
#else
#  define PSL_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* cffi-begin */
typedef enum psl_status {
    PSL_OK                   = 0,
    PSL_ERR_INVALID_ARGUMENT = 1,   /* a parameter is out of its domain                      */
    PSL_ERR_IO               = 2,   /* a file could not be opened or read                    */
    PSL_ERR_FORMAT           = 3,   /* the file is not a valid GGUF model                    */
    PSL_ERR_UNSUPPORTED      = 4,   /* valid, but not something we run (architecture, ...)   */
    PSL_ERR_OUT_OF_RANGE     = 5,   /* a token id or index outside its range                 */
    PSL_ERR_CONTEXT_FULL     = 6,   /* evaluation would pass n_ctx                           */
    PSL_ERR_BACKEND          = 7,   /* the compute backend failed                            */
    PSL_ERR_OUT_OF_MEMORY    = 8,
    PSL_ERR_BUFFER_TOO_SMALL = 9,   /* the caller's buffer is too small; the size is returned */
    PSL_ERR_INTERRUPTED      = 10,  /* psl_context_interrupt() stopped the evaluation        */
    PSL_ERR_NO_VOCAB         = 11,  /* the model file carries no tokenizer                   */
    PSL_ERR_INTERNAL         = 12
} psl_status;

typedef struct psl_model   psl_model;
typedef struct psl_context psl_context;
typedef struct psl_detok   psl_detok;

/* ---- library ---- */
/* Last error of this thread, "" if none. Valid until the next failing call on this thread. */
PSL_API const char * psl_last_error(void);
/* Compiled backends and CPU features, e.g. "CPU: AVX2 F16C FMA ... | CUDA: 1 device". */
PSL_API const char * psl_system_info(void);
/* Route ggml's log to stderr (true) or keep it quiet (false, the default). */
PSL_API void         psl_set_verbose(bool verbose);

/* ---- model ---- */
typedef struct psl_model_params {
    int32_t n_gpu_layers;   /* layers offloaded to the GPU backend, like llama.cpp's -ngl; -1 = all */
    int32_t n_threads;      /* threads for loading-time work (0 = default)                          */
    bool    use_mmap;       /* map the file instead of reading it (CPU weights)                     */
    bool    use_repack;     /* CPU weights in ggml's repacked layouts where it has faster kernels   *
                             * for them (a copy instead of the mapping), like llama.cpp's default  */
    bool    load_vocab;     /* build the tokenizer; false for a draft model, whose target tokenizes *
                             * (tokenizer calls then fail with PSL_ERR_NO_VOCAB)                    */
    bool    prefetch;       /* fault mapped weights in at load; false: on first use, so weights    *
                             * never used (a draft's full head) never take memory                  */
    const char *  rpc_servers;    /* "host:port,host:port": ggml RPC servers the layers spread over *
                                   * with the local devices (NULL or "" = none); see psl_rpc_*     */
    const float * tensor_split;   /* with rpc_servers: the share of the layers of each device, the  *
                                   * servers' ones first, then the local ones, the CPU last (NULL = *
                                   * by free memory)                                               */
    int32_t       n_tensor_split; /* entries in tensor_split                                         */
    bool    deterministic;  /* batch-invariant numerics: a row's logits do not depend on how many  *
                             * rows or sequences share its evaluation (weights in the file's       *
                             * layout, ggml's reference vec_dot and flash-attention paths at every *
                             * batch size); CPU only (PSL_ERR_UNSUPPORTED with GPU or RPC layers)  */
} psl_model_params;

PSL_API psl_model_params psl_model_default_params(void);
/* path: a GGUF file, or the first shard of a split model (llama.cpp's gguf-split,
 * "<prefix>-00001-of-0000N.gguf"), whose other shards are opened from beside it. A set whose shards
 * do not fit together fails with PSL_ERR_FORMAT (PSL_ERR_IO for one that cannot be opened) naming
 * the shard; a non-first shard fails with PSL_ERR_INVALID_ARGUMENT naming the first. */
PSL_API psl_status psl_model_load(const char * path, const psl_model_params * params, psl_model ** out);
/* Frees the model once no context uses it any more. NULL is ignored. */
PSL_API void       psl_model_free(psl_model * model);

typedef struct psl_model_info {
    char     arch[32];        /* general.architecture                          */
    char     name[128];       /* general.name, "" if absent                    */
    int32_t  n_vocab;
    int32_t  n_ctx_train;
    int32_t  n_layer;
    int32_t  n_embd;
    int32_t  n_head;
    int32_t  n_head_kv;
    int32_t  n_embd_head_k;
    int32_t  n_embd_head_v;
    int32_t  n_ff;
    int32_t  n_rot;
    float    rope_freq_base;
    float    rope_freq_scale;
    float    norm_eps;
    int32_t  file_type;       /* general.file_type (llama_ftype), -1 if absent */
    uint64_t size_bytes;      /* bytes of all tensors                          */
    uint64_t n_params;        /* elements of all tensors                       */
    int32_t  n_gpu_layers;    /* layers actually offloaded                     */
    bool     tied_output;     /* output head shares token_embd                 */
    int32_t  n_embd_inp;      /* the width of rows psl_context_seq_eval_rows takes: n_embd, or
                                 n_embd * (1 + n_deepstack_layers) (qwen3vl, qwen3vlmoe)      */
} psl_model_info;

PSL_API psl_status psl_model_get_info(const psl_model * model, psl_model_info * out);
/* The device of layer il (-1: the output head); NULL out of range. */
PSL_API const char * psl_model_layer_device(const psl_model * model, int32_t il);
/* Which ggml kernels multiply the model's weights, one line per weight type and buffer, e.g.
 * "q4_K x168 CPU_REPACK: repacked (...)" or "q4_1 x210 CPU: 1 token: vec_dot q4_1 x q8_1; batched:
 * ...": traces a fidelity difference between machines to a path. Valid until the next call on
 * this thread; "" for a NULL model or a stub. */
PSL_API const char * psl_model_kernels(const psl_model * model);

/* ---- ggml RPC backend (llama.cpp's rpc-server protocol) ---- */
/* A stand-in for a model loaded in another process (the Python layer's RPC worker): the
 * tokenizer and metadata of path, n_vocab as that model has it (its output rows), no weights.
 * It tokenizes and passes psl_vocab_compatible; psl_context_new refuses it. */
PSL_API psl_status psl_model_load_stub(const char * path, int32_t n_vocab, psl_model ** out);
/* Whether this build has ggml's RPC backend. */
PSL_API bool       psl_rpc_available(void);
/* ggml's RPC protocol version this build speaks (major, minor, patch). */
PSL_API void       psl_rpc_version(int32_t * major, int32_t * minor, int32_t * patch);
/* Serves this machine's devices to RPC clients at endpoint "host:port", as llama.cpp's rpc-server
 * does: one client at a time, no authentication. devices: a comma-separated list of ggml device
 * names (NULL: the accelerators, else the CPU); cache_dir: where large tensors are cached by
 * hash (NULL: no cache). Returns only on failure (bad arguments, the port is taken). */
PSL_API psl_status psl_rpc_serve(const char * endpoint, const char * cache_dir, int32_t n_threads,
                                 const char * devices);

/* GGUF metadata, by index 0..psl_model_meta_count()-1. Types are GGUF's gguf_type values
 * (0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array, 10 u64, 11 i64,
 * 12 f64). Strings are not NUL-terminated in general: use the length. Pointers live as long
 * as the model. */
PSL_API int64_t    psl_model_meta_count(const psl_model * model);
PSL_API int64_t    psl_model_meta_find(const psl_model * model, const char * key);   /* -1 if absent */
PSL_API psl_status psl_model_meta_key(const psl_model * model, int64_t i, const char ** key);
PSL_API psl_status psl_model_meta_type(const psl_model * model, int64_t i, int32_t * type,
                                       int32_t * array_type, uint64_t * array_len);
PSL_API psl_status psl_model_meta_get_int(const psl_model * model, int64_t i, int64_t * out);    /* ints, bool */
PSL_API psl_status psl_model_meta_get_float(const psl_model * model, int64_t i, double * out);   /* f32, f64 */
PSL_API psl_status psl_model_meta_get_str(const psl_model * model, int64_t i, const char ** out, size_t * len);
/* Numeric arrays: pointer to the packed elements of array_type. */
PSL_API psl_status psl_model_meta_get_array(const psl_model * model, int64_t i, const void ** data);
PSL_API psl_status psl_model_meta_get_array_str(const psl_model * model, int64_t i, uint64_t j,
                                                const char ** out, size_t * len);

/* ---- context: a KV cache and the buffers to evaluate tokens ---- */
/* type_k / type_v: ggml_type values; the default is f16 (llama.cpp's). PSL_KV_AUTO: the core
 * chooses (f32 where the cache is in CPU memory and an f32 cache takes at most
 * PSL_KV_AUTO_F32_MAX_MIB MiB, else f16): faster CPU attention, answers that may part from
 * llama.cpp's */
enum psl_kv_auto { PSL_KV_AUTO = -1, PSL_KV_AUTO_F32_MAX_MIB = 512 };
typedef struct psl_context_params {
    int32_t n_ctx;        /* KV cache length in tokens (0 = n_ctx_train, capped at 4096)     */
    int32_t n_batch;      /* most tokens per graph; longer evaluations are split (0 = 512)   */
    int32_t n_threads;    /* CPU threads (0 = default)                                        */
    int32_t type_k;       /* ggml_type of the K cache: 1 = f16, 0 = f32, 8 = q8_0, ...,       *
                           * or PSL_KV_AUTO (the default; with the other type given: that    *
                           * one; psl_context_get_params gives the type chosen)              */
    int32_t type_v;       /* ggml_type of the V cache (the same choices)                       */
    int32_t n_seq_max;    /* sequences the context holds at once, ids 0 .. n_seq_max - 1, all  *
                           * sharing the n_ctx cells (0 = default: PSL_SEQ_MAX, as a sequence  *
                           * costs nothing until it holds tokens; 1 for a hybrid model, whose  *
                           * recurrent state takes a snapshot ring per sequence)               */
} psl_context_params;

enum psl_limits { PSL_SEQ_MAX = 256 };   /* the most sequences a context holds */

enum psl_logits_mode {
    PSL_LOGITS_NONE = 0,  /* no logits (prefill whose output is not needed) */
    PSL_LOGITS_LAST = 1,  /* one row: the last token                       */
    PSL_LOGITS_ALL  = 2   /* one row per evaluated token                   */
};

PSL_API psl_context_params psl_context_default_params(void);
PSL_API psl_status psl_context_new(psl_model * model, const psl_context_params * params, psl_context ** out);
PSL_API void       psl_context_free(psl_context * ctx);
PSL_API psl_status psl_context_get_params(const psl_context * ctx, psl_context_params * out);
PSL_API psl_status psl_context_set_threads(psl_context * ctx, int32_t n_threads);
/* The most CPU threads a context takes: 4x the hardware threads, at most ggml's 512. */
PSL_API int32_t    psl_max_threads(void);

/* Evaluates tokens[0..n) at positions [n_past, n_past + n), causally over the cache, and
 * appends them to it; batches longer than n_batch are split. The logits of the requested rows
 * (psl_logits_mode) are written row-major, rows x n_vocab float32, to `out` (out_cap = its size
 * in floats; too small gives PSL_ERR_BUFFER_TOO_SMALL before any work; NULL is allowed only when
 * no rows are requested, else PSL_ERR_INVALID_ARGUMENT). On failure the cache is as it was
 * before the call. */
PSL_API psl_status psl_context_eval(psl_context * ctx, const int32_t * tokens, int32_t n, int32_t logits_mode,
                                    float * out, int64_t out_cap);
/* Evaluates tokens as psl_context_eval does (appended to the cache, n_batch splitting, the same
 * failures) and writes each one's final hidden state, the output norm's row before the head (what
 * llama.cpp's embeddings are made of, before pooling): n x n_embd floats, row-major, to out
 * (out_cap floats; too small gives PSL_ERR_BUFFER_TOO_SMALL before any work). */
PSL_API psl_status psl_context_embed(psl_context * ctx, const int32_t * tokens, int32_t n, float * out,
                                     int64_t out_cap);
/* ---- sequences: one context, several token sequences (llama.cpp's seq_id) ----
 * A context's cells are shared by its sequences (psl_context_params.n_seq_max of them); every
 * call above that names none is sequence 0's. A sequence holds positions 0 .. n_past - 1. */
typedef struct psl_batch {
    int32_t         n_tokens;
    const int32_t * tokens;     /* [n_tokens] token ids                                           */
    const int32_t * pos;        /* [n_tokens] positions, or NULL: each token at its (first)       *
                                 * sequence's next position                                       */
    const int32_t * n_seq_id;   /* [n_tokens] how many sequences each token belongs to (1 ..      *
                                 * n_seq_max), or NULL: one each                                  */
    const int32_t * seq_id;     /* the sequence ids of token 0, then of token 1, ... (flat), or   *
                                 * NULL: all in sequence 0                                        */
    const int8_t  * logits;     /* [n_tokens] nonzero: a logits row for this token, or NULL: all  */
} psl_batch;

/* Evaluates a batch that may mix the tokens of several sequences, in one graph where n_batch
 * allows (a hybrid model: one graph per sequence), and appends each token to its sequences.
 * A token of several sequences (a shared prefix, a node of a token tree on several branches) is
 * stored once in all of them and attends as its first sequence: to that sequence's tokens at
 * positions <= its own (llama.cpp's convention). Each sequence's tokens, in batch order, must
 * continue it: positions n_past, n_past + 1, ... (else PSL_ERR_INVALID_ARGUMENT); a hybrid model
 * takes one sequence per token (else PSL_ERR_UNSUPPORTED). The rows of the flagged tokens are
 * written in batch order, rows x n_vocab, to out (out_cap floats; NULL only when no token is
 * flagged). PSL_ERR_CONTEXT_FULL when a sequence would pass n_ctx or the cells are all taken. On
 * failure every sequence is as it was before the call. */
PSL_API psl_status psl_context_decode(psl_context * ctx, const psl_batch * batch, float * out, int64_t out_cap);
/* Tokens in sequence seq (0 for an id out of range). */
PSL_API int32_t    psl_context_seq_n_past(const psl_context * ctx, int32_t seq);
/* Keeps the first n_keep tokens of sequence seq (the others keep theirs): psl_context_truncate
 * for one sequence, O(1) likewise (a hybrid: within psl_context_max_rollback). */
PSL_API psl_status psl_context_seq_truncate(psl_context * ctx, int32_t seq, int32_t n_keep);
/* Sequence dst becomes the first n tokens of src (what dst held is dropped): the KV cells are
 * shared, not copied, so a common prompt prefix is evaluated once; a hybrid's recurrent state
 * is copied (n within src's snapshot ring or src's whole length; else dst replays them before
 * its next eval). */
PSL_API psl_status psl_context_seq_copy(psl_context * ctx, int32_t src, int32_t dst, int32_t n);

/* A sequence's state (its tokens and their K/V rows, layer by layer; a hybrid's recurrent states
 * after its last positions, as far back as it rolls back in O(1)) as bytes, for prompt caches
 * and state files; with an MTP block, the hidden rows its drafts read too. psl_context_seq_state_size
 * writes the bytes to *size (a context with a draft head is PSL_ERR_UNSUPPORTED). psl_context_seq_state_set makes seq hold exactly that state; a state of
 * another model or cache type, or a truncated one, is PSL_ERR_INVALID_ARGUMENT with seq
 * unchanged (as when it does not fit: PSL_ERR_CONTEXT_FULL). */
PSL_API psl_status psl_context_seq_state_size(const psl_context * ctx, int32_t seq, int64_t * size);
PSL_API psl_status psl_context_seq_state_get(const psl_context * ctx, int32_t seq, uint8_t * dst, int64_t cap);
PSL_API psl_status psl_context_seq_state_set(psl_context * ctx, int32_t seq, const uint8_t * src, int64_t size);
/* A hybrid model's checkpoint of sequence seq: its recurrent state after its last position, and a
 * hash of its tokens (no K/V rows: those roll back exactly). Taken at chosen positions of a long
 * prompt, it lets a later prompt that shares the prefix up to there resume without replaying it:
 * truncate the sequence to the checkpoint's position, then set it (with an MTP block, its hidden
 * row there follows). PSL_ERR_UNSUPPORTED for a model without a recurrent state, or with a draft
 * head; set refuses
 * (PSL_ERR_INVALID_ARGUMENT, the sequence unchanged) a checkpoint of another model, position or
 * text. */
PSL_API psl_status psl_context_seq_checkpoint_size(const psl_context * ctx, int32_t seq, int64_t * size);
PSL_API psl_status psl_context_seq_checkpoint_get(const psl_context * ctx, int32_t seq, uint8_t * dst, int64_t cap);
PSL_API psl_status psl_context_seq_checkpoint_set(psl_context * ctx, int32_t seq, const uint8_t * src, int64_t size);
/* Whether the next eval of seq first replays its tokens: a hybrid's sequence cut back past its
 * ring of states (where a checkpoint at or below its length would serve instead). */
PSL_API bool       psl_context_seq_stale(const psl_context * ctx, int32_t seq);
/* The sequences the context holds (its n_seq_max), and the cells in use by all of them. */
PSL_API int32_t    psl_context_n_seq_max(const psl_context * ctx);
PSL_API int32_t    psl_context_n_cells_used(const psl_context * ctx);
/* psl_context_mtp_draft for sequence seq (each sequence drafts from its own hidden state). */
PSL_API psl_status psl_context_seq_mtp_draft(psl_context * ctx, int32_t seq, int32_t token, int32_t step,
                                             float * logits, int64_t out_cap);
/* Token trees from the MTP block: n nodes of sequence seq's draft in one MTP batch. A draft's
 * nodes are numbered as they are evaluated since its step 0 (node 0; step s > 0 adds the next
 * node, a child of the last one); node i of this call is numbered after them and is the child
 * of node parents[i], which must be one the draft holds already (evaluated before this call):
 * it runs tokens[i] with its parent's MTP output state, one position past its parent, attending
 * to the cache, its ancestors and itself only; several children of one node are siblings drawn
 * from the same state. n_vocab logits per node into logits (out_cap >= n * n_vocab floats).
 * Every node's state is held until the draft ends: at the next step 0, or when anything changes
 * the sequence (eval, truncate, copy, clear): then, or with a parent not held,
 * PSL_ERR_INVALID_ARGUMENT. The drafted nodes never enter the cache (as for the steps: its
 * contents and length are unchanged as far as evals see). 1 <= n <= 512. */
PSL_API psl_status psl_context_seq_mtp_draft_nodes(psl_context * ctx, int32_t seq, int32_t n, const int32_t * tokens,
                                                   const int32_t * parents, float * logits, int64_t out_cap);

PSL_API int32_t    psl_context_n_past(const psl_context * ctx);
/* Keeps the first n_keep tokens of the cache, in O(1): the rollback speculation needs. A
 * hybrid model's recurrent state (qwen35) rolls back exactly, in O(1) by up to
 * psl_context_max_rollback tokens past the end; further back, the next eval first replays the
 * kept tokens. */
PSL_API psl_status psl_context_truncate(psl_context * ctx, int32_t n_keep);
/* The most tokens truncate drops in O(1): n_ctx with a KV cache only, else the recurrent state's
 * snapshot ring length - 1 (16 by default; PYLLAMASPEC_RS_SNAPSHOTS sets the length). */
PSL_API int32_t    psl_context_max_rollback(const psl_context * ctx);
/* The memory a context's cache of past tokens holds, in bytes, for its n_cells cells (n_ctx
 * rounded up): the KV cache (an MLA model's compressed latent rows, shared layers counted once)
 * and a hybrid model's recurrent state ring. NULL outputs are skipped. */
PSL_API psl_status psl_context_memory(const psl_context * ctx, uint64_t * kv_bytes, int32_t * n_cells,
                                      uint64_t * recurrent_bytes);
PSL_API void       psl_context_clear(psl_context * ctx);
/* Restricts the output head to the token ids ids[0..n): only those rows of the output matrix
 * are computed, and the logits of every other id read -INFINITY. For a draft model with a large
 * vocabulary, whose head costs most of a token (Gemma 3: 262k rows), a head of its likely
 * tokens makes drafting several times cheaper; the target's verification keeps the output
 * exact. The rows are copied from the file (n * row size bytes). n = 0 restores the full head.
 * Ids must be distinct and in [0, n_vocab). */
PSL_API psl_status psl_context_set_output_ids(psl_context * ctx, const int32_t * ids, int32_t n);
/* Adds ids to a restricted head (those already in it are skipped): a draft learns the rare
 * tokens its text uses. Cheap: one row copied per new id (room is kept for more). */
PSL_API psl_status psl_context_add_output_ids(psl_context * ctx, const int32_t * ids, int32_t n);
/* Time spent inside psl_context_eval (wall clock, microseconds) and the number of calls and
 * tokens since the context was made or the counters reset: lets callers measure their own
 * overhead around the core. */
typedef struct psl_perf {
    double  t_eval_us;
    int64_t n_evals;
    int64_t n_tokens;
    int32_t n_threads_last;   /* CPU threads the last graph ran with: fewer than asked while other
                                 processes keep the cores busy (PYLLAMASPEC_THREAD_CAP=0: never) */
    int64_t n_compactions;    /* times the KV cache moved its cells down: a sequence's next cell had
                                 no free cell above its last (its cells keep their order) */
} psl_perf;
PSL_API psl_status psl_context_get_perf(const psl_context * ctx, psl_perf * out);
PSL_API void       psl_context_reset_perf(psl_context * ctx);
/* Asks the eval running on ctx to stop, or if none is running, the next one to start: it
 * returns PSL_ERR_INTERRUPTED with the cache unchanged, and the request is consumed. Safe from
 * any thread while another uses ctx (the one call that is: a context is otherwise used by one
 * thread at a time). A request that lands after an eval ends waits for the next one, so a
 * cancel can never be lost between two evals; psl_context_clear_interrupt withdraws it. */
PSL_API void       psl_context_interrupt(psl_context * ctx);
PSL_API void       psl_context_clear_interrupt(psl_context * ctx);
/* When on, SIGINT (Ctrl-C) arriving during an eval interrupts it (PSL_ERR_INTERRUPTED, cache
 * unchanged); the signal is passed on to the handler installed before, so a host such as
 * Python still sees it. POSIX only. */
PSL_API void       psl_context_set_catch_sigint(psl_context * ctx, bool on);

/* ---- MTP drafting (csrc/engine/mtp.cpp): a target whose file carries NextN/MTP layers (qwen35)
 * drafts with them from its own hidden state: no draft model, shared weights. ---- */
/* MTP blocks this core runs for the model: 0 (none, or not shipped in the file) or 1. */
PSL_API int32_t    psl_model_n_mtp_layers(const psl_model * model);
/* From now on every eval of ctx also fills the MTP block's KV cache (it rolls back with the
 * rest) and keeps the last hidden rows; tokens already in the cache are replayed before the next
 * eval. PSL_ERR_UNSUPPORTED when the model has no MTP layers. Idempotent. */
PSL_API psl_status psl_context_enable_mtp(psl_context * ctx);
/* One chained draft step, writing n_vocab logits into logits (out_cap floats). Step 0 runs
 * `token` (the next token, not yet in the cache) with the target's hidden state at n_past - 1
 * and starts a draft; step s > 0 runs the step s - 1 draft token with the MTP's own step s - 1
 * output, and must follow step s - 1 (the last node evaluated is at depth s - 1: a step or a
 * psl_context_seq_mtp_draft_nodes node) with the cache unchanged (else
 * PSL_ERR_INVALID_ARGUMENT). The cache's
 * contents and length are unchanged as far as evals see. */
PSL_API psl_status psl_context_mtp_draft(psl_context * ctx, int32_t token, int32_t step, float * logits,
                                         int64_t out_cap);

/* ---- draft heads (csrc/engine/head.cpp): EAGLE-3 ("eagle3"), DFlash ("dflash") and Gemma 4
 * assistant ("gemma4-assistant") files load with psl_model_load but have no context of their own
 * (psl_context_new refuses them): a head is attached to its target's context and drafts from the
 * inputs of the target layers it names (an assistant: from the target's final hidden rows and
 * over its cache), which the target keeps whenever it evaluates (no extra target evaluation). ---- */
enum psl_head_kind { PSL_HEAD_NONE = 0, PSL_HEAD_EAGLE3 = 1, PSL_HEAD_DFLASH = 2, PSL_HEAD_GEMMA4_ASSISTANT = 3 };
typedef struct psl_head_info {
    int32_t kind;               /* psl_head_kind                                           */
    int32_t n_target_layers;    /* target layers it reads (their ids: target_layers)       */
    int32_t target_layers[64];
    int32_t n_embd_target;      /* the target hidden size it was trained on                */
    int32_t n_draft_vocab;      /* rows of its output (d2t maps them to target ids)        */
    int32_t block_size;         /* dflash: positions per block, the anchor included        */
    int32_t mask_token;         /* dflash: the mask token id, -1 for eagle3                */
} psl_head_info;
PSL_API psl_status psl_model_head_info(const psl_model * model, psl_head_info * out);
/* general.architecture of a GGUF file (its first part), read without loading weights. */
PSL_API psl_status psl_file_arch(const char * path, char * arch, size_t cap);
/* Attaches a head to ctx (NULL detaches): checked against the target (hidden size, layer ids,
 * vocabulary; PSL_ERR_UNSUPPORTED names the misfit); the head keeps a reference to its model.
 * The cache is cleared: the next evals give the head its features. A context with a head holds
 * one sequence, 0: a batch, copy or truncation naming another gives PSL_ERR_UNSUPPORTED. */
PSL_API psl_status psl_context_attach_head(psl_context * ctx, psl_model * head);
/* EAGLE-3, Gemma 4 assistant: one chained draft step, n_vocab logits into logits (out_cap floats). Step 0 runs
 * `token` (the next token, not yet in the cache) with the features of position n_past - 1;
 * step s > 0 the step s - 1 draft token with the head's own step s - 1 state, and must follow
 * step s - 1 with the cache unchanged. */
PSL_API psl_status psl_context_head_draft(psl_context * ctx, int32_t token, int32_t step, float * logits,
                                          int64_t out_cap);
/* DFlash: one block [token, mask x n] after the cache, in one pass: n rows of n_vocab logits
 * (the draft tokens 1..n), 1 <= n < block_size. */
PSL_API psl_status psl_context_head_block(psl_context * ctx, int32_t token, int32_t n, float * logits,
                                          int64_t out_cap);

/* ---- vocabulary and tokenizer (csrc/vocab/), from the GGUF tokenizer.ggml.* keys ---- */
/* Token for token as llama.cpp tokenizes: SentencePiece-style ("llama") and BPE ("gpt2") models.
 * Every function here fails with PSL_ERR_NO_VOCAB when the model file has no tokenizer, and with
 * PSL_ERR_OUT_OF_RANGE for a token id outside [0, n_tokens). */
enum psl_vocab_type { PSL_VOCAB_NONE = 0, PSL_VOCAB_SPM = 1, PSL_VOCAB_BPE = 2 };

/* GGUF's token types. */
enum psl_token_attr {
    PSL_TOKEN_UNDEFINED    = 0,
    PSL_TOKEN_NORMAL       = 1,
    PSL_TOKEN_UNKNOWN      = 2,
    PSL_TOKEN_CONTROL      = 3,
    PSL_TOKEN_USER_DEFINED = 4,
    PSL_TOKEN_UNUSED       = 5,
    PSL_TOKEN_BYTE         = 6
};

typedef struct psl_vocab_info {
    int32_t type;               /* psl_vocab_type                                 */
    int32_t n_tokens;
    int32_t bos, eos, eot, eom, unk, pad, sep, nl;   /* -1 where the model has none */
    bool    add_bos;
    bool    add_eos;
    bool    add_space_prefix;
    char    pre[64];            /* tokenizer.ggml.pre, "" if absent               */
} psl_vocab_info;

/* Opens only the tokenizer of a GGUF file, like llama.cpp's vocab_only: any architecture, no
 * weights read. The handle works with the tokenizer and metadata functions and psl_model_get_info
 * (arch and name only); psl_context_new refuses it. Free it with psl_model_free. Fails with
 * PSL_ERR_NO_VOCAB when the file has no tokenizer. Of a split model, the first shard is opened
 * (it holds the metadata). */
PSL_API psl_status psl_vocab_load(const char * path, psl_model ** out);
PSL_API psl_status psl_vocab_get_info(const psl_model * model, psl_vocab_info * out);
/* Token ids of text[0..len). Writes at most cap ids; if more are needed returns
 * PSL_ERR_BUFFER_TOO_SMALL with *n_out set to the number required.
 * add_special: BOS / EOS where the model asks for them (tokenizer.ggml.add_bos_token, ...).
 * parse_special: control tokens written in the text (<|im_start|>, <start_of_turn>) become their
 * ids; without it they are plain text. User-defined tokens are matched either way, as in
 * llama.cpp. Any bytes are accepted; malformed UTF-8 is handled as llama.cpp does. */
PSL_API psl_status psl_tokenize(const psl_model * model, const char * text, size_t len,
                                bool add_special, bool parse_special,
                                int32_t * out, int32_t cap, int32_t * n_out);
/* Bytes of one token (byte tokens give their byte; control tokens give "" unless render_special).
 * Same buffer protocol as psl_tokenize. */
PSL_API psl_status psl_token_to_piece(const psl_model * model, int32_t id, bool render_special,
                                      char * buf, size_t cap, size_t * n_out);
/* Bytes of ids[0..n): the pieces concatenated, except that for models with add_space_prefix the
 * leading space of the first token after an optional BOS is dropped (the tokenizer added it).
 * No other clean-up: the bytes are exact, and need not be valid UTF-8 at the end (a character cut
 * between tokens). Same buffer protocol as psl_tokenize. */
PSL_API psl_status psl_detokenize(const psl_model * model, const int32_t * ids, int32_t n,
                                  bool render_special, char * buf, size_t cap, size_t * n_out);
/* attr: the psl_token_attr of the token as the tokenizer treats it (a token that llama.cpp's rules
 * make a control token, e.g. an end-of-turn marker typed as normal, reads CONTROL); score: its
 * tokenizer.ggml.scores entry (0 without scores). Either pointer may be NULL. */
PSL_API psl_status psl_token_get_attr(const psl_model * model, int32_t id, int32_t * attr, float * score);
/* True for end-of-generation tokens (eos, eot, eom and the like). False for an invalid id or a
 * model without tokenizer. */
PSL_API bool       psl_token_is_eog(const psl_model * model, int32_t id);
/* All end-of-generation ids, ascending; same buffer protocol as psl_tokenize. */
PSL_API psl_status psl_vocab_eog_tokens(const psl_model * model, int32_t * out, int32_t cap, int32_t * n_out);

/* Streaming detokenizer: push ids, get back the text that is complete UTF-8 so far; an
 * incomplete sequence is held back until a later token completes it (or flush). Bytes that can
 * never become valid UTF-8 are passed on as they are. The returned pointer is valid until the
 * next call on the same psl_detok. A psl_detok keeps what it needs of the model alive: it may
 * outlive psl_model_free. Not thread-safe (one psl_detok per thread); the model is. */
PSL_API psl_status psl_detok_new(const psl_model * model, bool render_special, psl_detok ** out);
PSL_API psl_status psl_detok_push(psl_detok * d, int32_t id, const char ** text, size_t * len);
PSL_API psl_status psl_detok_flush(psl_detok * d, const char ** text, size_t * len);
PSL_API void       psl_detok_free(psl_detok * d);

/* The words a BPE pre-tokenizer splits text into, for tests and debugging: `pre` is a
 * tokenizer.ggml.pre value ("default", "gpt-2", "llama-bpe", "qwen2", "smollm", ...; an unknown
 * one fails with PSL_ERR_UNSUPPORTED, naming it); ends[i] is the byte offset where word i ends.
 * For text that is not valid UTF-8 the offsets refer to the text after llama.cpp's repair (each
 * malformed byte replaced by U+FFFD). Same buffer protocol as psl_tokenize. No model needed. */
PSL_API psl_status psl_pretokenize(const char * pre, const char * text, size_t len,
                                   int32_t * ends, int32_t cap, int32_t * n_out);
/* PSL_OK when draft can speculate for target: same ids, token text and types, special tokens
 * and tokenizer; otherwise PSL_ERR_UNSUPPORTED naming the first difference (csrc/vocab/vocab_compat.cpp). */
PSL_API psl_status psl_vocab_compatible(const psl_model * target, const psl_model * draft);
/* The n (at most) ids a restricted draft head (psl_context_set_output_ids) should cover, sorted:
 * control, user-defined and byte tokens and single characters below U+2500 first, then tokens
 * in BPE merge order (descending score where the file has scores, else ascending id), the
 * order of how common they were in training. `out` holds n ids; *n_out = how many written. */
PSL_API psl_status psl_vocab_draft_ids(const psl_model * model, int32_t n, int32_t * out, int32_t * n_out);

/* ---- grammars (csrc/grammar/): llama.cpp's GBNF as a constraint on sampling ----
 * A grammar follows one generation: which tokens may come next (llama.cpp's rule, to the token:
 * a token whose text, special tokens rendered, the grammar can match, or whose id a <[id]> /
 * <text> element names; an end-of-generation token where the grammar may end), the tokens it
 * has accepted (rewind rolls them back, with a rejected draft), and the text every continuation
 * starts with. Not thread-safe: one grammar per generation. */
typedef struct psl_grammar psl_grammar;

/* What a grammar may cost: a text from a client must not exhaust the stack, the memory or the
 * time of the process. 0 in a field: no bound. Compiling past a limit fails with
 * PSL_ERR_INVALID_ARGUMENT naming it; the size limits hold at run time too (a mask or an accept
 * that passes one fails the same way). */
typedef struct psl_grammar_limits {
    int32_t max_rules;             /* rules, repetitions expanded (default 100000)                  */
    int32_t max_depth;             /* nested parentheses (default 1000)                             */
    int64_t max_elements;          /* grammar elements, repetitions expanded (default 4194304)      */
    int32_t max_stacks;            /* distinct parser stacks, ever (default 262144)                 */
    int32_t max_set;               /* parser stacks alive at once, in one state (default 65536)     */
    int64_t max_set_storage;       /* stack ids held by all the states met, ever (default 8388608)  */
    int32_t timeout_ms;            /* compiling: parsing, checks and the first state (default 1000) */
    const int32_t * cancel;        /* when another thread sets *cancel nonzero, compiling stops
                                    * with PSL_ERR_INTERRUPTED (NULL: none)                         */
} psl_grammar_limits;
PSL_API psl_grammar_limits psl_grammar_default_limits(void);

/* Parses GBNF text[0..len) with start rule `root` (NULL: "root") for model's vocabulary, within
 * limits (NULL: the defaults). model NULL: only checks the grammar's syntax (a <text> token
 * reference is not looked up; the handle answers nothing else).
 * A bad grammar fails with PSL_ERR_INVALID_ARGUMENT naming the problem, its line and column. */
PSL_API psl_status psl_grammar_new(const psl_model * model, const char * text, size_t len, const char * root,
                                   const psl_grammar_limits * limits, psl_grammar ** out);
PSL_API void       psl_grammar_free(psl_grammar * g);
/* Accepts ids[0..n) in order while the grammar allows them; *n_accepted = how many it took (the
 * state is after those). */
PSL_API psl_status psl_grammar_accept(psl_grammar * g, const int32_t * ids, int32_t n, int32_t * n_accepted);
/* Back to the state before the last n accepted tokens (n <= psl_grammar_n_accepted). */
PSL_API psl_status psl_grammar_rewind(psl_grammar * g, int32_t n);
PSL_API int32_t    psl_grammar_n_accepted(const psl_grammar * g);
/* allowed[id] = 1 where token id may come next, else 0, for id < n (ids past the vocabulary: 0). */
PSL_API psl_status psl_grammar_mask(psl_grammar * g, uint8_t * allowed, int32_t n);
PSL_API psl_status psl_grammar_allows(psl_grammar * g, int32_t id, bool * allowed);
/* Whether an end-of-generation token is allowed now (the grammar may end here). */
PSL_API bool       psl_grammar_may_end(const psl_grammar * g);
/* *dead_end = no token of the vocabulary continues the text here (the grammar's language needs
 * characters no token spells, or a dead end after some tokens): the mask then allows the
 * end-of-generation tokens, so that a generation ends there instead of failing. */
PSL_API psl_status psl_grammar_dead_end(psl_grammar * g, bool * dead_end);
/* Why the grammar stopped at run time, or NULL: a mask or an accept passed one of its limits
 * (its states multiplied, or one step took past timeout_ms). It then stands at a dead end (only
 * end-of-generation tokens allowed), so that its generation ends and its caller says why. */
PSL_API const char * psl_grammar_failure(const psl_grammar * g);
/* The bytes every continuation starts with, at most cap (whole characters): none where the
 * grammar branches, may end, or expects a token element. */
PSL_API psl_status psl_grammar_forced(psl_grammar * g, char * buf, size_t cap, size_t * n_out);

/* ---- sampling and speculative acceptance (csrc/engine/sampling.cpp) ----
 * Everything per vocabulary entry happens here, on the caller's logits buffers. The adjusted
 * distribution follows llama.cpp's chain: top-k, then top-p and min-p on the untempered
 * softmax, then temperature, after llama.cpp's penalties (first in its chain) when they are on.
 * temperature == 0 is greedy (argmax of the penalized logits, lowest id on ties). */
typedef struct psl_sampler psl_sampler;

typedef struct psl_sampling_params {
    float    temperature;   /* 0 = greedy                    */
    int32_t  top_k;         /* 0 = off                       */
    float    top_p;         /* 1 = off, in (0, 1]            */
    float    min_p;         /* 0 = off, in [0, 1)            */
    uint64_t seed;
    /* llama.cpp's penalties, applied to the logits before everything else, over the last
     * penalty_last_n tokens of the sampler's history (psl_sampler_push): a token seen c > 0
     * times has its logit divided by repeat_penalty (multiplied when <= 0), then lowered by
     * c * frequency_penalty + presence_penalty. */
    float    repeat_penalty;    /* 1 = off, > 0                              */
    float    frequency_penalty; /* 0 = off                                   */
    float    presence_penalty;  /* 0 = off                                   */
    int32_t  penalty_last_n;    /* 64 by default, 0 = off, -1 = the whole history */
} psl_sampling_params;

PSL_API psl_sampling_params psl_sampling_default_params(void);
PSL_API psl_status psl_sampler_new(int32_t n_vocab, const psl_sampling_params * params, psl_sampler ** out);
PSL_API void       psl_sampler_free(psl_sampler * s);
PSL_API psl_status psl_sampler_set_seed(psl_sampler * s, uint64_t seed);

/* The history the penalties look back on (llama.cpp's: the prompt, then every token
 * generated): push appends ids[0..n) (each in [0, n_vocab)), truncate keeps the first n_keep
 * (a rolled-back draft). Every call below penalizes a row by the history as it stands. */
PSL_API psl_status psl_sampler_push(psl_sampler * s, const int32_t * ids, int32_t n);
PSL_API psl_status psl_sampler_truncate(psl_sampler * s, int32_t n_keep);
PSL_API int32_t    psl_sampler_history_len(const psl_sampler * s);

/* The adjusted distribution of one logits row, written densely to probs (n_vocab floats, zero
 * outside the kept set; one-hot when greedy). */
PSL_API psl_status psl_sampler_probs(psl_sampler * s, const float * logits, float * probs);
/* Draws one token from a logits row. probs (optional, n_vocab floats) receives the adjusted
 * distribution (the draft's q for psl_sampler_verify); p_max (optional) its largest probability
 * (llama.cpp's --draft-p-min test). */
PSL_API psl_status psl_sampler_sample(psl_sampler * s, const float * logits, float * probs,
                                      int32_t * token, float * p_max);
/* Speculative verification of k draft tokens against k+1 target logits rows (row i scores
 * draft[i]; row k is the bonus row). Draft i is accepted with probability
 * min(1, p_i(x)/q_i(x)) (greedy: iff it is the target's argmax); at the first rejection the
 * next token is drawn from norm(max(0, p_i - q_i)); if all pass it is drawn from p_k.
 * draft_probs holds k rows of q (n_vocab floats each); NULL means a deterministic drafter
 * (n-gram lookup): q is a point mass on each draft token. With penalties, row i is penalized
 * by the history followed by draft[0..i), the text it continues if those drafts are accepted
 * (the draft's q must be made the same way); the history is unchanged when the call returns:
 * push the accepted drafts and the next token. */
PSL_API psl_status psl_sampler_verify(psl_sampler * s, const float * target_logits, const int32_t * draft,
                                      const float * draft_probs, int32_t k, int32_t * n_accepted,
                                      int32_t * next_token);
/* Speculative verification of a token tree of n nodes: tokens[i] (in [0, n_vocab)) with parent
 * parents[i] (-1: the root, else a node before i). target_logits holds n+1 rows: row 0 the
 * root's (scoring its children), row i+1 node i's. Walking down from the root, with p the
 * adjusted distribution of the node's row and its children in node order (their draw order):
 * greedy follows the child equal to the argmax, else emits the argmax; with draft_probs (n rows
 * of n_vocab floats: row i the distribution q that node i was drawn from, the same for siblings,
 * which were drawn from it without replacement; only the first child's row is read), recursive
 * rejection sampling (Jeon et al. 2024, Thm. 3.1): child x_i is followed with probability
 * min(1, p_i(x_i)/q_i(x_i)); on rejection p_{i+1} = norm(max(0, p_i - q_i)) and q_{i+1} = q_i
 * without x_i, renormalized; all rejected: the next token is drawn from the last p; draft_probs
 * NULL (a deterministic drafter): y is drawn from p and the child y followed if there is one.
 * The accepted nodes, root first, go to path[0..*n_path) (path holds n), and the token after
 * them to *next_token; the draws use the sampler's seeded stream. With penalties, a node's row is
 * penalized by the history followed by the path to it; under a grammar it is scored at the
 * grammar's state after that path. The history and the grammar are as found when the call
 * returns: push the path's tokens and the next token. A malformed tree (a parent not before its
 * child) or a draft row with no positive mass is PSL_ERR_INVALID_ARGUMENT, a token out of range
 * PSL_ERR_OUT_OF_RANGE. */
PSL_API psl_status psl_sampler_verify_tree(psl_sampler * s, const float * target_logits, const int32_t * tokens,
                                           const int32_t * parents, const float * draft_probs, int32_t n,
                                           int32_t * path, int32_t * n_path, int32_t * next_token);
/* Samples under a grammar from now on (g NULL: none): every adjusted distribution is that of
 * the logits with the tokens g forbids removed first (llama.cpp's grammar-first chain), at g's
 * state; psl_sampler_verify scores row i at g's state after draft[0..i) and leaves g as it found
 * it. The sampler does not own g: it must stay alive while set. Greedy picks test the likeliest
 * tokens one by one before computing a whole mask. */
PSL_API psl_status psl_sampler_set_grammar(psl_sampler * s, psl_grammar * g);
/* Log-probabilities of n_rows logits rows (row-major, n_vocab floats each) under their full
 * softmax at temperature 1, before penalties and truncation (llama-server's n_probs, OpenAI's
 * logprobs): token_logprobs[i] = log p_i(tokens[i]); when n_top > 0, top_ids / top_logprobs
 * (n_rows x n_top) receive each row's n_top most likely ids, best first (lowest id on ties).
 * n_top is in [0, n_vocab]; the top arrays may be NULL when n_top == 0. */
PSL_API psl_status psl_logprobs(const float * logits, int32_t n_vocab, int32_t n_rows, const int32_t * tokens,
                                int32_t n_top, float * token_logprobs, int32_t * top_ids, float * top_logprobs);
/* ---- vision projectors (csrc/vision/): llama.cpp's mmproj GGUF files (general.architecture
 * "clip"), loaded beside a text model, turn an image into rows the text model reads in place of
 * token embeddings (psl_context_seq_eval_rows). Types: "gemma3", "qwen2vl_merger",
 * "qwen2.5vl_merger", "qwen3vl_merger" (with deepstack mergers too: wider rows, for qwen3vl text
 * models), "gemma4v" (Gemma 4), "pixtral" (Mistral Small 3.x). The encoder runs on the CPU. ---- */
typedef struct psl_projector psl_projector;
typedef struct psl_projector_info {
    char    type[32];         /* clip.projector_type, e.g. "gemma3"                                 */
    int32_t image_size;       /* the side of the square image the encoder takes, in pixels          */
    int32_t patch_size;
    int32_t n_merge;          /* patches per side pooled into one row (gemma3's scale_factor)       */
    int32_t n_embd;           /* the rows' width: the text model's n_embd_inp it was made for       */
    int32_t n_tokens;         /* rows of an image_size square (psl_projector_image_grid: any size)  */
    float   image_mean[3];    /* the pixels' normalization, (x / 255 - mean) / std per channel      */
    float   image_std[3];
    bool    non_causal;       /* an image's rows attend to each other both ways in the text model   */
    bool    mrope;            /* the text model places the rows at 2-D M-RoPE positions, a grid of
                                 nx x ny (psl_projector_image_grid): the Qwen family                */
    int32_t n_deepstack;      /* deepstack mergers (Qwen3-VL): n_embd is n_embd_text * (1 + this) */
    bool    row_breaks;       /* pixtral: the rows of a grid nx x ny are its rows, each but the last
                                 followed by an [IMG_BREAK] row: nx * ny + ny - 1 rows           */
} psl_projector_info;
/* n_threads: the encoder's CPU threads (0 = default). A file that is not a projector, or of a type
 * not supported, fails with PSL_ERR_UNSUPPORTED. */
PSL_API psl_status psl_projector_load(const char * path, int32_t n_threads, psl_projector ** out);
PSL_API void       psl_projector_free(psl_projector * proj);   /* NULL is ignored */
PSL_API psl_status psl_projector_get_info(const psl_projector * proj, psl_projector_info * out);
/* The merged grid of an image width x height pixels (preprocessed): nx x ny rows, row-major
 * (row_breaks: plus ny - 1 [IMG_BREAK] rows, one after each grid row but the last).
 * gemma3 takes its image_size square only; qwen3vl_merger rectangles whose sides are multiples of
 * patch_size * n_merge. Other sizes: PSL_ERR_INVALID_ARGUMENT. */
PSL_API psl_status psl_projector_image_grid(const psl_projector * proj, int64_t width, int64_t height, int32_t * nx,
                                            int32_t * ny);
/* pixels: an image already resized and normalized as the projector takes it (psl_projector_info),
 * 3 planes (R, G, B) of height x width float32 (a size psl_projector_image_grid takes); writes
 * nx * ny (row_breaks: nx * ny + ny - 1) x n_embd floats, row-major, to out
 * (out_cap floats). A projector is used by one thread at a time. */
PSL_API psl_status psl_projector_encode(psl_projector * proj, const float * pixels, int32_t width, int32_t height,
                                        float * out, int64_t out_cap);
/* How an image's rows are placed (psl_context_seq_eval_rows). non_causal: the rows attend to each
 * other both ways (psl_projector_info), in one graph (n <= n_batch). grid_x x grid_y: the rows'
 * grid (row i at column i % grid_x, line i / grid_x; grid_x * grid_y == n), or 0 x 0: one
 * position a row. As llama.cpp's mtmd, the text model decides: one with M-RoPE (qwen35,
 * qwen35moe, qwen3vl, qwen3vlmoe) places a gridded image at 2-D positions, row i at (p0, p0 + i / grid_x,
 * p0 + i % grid_x, 0) where p0 is the rope position the image starts at, and the tokens after it
 * go on from p0 + max(grid_x, grid_y); any other model, and a 0 x 0 grid, one position a row.
 * The sequence's positions (n_past, truncate, copy, state files) still count one a row. */
typedef struct psl_rows_layout {
    bool    non_causal;
    int32_t grid_x, grid_y;
    int32_t draft_token;   /* the token an attached EAGLE-3 head pairs with these rows (the family's
                              image token, what Hugging Face's input ids hold there); 0 if unsure */
} psl_rows_layout;
/* Evaluates n rows of width floats (an image's, from psl_projector_encode; width must be the
 * model's n_embd_inp, psl_model_info: with deepstack, slice k + 1 of each row is added after
 * layer k; another width is PSL_ERR_INVALID_ARGUMENT) in place of token embeddings, appended to sequence seq at its next positions: each row takes a position and a
 * cell as a token would, and the sequence's history holds ids[i] for it (n ids, any int32: an
 * image's own, negative in pyllamaspec's prompts, so a state file keeps which image is there, and
 * a restored sequence is never taken for one holding another image or a text). layout: as above
 * (NULL: causal, one position a row); a grid of negative sides, of one side 0, or whose product
 * is not n is PSL_ERR_INVALID_ARGUMENT. logits_mode and out as psl_context_eval. A hybrid's
 * recurrent layers read the rows as they would embeddings. Afterwards a truncate or copy that
 * cuts inside an image placed 2-D is PSL_ERR_INVALID_ARGUMENT, the sequence unchanged; a
 * hybrid cut deeper than its ring over an image is stale (psl_context_seq_stale) and its next
 * eval PSL_ERR_UNSUPPORTED (its rows are no tokens to replay) until a checkpoint is set or it is
 * cut before the image. A sequence state holds its images' layout (files without images are
 * as before), a checkpoint is told from one of the same ids at other positions. With MTP
 * drafting the block's cache is filled at the rows too (the row stands for the token's
 * embedding) and drafts after the image take its positions. An attached draft head reads the
 * target's features at the rows as at tokens (DFlash: they are all it reads; EAGLE-3 pairs them
 * with layout->draft_token, a token of its vocabulary, else PSL_ERR_INVALID_ARGUMENT).
 * PSL_ERR_UNSUPPORTED with an architecture that reads token ids beyond its embeddings (gemma4);
 * on failure the sequence is as it was. */
PSL_API psl_status psl_context_seq_eval_rows(psl_context * ctx, int32_t seq, const float * rows, int32_t n,
                                             int32_t width, const int32_t * ids, const psl_rows_layout * layout,
                                             int32_t logits_mode, float * out, int64_t out_cap);
/* cffi-end */

#ifdef __cplusplus
}
#endif

#endif /* PYLLAMASPEC_H */
