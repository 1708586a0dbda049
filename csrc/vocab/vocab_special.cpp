// Special tokens: the byte tries of the texts llama.cpp splits off before tokenizing, and the
// partition of a text at them (Vocab::partition).
#include "vocab/vocab.h"

#include <algorithm>
#include <cstring>

namespace psl {

namespace {

bool is_c_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

}  // namespace

void Vocab::Trie::build(const Vocab & v, const std::vector<token_id> & ids) {
    nodes.assign(1, TrieNode{});
    std::fill(std::begin(root_child), std::end(root_child), -1);
    for (token_id id : ids) {
        const std::string_view t = v.text(id);
        int32_t node = 0;
        for (char ch : t) {
            const uint8_t c = (uint8_t) ch;
            int32_t child = node == 0 ? root_child[c] : nodes[node].first_child;
            if (node != 0) {
                while (child >= 0 && nodes[child].byte != c) child = nodes[child].next_sibling;
            }
            if (child < 0) {
                TrieNode nn;
                nn.byte = c;
                if (node != 0) nn.next_sibling = nodes[node].first_child;
                nodes.push_back(nn);
                child = (int32_t) nodes.size() - 1;
                if (node == 0) {
                    root_child[c] = child;
                } else {
                    nodes[node].first_child = child;
                }
            }
            node = child;
        }
        if (nodes[node].token == kNoToken) nodes[node].token = id;
    }
}

void Vocab::build_special_matcher() {
    std::vector<token_id> special;
    for (token_id id = 0; id < n_tokens(); ++id) {
        if (tokens_[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special.push_back(id);
    }
    // llama.cpp tries the longest texts first (the order among equal lengths is unspecified there;
    // here it is by id)
    std::stable_sort(special.begin(), special.end(),
                     [&](token_id a, token_id b) { return tokens_[a].text_len > tokens_[b].text_len; });
    special_rank_.assign(tokens_.size(), UINT32_MAX);
    for (size_t r = 0; r < special.size(); ++r) special_rank_[special[r]] = (uint32_t) r;
    special_by_rank_ = special;
    trie_all_.build(*this, special);
    std::vector<token_id> user;
    for (token_id id : special) {
        if (!(tokens_[id].attr & (kAttrControl | kAttrUnknown))) user.push_back(id);
    }
    trie_user_.build(*this, user);
}

// Splits text at the special tokens it contains, with llama.cpp's semantics: special tokens are
// taken longest first (ties by id), each one at all its non-overlapping occurrences left to
// right inside the text not yet taken; LSTRIP / RSTRIP tokens also take the whitespace beside
// them. Without parse_special only user-defined tokens count.
//
// llama.cpp searches the text once per special token. Here one pass over the text finds every
// occurrence; occurrences that overlap nothing are taken at once, and each group of mutually
// overlapping ones is settled in llama.cpp's order (by rank, then position). Pathological text
// (a megabyte of spaces has ~30 overlapping occurrences per byte) stops collecting occurrences
// past one per byte, and falls back to one search per special token that occurs; the searches
// skip the bytes already taken, so each costs a pass over the text.
class SpecialSplitter {
public:
    SpecialSplitter(const Vocab & v, std::string_view text, bool parse_special)
        : v_(v), text_(text), n_(text.size()), trie_(parse_special ? v.trie_all_ : v.trie_user_) {}

    void run(std::vector<Vocab::Fragment> & frags) {
        occ_.clear();
        hits_.clear();
        scan();
        if (!overflow_ && occ_.empty()) {
            frags.push_back(Vocab::Fragment{kNoToken, 0, (uint32_t) n_});
            return;
        }
        taken_.assign(n_, 0);
        if (overflow_) {
            settle_by_search();
        } else if (strips_) {
            settle_by_rank(0, occ_.size());
        } else {
            settle_groups();
        }
        fragments(frags);
        trim_buffer(occ_);
        trim_buffer(hits_);
        trim_buffer(taken_);
    }

private:
    struct Occ {
        uint32_t rank;
        uint32_t pos;
        uint32_t len;
        token_id id;
    };
    struct Hit {
        uint32_t pos;
        uint32_t len;
        token_id id;
    };

    // Every occurrence of a special token, in position order (shorter first), until there are
    // more than about one per byte: then only which special tokens occur.
    void scan() {
        const size_t limit = n_ + 4096;
        const size_t max_len = v_.special_by_rank_.empty() ? 0 : v_.text(v_.special_by_rank_[0]).size();
        const auto * u = reinterpret_cast<const uint8_t *>(text_.data());
        size_t run_end = 0;   // end of the run of one byte value that holds pos
        for (size_t pos = 0; pos < n_; ++pos) {
            if (run_end <= pos) {
                run_end = pos + 1;
                while (run_end < n_ && u[run_end] == u[pos]) ++run_end;
            }
            // deep in a run of one byte, the walk from pos finds the tokens the walk from pos - 1
            // found, and past the overflow only which tokens occur counts
            if (overflow_ && pos > 0 && u[pos - 1] == u[pos] && run_end - pos > max_len) continue;
            int32_t node = trie_.root_child[u[pos]];
            for (size_t k = pos + 1; node >= 0; ++k) {
                const token_id id = trie_.nodes[node].token;
                if (id != kNoToken) note(Occ{v_.special_rank_[id], (uint32_t) pos, (uint32_t) (k - pos), id}, limit);
                if (k >= n_) break;
                int32_t child = trie_.nodes[node].first_child;
                while (child >= 0 && trie_.nodes[child].byte != u[k]) child = trie_.nodes[child].next_sibling;
                node = child;
            }
        }
    }

    void note(const Occ & o, size_t limit) {
        if (overflow_) {
            present_[o.rank] = 1;
            return;
        }
        occ_.push_back(o);
        strips_ |= (v_.attr(o.id) & (kAttrLstrip | kAttrRstrip)) != 0;
        if (occ_.size() > limit) {
            overflow_ = true;
            present_.assign(v_.special_by_rank_.size(), 0);
            for (const Occ & p : occ_) present_[p.rank] = 1;
            occ_.clear();
        }
    }

    bool is_free(size_t pos, size_t len) const {
        const auto b = taken_.begin() + (ptrdiff_t) pos;
        return std::all_of(b, b + (ptrdiff_t) len, [](uint8_t t) { return t == 0; });
    }

    // The first byte at or after `from` not yet taken (n_ if none).
    size_t next_free(size_t from) const {
        if (from >= n_) return n_;
        const void * z = std::memchr(taken_.data() + from, 0, n_ - from);
        return z ? (size_t) ((const uint8_t *) z - taken_.data()) : n_;
    }

    void take(size_t pos, size_t len, token_id id) {
        std::memset(&taken_[pos], 1, len);
        hits_.push_back(Hit{(uint32_t) pos, (uint32_t) len, id});
        const uint32_t a = v_.attr(id);
        if (a & kAttrLstrip) {
            for (size_t k = pos; k > 0 && !taken_[k - 1] && is_c_space(text_[k - 1]); --k) taken_[k - 1] = 2;
        }
        if (a & kAttrRstrip) {
            for (size_t k = pos + len; k < n_ && !taken_[k] && is_c_space(text_[k]); ++k) taken_[k] = 2;
        }
    }

    // llama.cpp's way: each special token that occurs, by rank, at each free occurrence from the
    // left. A candidate cannot start on a taken byte, so the search skips those.
    void settle_by_search() {
        for (uint32_t rank = 0; rank < present_.size(); ++rank) {
            if (!present_[rank]) continue;
            const token_id id = v_.special_by_rank_[rank];
            const std::string_view t = v_.text(id);
            for (size_t m = text_.find(t); m != std::string_view::npos; m = text_.find(t, next_free(m + 1))) {
                if (is_free(m, t.size())) take(m, t.size(), id);
            }
        }
        std::sort(hits_.begin(), hits_.end(), [](const Hit & a, const Hit & b) { return a.pos < b.pos; });
    }

    // Takes the free ones of occ_[i, j) in llama.cpp's order (rank, then position).
    void settle_by_rank(size_t i, size_t j) {
        const size_t first_hit = hits_.size();
        std::sort(occ_.begin() + i, occ_.begin() + j,
                  [](const Occ & a, const Occ & b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; });
        for (size_t k = i; k < j; ++k) {
            if (is_free(occ_[k].pos, occ_[k].len)) take(occ_[k].pos, occ_[k].len, occ_[k].id);
        }
        std::sort(hits_.begin() + first_hit, hits_.end(), [](const Hit & a, const Hit & b) { return a.pos < b.pos; });
    }

    // occ_ is in position order; settle each group of overlapping occurrences on its own.
    void settle_groups() {
        size_t i = 0;
        while (i < occ_.size()) {
            size_t j = i + 1;
            uint32_t end = occ_[i].pos + occ_[i].len;
            while (j < occ_.size() && occ_[j].pos < end) {
                end = std::max(end, occ_[j].pos + occ_[j].len);
                ++j;
            }
            if (j == i + 1) {
                take(occ_[i].pos, occ_[i].len, occ_[i].id);
            } else {
                settle_by_rank(i, j);
            }
            i = j;
        }
    }

    void fragments(std::vector<Vocab::Fragment> & frags) const {
        size_t h = 0;
        size_t pos = 0;
        while (pos < n_) {
            if (h < hits_.size() && hits_[h].pos == pos) {
                frags.push_back(Vocab::Fragment{hits_[h].id, 0, 0});
                pos += hits_[h].len;
                ++h;
            } else if (taken_[pos]) {
                ++pos;   // stripped whitespace
            } else {
                size_t end = pos;
                while (end < n_ && !taken_[end]) ++end;
                frags.push_back(Vocab::Fragment{kNoToken, (uint32_t) pos, (uint32_t) end});
                pos = end;
            }
        }
    }

    const Vocab & v_;
    std::string_view text_;
    size_t n_;
    const Vocab::Trie & trie_;
    bool overflow_ = false;
    bool strips_ = false;
    std::vector<uint8_t> present_;   // overflow only: per rank, whether the special token occurs
    static thread_local std::vector<Occ> occ_;
    static thread_local std::vector<Hit> hits_;
    static thread_local std::vector<uint8_t> taken_;   // 1: inside a token, 2: stripped whitespace
};

thread_local std::vector<SpecialSplitter::Occ> SpecialSplitter::occ_;
thread_local std::vector<SpecialSplitter::Hit> SpecialSplitter::hits_;
thread_local std::vector<uint8_t> SpecialSplitter::taken_;

void Vocab::partition(std::string_view text, bool parse_special, std::vector<Fragment> & frags) const {
    frags.clear();
    if (text.empty()) return;
    SpecialSplitter(*this, text, parse_special).run(frags);
}

}  // namespace psl
