// The tokenizer: vocabulary from the GGUF tokenizer.ggml.* keys, SentencePiece-style and BPE
// tokenization, detokenization. Implemented in vocab_load.cpp (loading), vocab.cpp (maps,
// pieces, the top of tokenization), vocab_special.cpp (special tokens), vocab_spm.cpp
// (SentencePiece-style merging), vocab_bpe.cpp (pre-tokenizers and BPE merging),
// merge_queue.cpp (the merge order of both), unicode.cpp + unicode_data.cpp (code point
// properties); the C API lives in api/api_vocab.cpp.
//
// The behaviour follows llama.cpp's tokenizer (llama-vocab.cpp) token for token: the same
// special-token partition (longest special tokens first, user-defined tokens even without
// parse_special), the same merge orders and tie-breaks, the same byte fallbacks.
#pragma once

#include <cstddef>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct gguf_context;

namespace psl {

uint64_t hash_bytes(const char * p, size_t n);

// The tokenizer's thread-local work buffers give their memory back after a call that grew one
// past this size: a 10 MB word would otherwise leave hundreds of MB with the thread. (Smaller
// buffers are kept: giving back costs the next large call its page faults, about 30%.)
constexpr size_t kKeepBufferBytes = size_t(64) << 20;
template <typename Buffer>
void trim_buffer(Buffer & b) {
    if (b.capacity() * sizeof(typename Buffer::value_type) > kKeepBufferBytes) Buffer().swap(b);
}

class MergeQueue;
class SpecialSplitter;
class VocabLoader;
struct BpeSym;

using token_id = int32_t;
constexpr token_id kNoToken = -1;

// Token attributes as bit flags (llama.cpp's llama_token_attr); GGUF's token types map onto the
// first ones, the load step adds CONTROL / UNUSED / LSTRIP / RSTRIP by the rules llama.cpp uses.
enum TokenAttr : uint32_t {
    kAttrUndefined   = 0,
    kAttrUnknown     = 1u << 0,
    kAttrUnused      = 1u << 1,
    kAttrNormal      = 1u << 2,
    kAttrControl     = 1u << 3,
    kAttrUserDefined = 1u << 4,
    kAttrByte        = 1u << 5,
    kAttrLstrip      = 1u << 7,
    kAttrRstrip      = 1u << 8,
};

// Exact-match map from byte strings to dense ids, open addressing; the keys live elsewhere and are
// held as views (they must outlive the map).
class StringIdMap {
public:
    // keys[i] gets id i; a repeated key keeps its first id.
    void build(std::vector<std::string_view> keys);
    // The id of key, adding it with the next id if absent.
    int32_t insert(std::string_view key);
    int32_t find(std::string_view key) const {
        if (slots_.empty()) return -1;
        const uint32_t h = (uint32_t) hash_bytes(key.data(), key.size());
        size_t i = h & mask_;
        while (true) {
            const Slot s = slots_[i];
            if (s.id < 0) return -1;
            if (s.hash == h && keys_[s.id] == key) return s.id;
            i = (i + 1) & mask_;
        }
    }
    size_t size() const { return keys_.size(); }

private:
    struct Slot {
        uint32_t hash = 0;
        int32_t id = -1;
    };
    void add_slot(uint32_t h, int32_t id);
    void rehash(size_t cap);
    std::vector<Slot> slots_;
    std::vector<std::string_view> keys_;
    size_t n_slots_used_ = 0;
    size_t mask_ = 0;
};

// Token ids of recently tokenized words (BPE) or segments (SPM), per thread and vocabulary.
class TokenCache {
public:
    // Words longer than this are not cached.
    static constexpr size_t kMaxKey = 64;
    bool find(std::string_view key, uint64_t h, std::vector<int32_t> & out) const;
    void insert(std::string_view key, uint64_t h, const int32_t * ids, size_t n);

private:
    struct Slot {
        uint64_t hash = 0;
        uint32_t key_off = 0, key_len = UINT32_MAX;   // key_len UINT32_MAX: empty
        uint32_t ids_off = 0, ids_len = 0;
    };
    static constexpr size_t kSlots = 1u << 16;
    static constexpr size_t kMaxEntries = kSlots / 2;
    std::vector<Slot> slots_;
    std::string keys_;
    std::vector<int32_t> ids_;
    size_t n_ = 0;
};


// A pre-tokenizer (BPE): splits text into words by a sequence of regex-like stages, exactly as
// llama.cpp's unicode_regex_split does with the expressions of a tokenizer.ggml.pre value.
class PreTokenizer {
public:
    // Throws psl::Error naming `pre` if it is unknown or not supported.
    static std::unique_ptr<PreTokenizer> create(const std::string & pre);
    virtual ~PreTokenizer() = default;
    // Appends the end offsets of the words of text. Text is decoded as llama.cpp does (malformed
    // bytes become U+FFFD) and encoded again into `encoded` (the same bytes for valid UTF-8),
    // which the offsets refer to.
    virtual void split(std::string_view text, std::string & encoded, std::vector<uint32_t> & ends) const = 0;
    // Llama-3 style: a word that is a whole token skips the merges.
    bool ignore_merges = false;
};

// Names of the pre-tokenizers we implement, comma-separated (for messages and docs).
std::string supported_pre_tokenizers();

class Vocab {
public:
    enum class Type { SPM = 1, BPE = 2 };

    struct TokenData {
        uint32_t text_off = 0;     // into text_
        uint32_t text_len = 0;
        uint32_t piece_off = 0;    // into pieces_: the bytes the token stands for (special tokens: their text)
        uint32_t piece_len = 0;
        float score = 0.0f;
        uint32_t attr = kAttrNormal;
        int32_t gguf_type = 1;     // tokenizer.ggml.token_type as read
    };

