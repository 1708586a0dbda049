// BPE tokenization (tokenizer.ggml.model = "gpt2"): pre-tokenization into words by the
// expressions llama.cpp uses for each tokenizer.ggml.pre, GPT-2's byte-level alphabet, and
// rank-ordered merges (lowest rank first, ties: the leftmost pair).
//
// The pre-tokenizers are not run through a regex engine: each expression llama.cpp uses is one of
// a few shapes, implemented here with the exact matching semantics of the regex (leftmost match,
// alternatives tried in order, backtracking where it changes the result) over the Unicode
// properties of unicode_data.cpp. llama.cpp applies the expressions in sequence, each inside the
// pieces the previous one left (its matches and the text between them), and so do we.
#include "vocab/vocab.h"

#include "error.h"
#include "vocab/merge_queue.h"
#include "vocab/unicode.h"

#include <algorithm>
#include <functional>
#include <map>

namespace psl {

namespace {

using unicode::group;
using unicode::is_whitespace;

// ---- character classes -------------------------------------------------------------------------

struct CharClass {
    uint8_t groups = 0;                                   // \p{..} groups (unicode::Group bits)
    bool whitespace = false;                              // \s
    uint32_t ascii[4] = {0, 0, 0, 0};                     // explicit ASCII characters
    std::vector<std::pair<uint32_t, uint32_t>> ranges;    // explicit code point ranges (inclusive)
    bool negate = false;

    CharClass & add(const char * chars) {
        for (const char * p = chars; *p; ++p) {
            const uint8_t c = (uint8_t) *p;
            ascii[c >> 5] |= 1u << (c & 31);
        }
        return *this;
    }
    CharClass & range(uint32_t a, uint32_t b) {
        ranges.emplace_back(a, b);
        return *this;
    }
    bool test(uint32_t cpt, uint8_t props) const {
        bool in = (group(props) & groups) != 0 || (whitespace && is_whitespace(props));
        if (!in && cpt < 128) in = (ascii[cpt >> 5] >> (cpt & 31)) & 1;
        if (!in) {
            for (const auto & r : ranges) {
                if (cpt >= r.first && cpt <= r.second) {
                    in = true;
                    break;
                }
            }
        }
        return in != negate;
    }
};

CharClass cls_groups(uint8_t g) {
    CharClass c;
    c.groups = g;
    return c;
}

// ---- stages ------------------------------------------------------------------------------------

// Text as code points with their properties; a stage refines a segmentation of [0, n) given as
// piece end indices.
struct Cpts {
    std::vector<uint32_t> cpt;
    std::vector<uint8_t> props;
};

class Stage {
public:
    virtual ~Stage() = default;
    // Appends to `ends` the pieces of [b, e): matches and the gaps between them, in order.
    virtual void split(const Cpts & t, uint32_t b, uint32_t e, std::vector<uint32_t> & ends) const = 0;
};

// Emits matches and gaps: `match(pos)` returns the end of the match starting at pos, or pos
// when there is none.
template <typename F>
void emit_matches(uint32_t b, uint32_t e, std::vector<uint32_t> & ends, F && match) {
    uint32_t gap_start = b;
    uint32_t pos = b;
    while (pos < e) {
        const uint32_t m = match(pos);
        if (m == pos) {
            ++pos;
            continue;
        }
        if (pos > gap_start) ends.push_back(pos);
        ends.push_back(m);
        pos = gap_start = m;
    }
    if (e > gap_start) ends.push_back(e);
}

// P?C  /  P?C+  /  C{1,k}  /  C{k}: runs of one character class, with an optional one-character
// prefix class (only with +).
class ClassRuns : public Stage {
public:
    enum Mode { Single, Run, Chunk, Exact };
    ClassRuns(CharClass c, Mode mode, uint32_t k = 0) : c_(std::move(c)), mode_(mode), k_(k) {}
    ClassRuns(CharClass prefix, CharClass c) : c_(std::move(c)), prefix_(std::move(prefix)), has_prefix_(true), mode_(Run) {}

