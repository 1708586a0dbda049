// SentencePiece-style tokenization (tokenizer.ggml.model = "llama"): the text, spaces escaped as
// U+2581, starts as one symbol per UTF-8 character; the adjacent pair whose concatenation is the
// vocabulary token of highest score is merged first (ties: the leftmost), until no pair is a
// token. Symbols that are not tokens fall back to their bytes as <0xXX> tokens. This is
// llama.cpp's llm_tokenizer_spm_session, step for step.
#include "vocab.h"

#include "unicode.h"

#include <algorithm>

namespace psl {

namespace {

struct SpmSymbol {
    uint32_t off;
    uint32_t len;     // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
};

struct SpmBigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t size;
};

// priority_queue puts the "largest" first: higher score, then smaller left index
struct SpmOrder {
    bool operator()(const SpmBigram & l, const SpmBigram & r) const {
        return l.score < r.score || (l.score == r.score && l.left > r.left);
    }
};

}  // namespace

namespace {

// Merges one segment; appends its ids. byte_tokens: the fallback token of each byte.
void spm_segment(const Vocab & v, const StringIdMap & map, std::string_view text, std::vector<SpmSymbol> & symbols,
                 std::vector<SpmBigram> & heap, std::vector<token_id> & out, const token_id * byte_tokens) {
    symbols.clear();
    heap.clear();
    const uint32_t n = (uint32_t) text.size();
    for (uint32_t off = 0; off < n;) {
        const uint32_t len = std::min<uint32_t>((uint32_t) unicode::utf8_len((uint8_t) text[off]), n - off);
        const int32_t idx = (int32_t) symbols.size();
        symbols.push_back(SpmSymbol{off, len, idx - 1, off + len == n ? -1 : idx + 1});
        off += len;
    }

    auto try_add = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const SpmSymbol & l = symbols[left];
        const uint32_t size = l.len + symbols[right].len;
        const token_id id = map.find(text.substr(l.off, size));
        if (id < 0) return;
        heap.push_back(SpmBigram{v.data(id).score, left, right, size});
        std::push_heap(heap.begin(), heap.end(), SpmOrder{});
    };

    for (int32_t i = 1; i < (int32_t) symbols.size(); ++i) try_add(i - 1, i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), SpmOrder{});
        const SpmBigram b = heap.back();
        heap.pop_back();
        SpmSymbol & l = symbols[b.left];
        SpmSymbol & r = symbols[b.right];
        if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;   // outdated
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) symbols[r.next].prev = b.left;
        try_add(l.prev, b.left);
        try_add(b.left, l.next);
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
    thread_local std::vector<SpmBigram> heap;
    TokenCache & cache = thread_cache();

    auto segment = [&](std::string_view seg) {
        const uint64_t h = hash_bytes(seg.data(), seg.size());
        if (seg.size() <= TokenCache::kMaxKey && cache.find(seg, h, out)) return;
        const size_t before = out.size();
        spm_segment(*this, token_map_, seg, symbols, heap, out, byte_tokens_);
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
}

}  // namespace psl