    Type type = Type::SPM;
    std::string model_name;        // tokenizer.ggml.model
    std::string pre;               // tokenizer.ggml.pre ("" if absent)

    token_id bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken,
             pad = kNoToken, sep = kNoToken, mask = kNoToken, nl = kNoToken;
    token_id fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken, fim_pad = kNoToken,
             fim_rep = kNoToken, fim_sep = kNoToken;
    bool add_bos = false;
    bool add_eos = false;
    bool add_space_prefix = false;

    int32_t n_tokens() const { return (int32_t) tokens_.size(); }
    bool valid(token_id id) const { return id >= 0 && id < n_tokens(); }
    std::string_view text(token_id id) const {
        const auto & t = tokens_[id];
        return std::string_view(text_.data() + t.text_off, t.text_len);
    }
    const TokenData & data(token_id id) const { return tokens_[id]; }
    uint32_t attr(token_id id) const { return tokens_[id].attr; }
    // GGUF token type after the load rules (a token made CONTROL reads as CONTROL).
    int32_t effective_type(token_id id) const;
    bool is_eog(token_id id) const;
    const std::vector<token_id> & eog_tokens() const { return eog_; }   // sorted
    token_id find_token(std::string_view text) const { return token_map_.find(text); }

    // Bytes of one token: control and unknown tokens are empty unless render_special.
    std::string_view piece(token_id id, bool render_special) const;

    // Token ids of text (appended to out). add_special: BOS / EOS as the model asks;
    // parse_special: control tokens written in the text become their ids (user-defined tokens do
    // always, as in llama.cpp).
    void tokenize(std::string_view text, bool add_special, bool parse_special, std::vector<token_id> & out) const;

    // Bytes of ids (ids must be valid). The space that add_space_prefix puts before the text is
    // taken off the first token after an optional leading BOS.
    void detokenize(const token_id * ids, size_t n, bool render_special, std::string & out) const;

    const PreTokenizer * pre_tokenizer() const { return pre_tok_.get(); }

    Vocab();

private:
    friend class VocabLoader;   // vocab_load.cpp
    friend class SpecialSplitter;

    // One piece of text after the special-token partition: a token, or raw text.
    struct Fragment {
        token_id id;             // kNoToken for raw text
        uint32_t begin, end;     // raw text: byte range
    };
    void partition(std::string_view text, bool parse_special, std::vector<Fragment> & frags) const;
    void tokenize_spm(std::string_view text, std::vector<token_id> & out) const;
    void tokenize_bpe(std::string_view text, std::vector<token_id> & out) const;
    TokenCache & thread_cache() const;
    void build_pieces();
    void build_special_matcher();

    uint64_t serial_;              // tells this vocabulary's thread caches from others'
    std::vector<TokenData> tokens_;
    std::string text_;             // all token texts
    std::string pieces_;           // all pieces
    StringIdMap token_map_;        // text -> id
    std::vector<token_id> eog_;    // sorted

    // SPM byte fallback: the <0xXX> token of each byte, else the one-byte token, else unk (where
    // llama.cpp would throw), else kNoToken (the byte is dropped).
    token_id byte_tokens_[256];
    // SPM: bytes after which a U+2581 starts no token-crossing merge (see tokenize_spm).
    bool spm_split_before_space_[256] = {};
    // SPM: per token, the rank of its score (0: the highest; equal scores, equal ranks).
    std::vector<uint32_t> spm_rank_;
    void prepare_spm();

    // BPE: symbols are token ids, then ids >= n_tokens for strings that are not tokens
    // (merge parts, merge results); merges keyed by (left symbol, right symbol).
    struct MergeValue {
        int32_t rank;
        int32_t result;
    };
    std::vector<std::string> extra_symbols_;    // text of symbol n_tokens + i
    StringIdMap extra_map_;
    std::vector<uint64_t> merge_keys_;          // open addressing on (left << 32 | right)
    std::vector<MergeValue> merge_values_;
    uint64_t merge_mask_ = 0;
    int32_t byte_symbol_[256];                  // symbol of the GPT-2 character of each byte
    const MergeValue * find_merge(int32_t left, int32_t right) const;
    void merge_bpe_word(std::string_view word, std::vector<BpeSym> & syms, MergeQueue & queue) const;
    std::unique_ptr<PreTokenizer> pre_tok_;

    // Special-token matchers: byte tries of the texts of the tokens llama.cpp splits off before
    // tokenizing (control, user-defined, unknown): one with all of them (parse_special), one
    // with the user-defined ones only.
    struct TrieNode {
        int32_t first_child = -1;
        int32_t next_sibling = -1;
        token_id token = kNoToken;
        uint8_t byte = 0;
    };
    struct Trie {
        std::vector<TrieNode> nodes;
        int32_t root_child[256];
        void build(const Vocab & v, const std::vector<token_id> & ids);
    };
    Trie trie_all_, trie_user_;
    std::vector<uint32_t> special_rank_;        // per token: position in the longest-first order
    std::vector<token_id> special_by_rank_;
};

// nullptr when the file has no tokenizer (tokenizer.ggml.model absent, "none" or "no_vocab");
// throws psl::Error on malformed tokenizer metadata, an unknown or unsupported tokenizer model,
// or an unknown tokenizer.ggml.pre.
std::unique_ptr<Vocab> load_vocab(const gguf_context * gguf);

}  // namespace psl
