// TokenTable (token_table.h): pieces, their code points and the trie, built once per vocabulary.
#include "grammar/token_table.h"

#include "vocab/vocab.h"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <utility>

namespace psl {

// llama.cpp's decode_utf8 for grammar candidates, reproduced because its leniencies decide
// which tokens a grammar allows: a continuation of `start` must be 10xxxxxx bytes (else the
// piece is invalid); after that a lead byte 10xxxxxx is invalid, but the bytes that follow a lead
// byte are taken without a check; the piece ends at a NUL.
void decode_piece(std::string_view piece, Utf8Partial start, std::vector<uint32_t> & cps, Utf8Partial & end) {
    static const int n_of[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    cps.clear();
    size_t i = 0;
    const size_t n = std::min(piece.size(), piece.find('\0'));
    uint32_t value = start.value;
    int32_t remain = start.n_remain;
    while (i < n && remain > 0) {
        const uint8_t b = (uint8_t) piece[i];
        if ((b >> 6) != 2) {
            end = {0, -1};
            return;
        }
        value = (value << 6) + (b & 0x3F);
        ++i;
        --remain;
    }
    if (start.n_remain > 0 && remain == 0) cps.push_back(value);
    while (i < n) {
        const uint8_t b = (uint8_t) piece[i];
        remain = n_of[b >> 4] - 1;
        if (remain < 0) {
            cps.clear();
            end = {0, -1};
            return;
        }
        value = b & ((1u << (7 - remain)) - 1);
        ++i;
        while (i < n && remain > 0) {
            value = (value << 6) + ((uint8_t) piece[i] & 0x3F);
            ++i;
            --remain;
        }
        if (remain == 0) cps.push_back(value);
    }
    end = remain > 0 ? Utf8Partial{value, remain} : Utf8Partial{0, remain};
}

std::shared_ptr<const TokenTable> TokenTable::of(const std::shared_ptr<const Vocab> & vocab) {
    static std::mutex mu;
    static std::vector<std::pair<std::weak_ptr<const Vocab>, std::weak_ptr<const TokenTable>>> cache;
    std::lock_guard<std::mutex> lock(mu);
    cache.erase(std::remove_if(cache.begin(), cache.end(), [](const auto & e) { return e.first.expired(); }),
                cache.end());
    for (const auto & [v, t] : cache) {
        if (v.lock() == vocab) {
            if (auto table = t.lock()) return table;
        }
    }
    auto table = std::make_shared<TokenTable>();
    table->build(*vocab);
    cache.emplace_back(vocab, table);
    return table;
}

void TokenTable::build(const Vocab & v) {
    n_tokens = v.n_tokens();
    kind.assign((size_t) n_tokens, NEVER);
    piece_off.assign((size_t) n_tokens + 1, 0);
    cp_off.assign((size_t) n_tokens + 1, 0);
    tail.assign((size_t) n_tokens, Utf8Partial{});
    std::vector<uint32_t> tmp;
    for (int32_t id = 0; id < n_tokens; ++id) {
        std::string_view p = v.piece(id, true);
        p = p.substr(0, std::min(p.size(), p.find('\0')));
        piece_off[(size_t) id] = (uint32_t) bytes.size();
        bytes.append(p);
        cp_off[(size_t) id] = (uint32_t) cps.size();
        if (v.is_eog(id)) {
            kind[(size_t) id] = EOG;
            eog.push_back(id);
        } else if (!p.empty()) {
            kind[(size_t) id] = TEXT;
            decode_piece(p, Utf8Partial{}, tmp, tail[(size_t) id]);
            cps.insert(cps.end(), tmp.begin(), tmp.end());
        }
    }
    piece_off[(size_t) n_tokens] = (uint32_t) bytes.size();
    cp_off[(size_t) n_tokens] = (uint32_t) cps.size();
    build_trie();
}

// Tokens sorted by code points (a sequence before its extensions), then one pass that opens
// and closes nodes along the current path: nodes come out in preorder, each subtree's tokens
// contiguous in `sorted`, those ending at a node first.
void TokenTable::build_trie() {
    std::vector<int32_t> order;
    for (int32_t id = 0; id < n_tokens; ++id) {
        if (kind[(size_t) id] == TEXT && tail[(size_t) id].n_remain >= 0) order.push_back(id);
    }
    const uint32_t * c = cps.data();
    auto seq = [&](int32_t id) { return std::make_pair(c + cp_off[(size_t) id], c + cp_off[(size_t) id + 1]); };
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        auto [a0, a1] = seq(a);
        auto [b0, b1] = seq(b);
        if (std::lexicographical_compare(a0, a1, b0, b1)) return true;
        if (std::lexicographical_compare(b0, b1, a0, a1)) return false;
        const Utf8Partial & ta = tail[(size_t) a], & tb = tail[(size_t) b];
        return std::tie(ta.n_remain, ta.value, a) < std::tie(tb.n_remain, tb.value, b);
    });
    sorted = order;
    rank.assign((size_t) n_tokens, -1);
    nodes.clear();
    nodes.push_back(Node{0, 0, 0, 0, 0});
    std::vector<uint32_t> path{0};
    auto close_to = [&](size_t depth, uint32_t tok) {
        while (path.size() - 1 > depth) {
            nodes[path.back()].end = (uint32_t) nodes.size();
            nodes[path.back()].tok_hi = tok;
            path.pop_back();
        }
    };
    for (uint32_t i = 0; i < (uint32_t) order.size(); ++i) {
        const int32_t id = order[i];
        rank[(size_t) id] = (int32_t) i;
        auto [s0, s1] = seq(id);
        const size_t len = (size_t) (s1 - s0);
        size_t common = 0;
        while (common < path.size() - 1 && common < len && nodes[path[common + 1]].cp == s0[common]) ++common;
        close_to(common, i);
        for (size_t j = common; j < len; ++j) {
            nodes.push_back(Node{s0[j], 0, i, i, i});
            path.push_back((uint32_t) nodes.size() - 1);
        }
        nodes[path.back()].tok_mid = i + 1;
    }
    close_to(0, (uint32_t) order.size());
    nodes[0].end = (uint32_t) nodes.size();
    nodes[0].tok_hi = (uint32_t) order.size();
}

}  // namespace psl
