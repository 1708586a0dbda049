// Vocabulary loading from the GGUF tokenizer.ggml.* keys, one step after another: the tokenizer
// model and its defaults, the token table, the byte tokens, the BPE merges, the special token
// ids, the tokens recognised by their text, the end-of-generation set, the attributes forced by
// model name. The rules follow llama.cpp's llama-vocab.cpp.
#include "vocab/vocab.h"

#include "error.h"
#include "vocab/unicode.h"

#include "gguf.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <initializer_list>

namespace psl {

namespace {

class Meta {
public:
    explicit Meta(const gguf_context * g) : g_(g) {}

    int64_t find(const char * key) const { return gguf_find_key(g_, key); }

    bool get_str(const char * key, std::string & out) const {
        const int64_t i = find(key);
        if (i < 0) return false;
        if (gguf_get_kv_type(g_, i) != GGUF_TYPE_STRING) {
            fail(PSL_ERR_FORMAT, "GGUF key %s: expected a string, found %s", key, gguf_type_name(gguf_get_kv_type(g_, i)));
        }
        out = gguf_get_val_str(g_, i);
        return true;
    }

    bool get_bool(const char * key, bool & out) const {
        const int64_t i = find(key);
        if (i < 0) return false;
        switch (gguf_get_kv_type(g_, i)) {
            case GGUF_TYPE_BOOL: out = gguf_get_val_bool(g_, i); return true;
            case GGUF_TYPE_UINT8: out = gguf_get_val_u8(g_, i) != 0; return true;
            case GGUF_TYPE_INT8: out = gguf_get_val_i8(g_, i) != 0; return true;
            default:
                fail(PSL_ERR_FORMAT, "GGUF key %s: expected a bool, found %s", key, gguf_type_name(gguf_get_kv_type(g_, i)));
        }
    }

    // Any integer type; false when absent.
    bool get_int(const char * key, int64_t & out) const {
        const int64_t i = find(key);
        if (i < 0) return false;
        switch (gguf_get_kv_type(g_, i)) {
            case GGUF_TYPE_UINT8: out = gguf_get_val_u8(g_, i); return true;
            case GGUF_TYPE_INT8: out = gguf_get_val_i8(g_, i); return true;
            case GGUF_TYPE_UINT16: out = gguf_get_val_u16(g_, i); return true;
            case GGUF_TYPE_INT16: out = gguf_get_val_i16(g_, i); return true;
            case GGUF_TYPE_UINT32: out = gguf_get_val_u32(g_, i); return true;
            case GGUF_TYPE_INT32: out = gguf_get_val_i32(g_, i); return true;
            case GGUF_TYPE_UINT64: out = (int64_t) gguf_get_val_u64(g_, i); return true;
            case GGUF_TYPE_INT64: out = gguf_get_val_i64(g_, i); return true;
            default:
                fail(PSL_ERR_FORMAT, "GGUF key %s: expected an integer, found %s", key, gguf_type_name(gguf_get_kv_type(g_, i)));
        }
    }

    // An array key of the given element type (any of `types`); -1 when absent.
    int64_t array(const char * key, std::initializer_list<gguf_type> types, gguf_type * got = nullptr) const {
        const int64_t i = find(key);
        if (i < 0) return -1;
        if (gguf_get_kv_type(g_, i) != GGUF_TYPE_ARRAY) {
            fail(PSL_ERR_FORMAT, "GGUF key %s: expected an array, found %s", key, gguf_type_name(gguf_get_kv_type(g_, i)));
        }
        const gguf_type t = gguf_get_arr_type(g_, i);
        if (std::find(types.begin(), types.end(), t) == types.end()) {
            fail(PSL_ERR_FORMAT, "GGUF key %s: unexpected element type %s", key, gguf_type_name(t));
        }
        if (got) *got = t;
        return i;
    }

private:
    const gguf_context * g_;
};

bool contains_any(const std::string & s, std::initializer_list<const char *> subs) {
    for (const char * sub : subs) {
        if (s.find(sub) != std::string::npos) return true;
    }
    return false;
}


}  // namespace

// The steps of load_vocab, in order; each fills its part of the vocabulary.
class VocabLoader {
public:
    explicit VocabLoader(const gguf_context * g) : g_(g), meta_(g) {}
    // model: tokenizer.ggml.model, present and not "none"
    std::unique_ptr<Vocab> load(const std::string & model);

private:
    using MergeParts = std::vector<std::array<std::string, 2>>;