    void split(const Cpts & t, uint32_t b, uint32_t e, std::vector<uint32_t> & ends) const override {
        auto in = [&](uint32_t i) { return i < e && c_.test(t.cpt[i], t.props[i]); };
        // the end of the run from i, looking no further than i + limit (the bounded modes must
        // not scan a long run once per chunk: a megabyte of digits would be quadratic)
        auto run_end = [&](uint32_t i, uint32_t limit = UINT32_MAX) {
            const uint32_t stop = limit < e - i ? i + limit : e;
            while (i < stop && c_.test(t.cpt[i], t.props[i])) ++i;
            return i;
        };
        emit_matches(b, e, ends, [&](uint32_t pos) -> uint32_t {
            if (has_prefix_ && prefix_.test(t.cpt[pos], t.props[pos]) && in(pos + 1)) {
                return run_end(pos + 1);
            }
            if (!in(pos)) return pos;
            switch (mode_) {
                case Single: return pos + 1;
                case Run: return run_end(pos);
                case Chunk: return run_end(pos, k_);
                case Exact: return run_end(pos, k_) - pos == k_ ? pos + k_ : pos;
            }
            return pos;
        });
    }

private:
    CharClass c_;
    CharClass prefix_;
    bool has_prefix_ = false;
    Mode mode_;
    uint32_t k_ = 0;
};

// The GPT-2 / Llama-3 family of expressions:
//   contractions | letters | numbers | punctuation | newlines | \s+(?!\S) | \s+
// GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Llama-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
struct WordConfig {
    enum Contractions { None, CaseSensitive, CaseInsensitive } contractions = CaseSensitive;
    bool letter_prefix_any = false;       // [^\r\n\p{L}\p{N}]?\p{L}+ instead of ' ?\p{L}+'
    bool number_space_prefix = true;      // ' ?\p{N}+' (then number_max is 0)
    uint32_t number_max = 0;              // \p{N}{1,k}; 0: unbounded
    bool punct_newlines = false;          // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    bool newline_run = false;             // \s*[\r\n]+ (or \s*[\r\n]: same matches)
    bool letter_marks = false;            // [\p{L}\p{M}]+ for letters, marks not punctuation (qwen35)
};

class WordSplit : public Stage {
public:
    explicit WordSplit(WordConfig cfg) : cfg_(cfg) {}

    void split(const Cpts & t, uint32_t b, uint32_t e, std::vector<uint32_t> & ends) const override {
        const uint32_t * cp = t.cpt.data();
        const uint8_t * pr = t.props.data();
        const uint8_t word_groups = unicode::kGroupLetter | (cfg_.letter_marks ? unicode::kGroupMark : 0);
        auto letter = [&](uint32_t i) { return i < e && (group(pr[i]) & unicode::kGroupLetter); };
        auto word = [&](uint32_t i) { return i < e && (group(pr[i]) & word_groups); };
        auto number = [&](uint32_t i) { return i < e && (group(pr[i]) & unicode::kGroupNumber); };
        auto space = [&](uint32_t i) { return i < e && is_whitespace(pr[i]); };
        // [^\s\p{L}\p{N}]
        auto other = [&](uint32_t i) {
            return i < e && !is_whitespace(pr[i]) && !(group(pr[i]) & (word_groups | unicode::kGroupNumber));
        };
        auto lower = [&](uint32_t i) -> uint32_t {
            if (i >= e) return 0;
            const uint32_t c = cp[i];
            if (cfg_.contractions == WordConfig::CaseInsensitive && c >= 'A' && c <= 'Z') return c + 32;
            return c;
        };
        auto crlf = [&](uint32_t i) { return i < e && (cp[i] == '\r' || cp[i] == '\n'); };

        emit_matches(b, e, ends, [&](uint32_t pos) -> uint32_t {
            const uint32_t c = cp[pos];
            // contractions
            if (cfg_.contractions != WordConfig::None && c == '\'' && pos + 1 < e) {
                const uint32_t c1 = lower(pos + 1);
                if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
                if (pos + 2 < e) {
                    const uint32_t c2 = lower(pos + 2);
                    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return pos + 3;
                }
            }
            // letters
            {
                uint32_t start = pos;
                bool ok = false;
                if (cfg_.letter_prefix_any) {
                    if (!crlf(pos) && !letter(pos) && !number(pos) && word(pos + 1)) {
                        start = pos + 1;
                        ok = true;
                    } else if (word(pos)) {
                        ok = true;
                    }
                } else {
                    if (c == ' ' && word(pos + 1)) {
                        start = pos + 1;
                        ok = true;
                    } else if (word(pos)) {
                        ok = true;
                    }
                }
                if (ok) {
                    while (word(start)) ++start;
                    return start;
                }
            }
            // numbers
            if (cfg_.number_space_prefix) {
                uint32_t start = pos;
                if (c == ' ' && number(pos + 1)) start = pos + 1;
                if (number(start)) {
                    while (number(start)) ++start;
                    return start;
                }
            } else if (number(pos)) {
                uint32_t end = pos;
                while (number(end) && (cfg_.number_max == 0 || end - pos < cfg_.number_max)) ++end;
                return end;
            }
            // punctuation and the like
            {
                uint32_t start = pos;
                if (c == ' ' && other(pos + 1)) start = pos + 1;
                if (other(start)) {
                    while (other(start)) ++start;
                    if (cfg_.punct_newlines) {
                        while (crlf(start)) ++start;
                    }
                    return start;
                }
            }
            // whitespace
            if (space(pos)) {
                uint32_t end = pos;
                uint32_t last_crlf = 0;
                while (space(end)) {
                    if (crlf(end)) last_crlf = end + 1;
                    ++end;
                }
                if (cfg_.newline_run && last_crlf > 0) return last_crlf;   // \s*[\r\n]+
                if (end < e && end - pos > 1) return end - 1;              // \s+(?!\S)
                return end;                                                // \s+ (also (?!\S) at the end)
            }
            return pos;
        });
    }

private:
    WordConfig cfg_;
};

class StagedPreTokenizer : public PreTokenizer {
public:
    std::vector<std::unique_ptr<Stage>> stages;

