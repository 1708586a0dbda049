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

token_id Vocab::byte_token_spm(uint8_t byte) const {
    // llama.cpp throws when neither <0xXX> nor the single byte is a token; we use unk if any
    return byte_tokens_[byte] != kNoToken ? byte_tokens_[byte] : unk;
}

void Vocab::tokenize_spm(std::string_view text, std::vector<token_id> & out) const {
    if (text.empty()) return;
    thread_local std::vector<SpmSymbol> symbols;
    thread_local std::vector<SpmBigram> heap;   // a max-heap under SpmOrder
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
        const token_id id = token_map_.find(text.substr(l.off, size));
        if (id < 0) return;
        heap.push_back(SpmBigram{tokens_[id].score, left, right, size});
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
        const token_id id = token_map_.find(text.substr(s.off, s.len));
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        // not a token: its bytes (llama.cpp's resegment; its reverse-merge table can only hold
        // texts that are tokens, so for a non-token symbol it always ends here)
        for (uint32_t k = 0; k < s.len; ++k) {
            const token_id bt = byte_token_spm((uint8_t) text[s.off + k]);
            if (bt != kNoToken) out.push_back(bt);
        }
    }
}

}  // namespace psl