    void read_model(const std::string & model);   // the type and the defaults of the tokenizer model
    void read_tokens();                           // texts, scores and types
    void map_bytes();                             // the token of each byte (SPM's byte fallback)
    MergeParts read_merge_parts() const;          // BPE merges as (left, right) strings
    void add_extra_symbols(const MergeParts & parts);
    void build_merge_table(const MergeParts & parts);
    int32_t symbol(const std::string & s) const;   // a BPE symbol: a token id, or an extra symbol's
    void find_newline();
    void read_special_ids();
    void detect(token_id & slot, std::initializer_list<const char *> texts);
    void detect_special_by_text();
    void mark_unused();
    void collect_eog();
    void set_attrs_by_name();
    void make_control(token_id id) { V.tokens_[id].attr |= kAttrControl; }

    const gguf_context * g_;
    Meta meta_;
    std::unique_ptr<Vocab> v_ = std::make_unique<Vocab>();
    Vocab & V = *v_;
    size_t n_tokens = 0;
};

std::unique_ptr<Vocab> load_vocab(const gguf_context * gguf) {
    if (!gguf) return nullptr;
    std::string model;
    if (!Meta(gguf).get_str("tokenizer.ggml.model", model)) return nullptr;
    if (model == "none" || model == "no_vocab") return nullptr;
    return VocabLoader(gguf).load(model);
}

std::unique_ptr<Vocab> VocabLoader::load(const std::string & model) {
    read_model(model);
    read_tokens();
    map_bytes();
    if (V.type == Vocab::Type::SPM) V.prepare_spm();
    if (V.type == Vocab::Type::BPE) {
        const MergeParts parts = read_merge_parts();
        add_extra_symbols(parts);
        build_merge_table(parts);
    }
    find_newline();
    read_special_ids();
    detect_special_by_text();
    mark_unused();
    collect_eog();
    for (token_id & b : V.byte_tokens_) {
        if (b == kNoToken) b = V.unk;   // llama.cpp throws there
    }
    V.build_pieces();
    V.build_special_matcher();
    set_attrs_by_name();
    return std::move(v_);
}

// tokenizer.ggml.model and .pre: the tokenizer type, llama.cpp's defaults for it (special ids,
// BOS, the space prefix), the BPE pre-tokenizer.
void VocabLoader::read_model(const std::string & model) {
    V.model_name = model;
    meta_.get_str("tokenizer.ggml.pre", V.pre);

    if (model == "llama") {
        V.type = Vocab::Type::SPM;
        V.bos = 1;
        V.eos = 2;
        V.unk = 0;
        V.add_space_prefix = true;
        V.add_bos = true;
        V.add_eos = false;
    } else if (model == "gpt2") {
        V.type = Vocab::Type::BPE;
        V.bos = 11;
        V.eos = 11;
        V.unk = kNoToken;
        V.add_space_prefix = false;
        const std::string pre = V.pre.empty() ? "default" : V.pre;
        V.pre_tok_ = PreTokenizer::create(pre);
        for (const char * p : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                               "jina-v5-nano"}) {
            if (pre == p) V.add_bos = true;   // llama.cpp's default for Llama 3; the GGUF key decides
        }
        if (pre == "glm4" || pre == "chatglm-bpe") {
            V.bos = kNoToken;
        }
    } else if (model == "bert" || model == "t5" || model == "rwkv" || model == "plamo2" || model == "gemma4" ||
               model == "hybriddna" || model == "whitespace") {
        fail(PSL_ERR_UNSUPPORTED, "tokenizer model '%s' (tokenizer.ggml.model) is not supported; supported: llama, gpt2",
             model.c_str());
    } else {
        fail(PSL_ERR_UNSUPPORTED, "unknown tokenizer model '%s' (tokenizer.ggml.model); supported: llama, gpt2",
             model.c_str());
    }
    meta_.get_bool("tokenizer.ggml.add_space_prefix", V.add_space_prefix);
}

