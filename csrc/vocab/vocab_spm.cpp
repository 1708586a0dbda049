// SentencePiece-style tokenization (tokenizer.ggml.model = "llama"): the text, spaces escaped as
// U+2581, starts as one symbol per UTF-8 character; the adjacent pair whose concatenation is the
// vocabulary token of highest score is merged first (ties: the leftmost), until no pair is a
// token. Symbols that are not tokens fall back to their bytes as <0xXX> tokens. The merges and
// their order are those of llama.cpp's llm_tokenizer_spm_session (with a queue that stays fast on
// long texts: merge_queue.h).
#include "vocab/vocab.h"

#include "vocab/merge_queue.h"
#include "vocab/unicode.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace psl {

namespace {

constexpr uint32_t kNoPair = UINT32_MAX;

struct SpmSymbol {
    uint32_t off;
    uint32_t len;        // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
    uint32_t pair_rank;  // score rank of the token this symbol and the next make; kNoPair: none
};

// Merges one segment; appends its ids. rank: the score rank of each token (0: the highest
// score). byte_tokens: the fallback token of each byte. Queue entries are (rank, left symbol);
// one is current when the symbol still has that pair rank (an entry for an earlier pair of the
// same rank at the same place stands for the current one: same key, same merge).
void spm_segment(const StringIdMap & map, const uint32_t * rank, std::string_view text, std::vector<SpmSymbol> & symbols,
                 MergeQueue & queue, std::vector<token_id> & out, const token_id * byte_tokens) {
    symbols.clear();
    const uint32_t n = (uint32_t) text.size();
    for (uint32_t off = 0; off < n;) {
        const uint32_t len = std::min<uint32_t>((uint32_t) unicode::utf8_len((uint8_t) text[off]), n - off);
        const int32_t idx = (int32_t) symbols.size();
        symbols.push_back(SpmSymbol{off, len, idx - 1, off + len == n ? -1 : idx + 1, kNoPair});
        off += len;
    }
    queue.reset(symbols.size());

    auto try_add = [&](int32_t left, int32_t right) {
        if (left < 0) return;
        SpmSymbol & l = symbols[left];
        const token_id id = right < 0 ? kNoToken : map.find(text.substr(l.off, l.len + symbols[right].len));
        l.pair_rank = id < 0 ? kNoPair : rank[id];
        if (id >= 0) queue.push(rank[id], (uint32_t) left);
    };

    for (int32_t i = 1; i < (int32_t) symbols.size(); ++i) try_add(i - 1, i);

    uint32_t r_pop, pos;
    while (queue.pop(r_pop, pos)) {
        SpmSymbol & l = symbols[pos];
        if (l.len == 0 || l.pair_rank != r_pop) continue;   // outdated
        SpmSymbol & r = symbols[l.next];
        l.len += r.len;
        r.len = 0;
        r.pair_rank = kNoPair;
        l.next = r.next;
        if (l.next >= 0) symbols[l.next].prev = (int32_t) pos;
        try_add(l.prev, (int32_t) pos);
        try_add((int32_t) pos, l.next);
    }

    for (int32_t i = 0; i != -1; i = symbols[i].next) {
        const SpmSymbol & s = symbols[i];
        const token_id id = map.find(text.substr(s.off, s.len));
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        // not a token: its bytes (llama.cpp's resegment; its reverse-merge table can only hold
        // texts that are tokens, so for a non-token symbol it always ends here)
        for (uint32_t k = 0; k < s.len; ++k) {
            const token_id bt = byte_tokens[(uint8_t) text[s.off + k]];
            if (bt != kNoToken) out.push_back(bt);
        }
    }
}

bool is_space_mark(std::string_view t, size_t i) {
    return i + 3 <= t.size() && t[i] == '\xE2' && t[i + 1] == '\x96' && t[i + 2] == '\x81';
}

}  // namespace

// The merges never cross a point where no token could: before a U+2581 that follows a character
// whose last byte never precedes a U+2581 inside a token (for Gemma: any but '>' and 0x81). The
// text is cut into segments there, each merged on its own (the same result: no pair across a cut
// is ever a token, and the merge order inside a segment does not depend on the others), and the
// result of each segment is cached.
void Vocab::tokenize_spm(std::string_view text, std::vector<token_id> & out) const {
    if (text.empty()) return;
    thread_local std::vector<SpmSymbol> symbols;
    thread_local MergeQueue queue;
    TokenCache & cache = thread_cache();

    auto segment = [&](std::string_view seg) {
        const uint64_t h = hash_bytes(seg.data(), seg.size());
        if (seg.size() <= TokenCache::kMaxKey && cache.find(seg, h, out)) return;
        const size_t before = out.size();
        spm_segment(token_map_, spm_rank_.data(), seg, symbols, queue, out, byte_tokens_);
        cache.insert(seg, h, out.data() + before, out.size() - before);
    };

    const size_t n = text.size();
    size_t seg_start = 0;
    bool prev_is_mark = false;
    for (size_t off = 0; off < n;) {
        const size_t len = std::min<size_t>(unicode::utf8_len((uint8_t) text[off]), n - off);
        const bool mark = len == 3 && is_space_mark(text, off);
        if (mark && off > seg_start && !prev_is_mark && spm_split_before_space_[(uint8_t) text[off - 1]]) {
            segment(text.substr(seg_start, off - seg_start));
            seg_start = off;
        }
        prev_is_mark = mark;
        off += len;
    }
    segment(text.substr(seg_start));
    trim_buffer(symbols);
}

// Load-time tables: the bytes after which a U+2581 may be inside a token (see tokenize_spm), and
// the score ranks. llama.cpp compares scores as floats, so equal scores (0.0 and -0.0 too) share a
// rank and are ordered by position; NaN, which no order can place the way llama.cpp's heap would,
// ranks last.
void Vocab::prepare_spm() {
    std::fill(std::begin(spm_split_before_space_), std::end(spm_split_before_space_), true);
    const std::string_view mark = "\xE2\x96\x81";
    for (token_id i = 0; i < n_tokens(); ++i) {
        const std::string_view t = text(i);
        for (size_t k = t.find(mark, 1); k != std::string_view::npos; k = t.find(mark, k + 1)) {
            spm_split_before_space_[(uint8_t) t[k - 1]] = false;
        }
    }
    auto key = [&](token_id id) { return std::isnan(tokens_[id].score) ? -INFINITY : tokens_[id].score; };
    std::vector<token_id> order((size_t) n_tokens());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](token_id a, token_id b) { return key(a) > key(b); });
    spm_rank_.assign(order.size(), 0);
    uint32_t r = 0;
    for (size_t k = 0; k < order.size(); ++k) {
        if (k > 0 && key(order[k]) != key(order[k - 1])) ++r;
        spm_rank_[order[k]] = r;
    }
}

}  // namespace psl