    void split(std::string_view text, std::string & encoded, std::vector<uint32_t> & ends) const override {
        thread_local Cpts t;
        thread_local std::vector<uint32_t> byte_off;
        thread_local std::vector<uint32_t> a, bends;
        t.cpt.clear();
        t.props.clear();
        byte_off.clear();
        encoded.clear();
        size_t off = 0;
        while (off < text.size()) {
            const uint32_t c = unicode::decode_utf8(text.data(), text.size(), &off);
            byte_off.push_back((uint32_t) encoded.size());
            unicode::append_utf8(encoded, c);
            t.cpt.push_back(c);
            t.props.push_back(unicode::properties(c));
        }
        const uint32_t n = (uint32_t) t.cpt.size();
        byte_off.push_back((uint32_t) encoded.size());
        a.clear();
        if (n > 0) a.push_back(n);
        for (const auto & st : stages) {
            bends.clear();
            uint32_t start = 0;
            for (uint32_t end : a) {
                st->split(t, start, end, bends);
                start = end;
            }
            a.swap(bends);
        }
        for (uint32_t end : a) ends.push_back(byte_off[end]);
        trim_buffer(t.cpt);
        trim_buffer(t.props);
        trim_buffer(byte_off);
        trim_buffer(a);
        trim_buffer(bends);
    }
};

// ---- the pre-tokenizers by name ----------------------------------------------------------------

using unicode::kGroupLetter;
using unicode::kGroupNumber;
using unicode::kGroupPunctuation;

WordConfig gpt2_config() {
    return WordConfig{};
}

WordConfig llama3_config(uint32_t number_max) {
    WordConfig c;
    c.contractions = WordConfig::CaseInsensitive;
    c.letter_prefix_any = true;
    c.number_space_prefix = false;
    c.number_max = number_max;
    c.punct_newlines = true;
    c.newline_run = true;
    return c;
}

struct PreDef {
    std::vector<const char *> names;
    std::function<void(StagedPreTokenizer &)> build;
    bool ignore_merges = false;
};

std::unique_ptr<Stage> words(WordConfig c) { return std::make_unique<WordSplit>(c); }
std::unique_ptr<Stage> runs(CharClass c, ClassRuns::Mode m, uint32_t k = 0) {
    return std::make_unique<ClassRuns>(std::move(c), m, k);
}

const std::vector<PreDef> & pre_defs() {
    static const std::vector<PreDef> defs = [] {
        std::vector<PreDef> d;
        // "[\p{P}\$\+<=>\^~\|]+", gpt-2, "\p{N}+", "[0-9][0-9][0-9]"
        d.push_back({{"default"}, [](StagedPreTokenizer & p) {
            p.stages.push_back(runs(cls_groups(kGroupPunctuation).add("$+<=>^~|"), ClassRuns::Run));
            p.stages.push_back(words(gpt2_config()));
            p.stages.push_back(runs(cls_groups(kGroupNumber), ClassRuns::Run));
            p.stages.push_back(runs(CharClass().add("0123456789"), ClassRuns::Exact, 3));
        }});
        d.push_back({{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
                      "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
                      "granite-docling", "exaone4"},
                     [](StagedPreTokenizer & p) { p.stages.push_back(words(gpt2_config())); }});
        // "\p{N}", gpt-2
        d.push_back({{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
                     [](StagedPreTokenizer & p) {
                         p.stages.push_back(runs(cls_groups(kGroupNumber), ClassRuns::Single));
                         p.stages.push_back(words(gpt2_config()));
                     }});
        // "[\p{P}\$\+<=>\^~\|`]+", gpt-2, "[0-9][0-9][0-9]"
        d.push_back({{"falcon"}, [](StagedPreTokenizer & p) {
            p.stages.push_back(runs(cls_groups(kGroupPunctuation).add("$+<=>^~|`"), ClassRuns::Run));
            p.stages.push_back(words(gpt2_config()));
            p.stages.push_back(runs(CharClass().add("0123456789"), ClassRuns::Exact, 3));
        }});
        // Llama 3
        d.push_back({{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
                     [](StagedPreTokenizer & p) { p.stages.push_back(words(llama3_config(3))); }, true});
        d.push_back({{"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"},
                     [](StagedPreTokenizer & p) { p.stages.push_back(words(llama3_config(3))); }});
        // Qwen 2: as Llama 3 with single digits
        d.push_back({{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open", "grok-2"},
                     [](StagedPreTokenizer & p) { p.stages.push_back(words(llama3_config(1))); }});
        // Qwen 3.5: Qwen 2 with [\p{L}\p{M}]+ words (marks join letters, never punctuation)
        d.push_back({{"qwen35"}, [](StagedPreTokenizer & p) {
            WordConfig c = llama3_config(1);
            c.letter_marks = true;
            p.stages.push_back(words(c));
        }});
        // bailingmoe: \s*[\r\n] instead of \s*[\r\n]+ (the same matches)
        d.push_back({{"bailingmoe", "bailingmoe2", "llada-moe"},
                     [](StagedPreTokenizer & p) { p.stages.push_back(words(llama3_config(1))); }});
        // seed-coder: ' ?[^\s\p{L}\p{N}\r\n]+' without the trailing [\r\n]*
        d.push_back({{"seed-coder"}, [](StagedPreTokenizer & p) {
            WordConfig c = llama3_config(1);
            c.punct_newlines = false;
            p.stages.push_back(words(c));
        }});
        // ufakzeka: Qwen 2 without the contractions
        d.push_back({{"ufakzeka"}, [](StagedPreTokenizer & p) {
            WordConfig c = llama3_config(1);
            c.contractions = WordConfig::None;
            p.stages.push_back(words(c));
        }});
        // minicpm5: "\p{N}{1,3}", then Llama 3 with \p{N}+
        d.push_back({{"minicpm5"}, [](StagedPreTokenizer & p) {
            p.stages.push_back(runs(cls_groups(kGroupNumber), ClassRuns::Chunk, 3));
            p.stages.push_back(words(llama3_config(0)));
        }, true});
        // laguna: "[^\n]+|[\n]+", then Qwen 2
        d.push_back({{"laguna"}, [](StagedPreTokenizer & p) {
            p.stages.push_back(runs(CharClass().add("\n"), ClassRuns::Run));
            p.stages.push_back(words(llama3_config(1)));
        }});
        // deepseek-coder: "[\r\n]", "\s?\p{L}+", "\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\p{N}"
        d.push_back({{"deepseek-coder"}, [](StagedPreTokenizer & p) {
            CharClass ws;
            ws.whitespace = true;
            p.stages.push_back(runs(CharClass().add("\r\n"), ClassRuns::Single));
            p.stages.push_back(std::make_unique<ClassRuns>(ws, cls_groups(kGroupLetter)));
            p.stages.push_back(std::make_unique<ClassRuns>(ws, cls_groups(kGroupPunctuation)));
            p.stages.push_back(runs(CharClass().range(0x4E00, 0x9FA5).range(0x0800, 0x4E00).range(0xAC00, 0xD7FF), ClassRuns::Run));
            p.stages.push_back(runs(cls_groups(kGroupNumber), ClassRuns::Single));
        }});
        // poro-chat, bloom, gpt3-finnish: " ?[^(\s|.,!?…。，、।۔،)]+"; viking adds "\p{N}"
        auto poro = [](StagedPreTokenizer & p) {
            CharClass c;
            c.whitespace = true;
            c.add("(|.,!?)").range(0x2026, 0x2026).range(0x3002, 0x3002).range(0xFF0C, 0xFF0C).range(0x3001, 0x3001)
                .range(0x0964, 0x0964).range(0x06D4, 0x06D4).range(0x060C, 0x060C);
            c.negate = true;
            p.stages.push_back(std::make_unique<ClassRuns>(CharClass().add(" "), c));
        };
        d.push_back({{"poro-chat", "bloom", "gpt3-finnish"}, poro});
        d.push_back({{"viking"}, [poro](StagedPreTokenizer & p) {
            poro(p);
            p.stages.push_back(runs(cls_groups(kGroupNumber), ClassRuns::Single));
        }});
        return d;
    }();
    return defs;
}

// Known to llama.cpp, with expressions this file does not implement.
const char * const kKnownUnsupported[] = {
    "deepseek-llm", "deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm", "spark2_5", "youtu", "tekken", "chameleon",
    "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2", "granite-embed-multi-97m", "tiny_aya", "cohere2moe",
    "kimi-k2", "superbpe", "afmoe", "exaone-moe", "jais-2", "gemma4", "granite-embed-multi-311m",
    "sarvam-moe", "whitespace",
};

}  // namespace

std::string supported_pre_tokenizers() {
    std::string s;
    for (const auto & d : pre_defs()) {
        for (const char * n : d.names) {
            if (!s.empty()) s += ", ";
            s += n;
        }
    }
    return s;
}

std::unique_ptr<PreTokenizer> PreTokenizer::create(const std::string & pre) {
    for (const auto & d : pre_defs()) {
        for (const char * n : d.names) {
            if (pre == n) {
                auto p = std::make_unique<StagedPreTokenizer>();
                d.build(*p);
                p->ignore_merges = d.ignore_merges;
                return p;
            }
        }
    }
    // (not fail(): the list of names may pass its message buffer)
    for (const char * n : kKnownUnsupported) {
        if (pre == n) {
            throw Error(PSL_ERR_UNSUPPORTED, "pre-tokenizer '" + pre + "' (tokenizer.ggml.pre) is not supported; supported: " +
                                                 supported_pre_tokenizers());
        }
    }
    throw Error(PSL_ERR_UNSUPPORTED,
                "unknown pre-tokenizer '" + pre + "' (tokenizer.ggml.pre); supported: " + supported_pre_tokenizers());
}

// ---- BPE merges --------------------------------------------------------------------------------

const Vocab::MergeValue * Vocab::find_merge(int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return nullptr;
    const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    size_t j = ((key * 0x9E3779B97F4A7C15ull) >> 20) & merge_mask_;
    while (true) {
        const uint64_t k = merge_keys_[j];
        if (k == key) return &merge_values_[j];
        if (k == ~uint64_t(0)) return nullptr;
        j = (j + 1) & merge_mask_;
    }
}

namespace {

constexpr uint32_t kNoPair = UINT32_MAX;

}  // namespace

struct BpeSym {
    int32_t id;          // symbol id; -1 once merged into the left neighbour
    int32_t prev;
    int32_t next;
    uint32_t pair_rank;  // rank of the merge of this symbol and the next; kNoPair: none
    int32_t pair_result;
};

// Merges the symbols of one word, lowest rank first, ties the leftmost pair. Each symbol knows
// the merge it makes with its right neighbour, so a queue entry (rank, pos) is current exactly
// when the symbol at pos still has that rank (a rank names one pair).
void Vocab::merge_bpe_word(std::string_view w, std::vector<BpeSym> & syms, MergeQueue & queue) const {
    const uint32_t wn = (uint32_t) w.size();
    syms.clear();
    for (uint32_t k = 0; k < wn; ++k) {
        syms.push_back(BpeSym{byte_symbol_[(uint8_t) w[k]], (int32_t) k - 1, k + 1 == wn ? -1 : (int32_t) k + 1,
                              kNoPair, -1});
    }
    queue.reset(wn);
    auto add = [&](int32_t l, int32_t r) {
        if (l < 0) return;
        BpeSym & s = syms[l];
        const MergeValue * m = r < 0 ? nullptr : find_merge(s.id, syms[r].id);
        s.pair_rank = m ? (uint32_t) m->rank : kNoPair;
        if (!m) return;
        s.pair_result = m->result;
        queue.push((uint32_t) m->rank, (uint32_t) l);
    };
    for (int32_t k = 1; k < (int32_t) wn; ++k) add(k - 1, k);
    uint32_t rank, pos;
    while (queue.pop(rank, pos)) {
        BpeSym & l = syms[pos];
        if (l.id < 0 || l.pair_rank != rank) continue;   // outdated
        BpeSym & r = syms[l.next];
        l.id = l.pair_result;
        r.id = -1;
        r.pair_rank = kNoPair;
        l.next = r.next;
        if (l.next >= 0) syms[l.next].prev = (int32_t) pos;
        add(l.prev, (int32_t) pos);
        add((int32_t) pos, l.next);
    }
}

void Vocab::tokenize_bpe(std::string_view text, std::vector<token_id> & out) const {
    thread_local std::string encoded;
    thread_local std::vector<uint32_t> ends;
    thread_local std::vector<BpeSym> syms;
    thread_local MergeQueue queue;
    thread_local std::string mapped;
    ends.clear();
    pre_tok_->split(text, encoded, ends);

    const int32_t n_tok = n_tokens();
    TokenCache & cache = thread_cache();
    uint32_t start = 0;
    for (uint32_t end : ends) {
        const char * w = encoded.data() + start;
        const uint32_t wn = end - start;
        start = end;
        if (wn == 0) continue;
        const std::string_view word(w, wn);
        const uint64_t h = hash_bytes(w, wn);
        if (wn <= TokenCache::kMaxKey && cache.find(word, h, out)) continue;
        const size_t before = out.size();

        if (pre_tok_->ignore_merges) {
            mapped.clear();
            for (uint32_t k = 0; k < wn; ++k) unicode::append_utf8(mapped, unicode::gpt2_byte_to_cpt((uint8_t) w[k]));
            const token_id id = find_token(mapped);
            if (id >= 0) {
                out.push_back(id);
                cache.insert(word, h, out.data() + before, 1);
                continue;
            }
        }

        merge_bpe_word(word, syms, queue);
        for (int32_t k = 0; k != -1; k = syms[k].next) {
            const int32_t id = syms[k].id;
            if (id >= 0 && id < n_tok) {
                out.push_back(id);
                continue;
            }
            // not a token: each byte of the symbol's text as a one-byte token, where one exists
            // (llama.cpp's fallback; byte-level vocabularies never get here)
            const std::string_view s = id >= n_tok ? std::string_view(extra_symbols_[id - n_tok]) : std::string_view();
            for (char ch : s) {
                const token_id t = find_token(std::string_view(&ch, 1));
                if (t >= 0) out.push_back(t);
            }
        }
        cache.insert(word, h, out.data() + before, out.size() - before);
    }
    trim_buffer(encoded);
    trim_buffer(ends);
    trim_buffer(syms);
}

}  // namespace psl