// The token table: texts (an empty one gets a placeholder), scores and GGUF types as attributes.
void VocabLoader::read_tokens() {
    const int64_t ki = meta_.array("tokenizer.ggml.tokens", {GGUF_TYPE_STRING});
    if (ki < 0) fail(PSL_ERR_FORMAT, "the tokenizer has no tokenizer.ggml.tokens");
    n_tokens = gguf_get_arr_n(g_, ki);
    if (n_tokens == 0) fail(PSL_ERR_FORMAT, "tokenizer.ggml.tokens is empty");
    if (n_tokens >= (size_t) INT32_MAX / 2) fail(PSL_ERR_FORMAT, "tokenizer.ggml.tokens is too long (%zu)", n_tokens);

    gguf_type score_type = GGUF_TYPE_FLOAT32;
    const int64_t si = meta_.array("tokenizer.ggml.scores", {GGUF_TYPE_FLOAT32, GGUF_TYPE_INT32}, &score_type);
    if (si >= 0 && gguf_get_arr_n(g_, si) < n_tokens) {
        fail(PSL_ERR_FORMAT, "tokenizer.ggml.scores has %zu entries for %zu tokens", gguf_get_arr_n(g_, si), n_tokens);
    }
    const int64_t ti = meta_.array("tokenizer.ggml.token_type", {GGUF_TYPE_INT32});
    if (ti >= 0 && gguf_get_arr_n(g_, ti) < n_tokens) {
        fail(PSL_ERR_FORMAT, "tokenizer.ggml.token_type has %zu entries for %zu tokens", gguf_get_arr_n(g_, ti), n_tokens);
    }
    const void * scores = si >= 0 ? gguf_get_arr_data(g_, si) : nullptr;
    const int32_t * types = ti >= 0 ? (const int32_t *) gguf_get_arr_data(g_, ti) : nullptr;

    V.tokens_.resize(n_tokens);
    {
        std::vector<std::string> texts(n_tokens);
        size_t total = 0;
        for (size_t i = 0; i < n_tokens; ++i) {
            texts[i] = gguf_get_arr_str(g_, ki, i);
            if (texts[i].empty()) texts[i] = "[EMPTY_" + std::to_string(i) + "]";
            total += texts[i].size();
        }
        if (total >= UINT32_MAX) fail(PSL_ERR_FORMAT, "tokenizer.ggml.tokens is too large");
        V.text_.reserve(total);
        for (size_t i = 0; i < n_tokens; ++i) {
            auto & t = V.tokens_[i];
            t.text_off = (uint32_t) V.text_.size();
            t.text_len = (uint32_t) texts[i].size();
            V.text_ += texts[i];
            if (scores) {
                t.score = score_type == GGUF_TYPE_FLOAT32 ? ((const float *) scores)[i] : (float) ((const int32_t *) scores)[i];
            }
            t.gguf_type = types ? types[i] : 1;
            switch (t.gguf_type) {
                case 1: t.attr = kAttrNormal; break;
                case 2: t.attr = kAttrUnknown; break;
                case 3: t.attr = kAttrControl; break;
                case 4: t.attr = kAttrUserDefined; break;
                case 5: t.attr = kAttrUnused; break;
                case 6: t.attr = kAttrByte; break;
                default: t.attr = kAttrUndefined; break;
            }
        }
        std::vector<std::string_view> keys(n_tokens);
        for (size_t i = 0; i < n_tokens; ++i) keys[i] = V.text((token_id) i);
        V.token_map_.build(std::move(keys));   // a repeated text maps to its first id
    }
}

// Byte tokens (SPM): <0xXX>, else the byte itself as a token.
void VocabLoader::map_bytes() {
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        snprintf(buf, sizeof(buf), "<0x%02X>", b);
        token_id id = V.find_token(buf);
        if (id < 0) {
            const char c = (char) b;
            id = V.find_token(std::string_view(&c, 1));
        }
        V.byte_tokens_[b] = id;
    }
}

// BPE: tokenizer.ggml.merges, each split in two.
VocabLoader::MergeParts VocabLoader::read_merge_parts() const {
    const int64_t mi = meta_.array("tokenizer.ggml.merges", {GGUF_TYPE_STRING});
    if (mi < 0) fail(PSL_ERR_FORMAT, "the BPE tokenizer has no tokenizer.ggml.merges");
    const size_t n_merges = gguf_get_arr_n(g_, mi);
    // split "left right" at the first space after the first byte, as llama.cpp does
    MergeParts parts;
    parts.reserve(n_merges);
    for (size_t i = 0; i < n_merges; ++i) {
        const std::string word = gguf_get_arr_str(g_, mi, i);
        const size_t pos = word.find(' ', 1);
        if (pos == std::string::npos) {
            parts.push_back({"", ""});
        } else {
            parts.push_back({word.substr(0, pos), word.substr(pos + 1)});
        }
    }
    return parts;
}

// BPE: the strings of the merges (and the byte characters) that are not tokens get symbol ids
// past the vocabulary.
void VocabLoader::add_extra_symbols(const MergeParts & parts) {
    std::vector<std::string> extras;
    {
        StringIdMap seen;
        std::vector<std::unique_ptr<std::string>> owned;
        auto note = [&](const std::string & s) {
            if (s.empty() || V.find_token(s) >= 0) return;
            owned.emplace_back(new std::string(s));
            if (seen.insert(*owned.back()) == (int32_t) extras.size()) {
                extras.push_back(s);
            }
        };
        for (const auto & p : parts) {
            if (p[0].empty() || p[1].empty()) continue;
            note(p[0]);
            note(p[1]);
            note(p[0] + p[1]);
        }
        for (int b = 0; b < 256; ++b) {
            std::string s;
            unicode::append_utf8(s, unicode::gpt2_byte_to_cpt((uint8_t) b));
            note(s);
        }
    }
    V.extra_symbols_ = std::move(extras);
    {
        std::vector<std::string_view> keys;
        keys.reserve(V.extra_symbols_.size());
        for (const auto & s : V.extra_symbols_) keys.push_back(s);
        V.extra_map_.build(std::move(keys));
    }
}

// BPE: the merge table, keyed by (left symbol, right symbol), with each merge's rank and result;
// the symbol of each byte's character.
void VocabLoader::build_merge_table(const MergeParts & parts) {
    const size_t n_merges = parts.size();
    size_t cap = 16;
    while (cap < n_merges * 2) cap <<= 1;
    V.merge_keys_.assign(cap, ~uint64_t(0));
    V.merge_values_.assign(cap, Vocab::MergeValue{-1, -1});
    V.merge_mask_ = cap - 1;
    for (size_t i = 0; i < n_merges; ++i) {
        const auto & p = parts[i];
        if (p[0].empty() || p[1].empty()) continue;
        const int32_t a = symbol(p[0]), b = symbol(p[1]), r = symbol(p[0] + p[1]);
        const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
        uint64_t h = key * 0x9E3779B97F4A7C15ull;
        size_t j = (h >> 20) & V.merge_mask_;
        while (V.merge_keys_[j] != ~uint64_t(0) && V.merge_keys_[j] != key) j = (j + 1) & V.merge_mask_;
        if (V.merge_keys_[j] == key) continue;   // a repeated merge keeps its first rank
        V.merge_keys_[j] = key;
        V.merge_values_[j] = Vocab::MergeValue{(int32_t) i, r};
    }
    for (int b = 0; b < 256; ++b) {
        std::string s;
        unicode::append_utf8(s, unicode::gpt2_byte_to_cpt((uint8_t) b));
        V.byte_symbol_[b] = symbol(s);
    }
}

int32_t VocabLoader::symbol(const std::string & s) const {
    const token_id id = V.find_token(s);
    if (id >= 0) return id;
    const int32_t e = V.extra_map_.find(s);
    return e < 0 ? -1 : (int32_t) n_tokens + e;
}

// The newline token (llama.cpp: the pad id, still unset here, when SPM has no byte for it).
void VocabLoader::find_newline() {
    if (V.type == Vocab::Type::SPM) {
        V.nl = V.byte_tokens_['\n'];
    } else {
        std::vector<token_id> ids;
        V.tokenize_bpe("\n", ids);
        V.nl = ids.empty() ? kNoToken : ids[0];
    }
}

// Special token ids from the file (out-of-range ones keep the defaults), and whether to add
// BOS / EOS.
void VocabLoader::read_special_ids() {
    struct Key {
        const char * name;
        token_id * id;
    };
    const Key keys[] = {
        {"tokenizer.ggml.bos_token_id", &V.bos},         {"tokenizer.ggml.eos_token_id", &V.eos},
        {"tokenizer.ggml.eot_token_id", &V.eot},         {"tokenizer.ggml.eom_token_id", &V.eom},
        {"tokenizer.ggml.unknown_token_id", &V.unk},     {"tokenizer.ggml.seperator_token_id", &V.sep},
        {"tokenizer.ggml.padding_token_id", &V.pad},     {"tokenizer.ggml.mask_token_id", &V.mask},
        {"tokenizer.ggml.fim_pre_token_id", &V.fim_pre}, {"tokenizer.ggml.fim_suf_token_id", &V.fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &V.fim_mid}, {"tokenizer.ggml.fim_pad_token_id", &V.fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &V.fim_rep}, {"tokenizer.ggml.fim_sep_token_id", &V.fim_sep},
        {"tokenizer.ggml.prefix_token_id", &V.fim_pre},  {"tokenizer.ggml.suffix_token_id", &V.fim_suf},
        {"tokenizer.ggml.middle_token_id", &V.fim_mid},
    };
    for (const Key & k : keys) {
        if (*k.id >= (token_id) n_tokens) *k.id = kNoToken;   // a default past the vocabulary
        int64_t val;
        if (meta_.get_int(k.name, val) && val >= 0 && val < (int64_t) n_tokens) {
            *k.id = (token_id) val;   // an out-of-range value keeps the default, as in llama.cpp
        }
    }
    meta_.get_bool("tokenizer.ggml.add_bos_token", V.add_bos);
    meta_.get_bool("tokenizer.ggml.add_eos_token", V.add_eos);
    if (V.add_bos && V.bos == kNoToken) {
        fail(PSL_ERR_FORMAT, "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
    }
    if (V.add_eos && V.eos == kNoToken) {
        fail(PSL_ERR_FORMAT, "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
    }
}

void VocabLoader::detect(token_id & slot, std::initializer_list<const char *> texts) {
    if (slot != kNoToken) return;
    for (const char * t : texts) {
        const token_id id = V.find_token(t);
        if (id >= 0) {
            slot = id;
            make_control(id);
            return;
        }
    }
}

// Special tokens the file does not name, recognised by their text (llama.cpp's workaround for
// older conversions).
void VocabLoader::detect_special_by_text() {
    detect(V.eot, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
                   "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                   "<end_of_utterance>"});
    detect(V.eom, {"<|eom_id|>"});
    detect(V.fim_pre, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
                       "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"});
    detect(V.fim_suf, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
                       "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"});
    detect(V.fim_mid, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
                       "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"});
    detect(V.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
    detect(V.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
    detect(V.fim_sep, {"<|file_sep|>"});
}

// Control tokens named "unused..." are unused.
void VocabLoader::mark_unused() {
    for (size_t i = 0; i < n_tokens; ++i) {
        auto & t = V.tokens_[i];
        if ((t.attr & kAttrControl) && V.text((token_id) i).find("unused") != std::string_view::npos) {
            t.attr |= kAttrUnused;
        }
    }
}

// The end-of-generation tokens: the named ones and those known by their text, less the
// exceptions of some tokenizers.
void VocabLoader::collect_eog() {
    std::vector<token_id> eog;
    for (token_id id : {V.fim_pad, V.fim_rep, V.fim_sep}) {
        if (id != kNoToken) eog.push_back(id);
    }
    for (const char * t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                           "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                           "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                           "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["}) {
        const token_id id = V.find_token(t);
        if (id >= 0) {
            eog.push_back(id);
            make_control(id);
        }
    }
    // gpt-oss: these are always rendered
    for (const char * t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
        const token_id id = V.find_token(t);
        if (id >= 0) V.tokens_[id].attr = kAttrUserDefined;
    }
    for (token_id id : {V.eos, V.eot, V.eom}) {
        if (id != kNoToken) eog.push_back(id);
    }
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
    auto has = [&](const char * t, token_id * which = nullptr) {
        for (token_id id : eog) {
            if (V.text(id) == t) {
                if (which) *which = id;
                return true;
            }
        }
        return false;
    };
    token_id end_id = kNoToken, s_id = kNoToken;
    // o200k_harmony / solar-open: "<|end|>" is not the end of generation there
    if (has("<|end|>", &end_id) && ((has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")))) {
        eog.erase(std::find(eog.begin(), eog.end(), end_id));
        V.tokens_[end_id].attr = kAttrUserDefined;
    }
    // gemma4 / paddleocr: "</s>" is not either
    if (has("<|tool_response>") && has("</s>", &s_id)) {
        eog.erase(std::find(eog.begin(), eog.end(), s_id));
        V.tokens_[s_id].attr = kAttrNormal;
    }
    V.eog_ = std::move(eog);
}

// Attributes set by model name (llama.cpp: "Handle per token attributes").
void VocabLoader::set_attrs_by_name() {
    std::string name, arch;
    meta_.get_str("general.name", name);
    meta_.get_str("general.architecture", arch);
    for (char & c : name) c = (char) std::tolower((unsigned char) c);
    auto set_attr = [&](const char * text, uint32_t a, bool on) {
        const token_id id = V.find_token(text);
        if (id < 0) return;
        if (on) V.tokens_[id].attr |= a; else V.tokens_[id].attr &= ~a;
    };
    const std::string & pre = V.pre;
    if (contains_any(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) || contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
        set_attr("<mask>", kAttrLstrip, true);
    } else if (contains_any(name, {"phi-3", "phi3"})) {
        for (size_t i = 0; i < n_tokens; ++i) {
            if (V.tokens_[i].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) V.tokens_[i].attr |= kAttrRstrip;
        }
        set_attr("</s>", kAttrRstrip, true);
        for (const char * t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
    } else if (contains_any(name, {"modern-bert"})) {
        set_attr("[MASK]", kAttrLstrip, true);
    }
}

}  // namespace psl
