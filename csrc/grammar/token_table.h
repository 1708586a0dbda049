// What a grammar needs of a vocabulary, computed once per vocabulary and shared by every
// grammar on it: each token's text as llama.cpp's grammar sees it (its piece with special
// tokens rendered, read up to a NUL byte), decoded into code points the way llama.cpp decodes
// it (a piece may end inside a UTF-8 character), and a trie of those code point sequences, so
// that the allowed set is one walk of the trie that drops whole subtrees the grammar forbids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace psl {

class Vocab;

// A UTF-8 character cut at a token's end: its bits so far and the bytes still to come
// (n_remain < 0: an invalid sequence, which no grammar allows).
struct Utf8Partial {
    uint32_t value = 0;
    int32_t n_remain = 0;
    bool operator==(const Utf8Partial & o) const { return value == o.value && n_remain == o.n_remain; }
};

// llama.cpp's decoding of a piece that continues `start`: its complete code points, and the
// partial character it ends with (n_remain 0: none).
void decode_piece(std::string_view piece, Utf8Partial start, std::vector<uint32_t> & cps, Utf8Partial & end);

class TokenTable {
public:
    enum Kind : uint8_t { NEVER = 0, TEXT = 1, EOG = 2 };   // NEVER: an empty piece (or one starting with NUL)

    struct Node {
        uint32_t cp;        // the code point on the edge into this node
        uint32_t end;       // one past the last node of its subtree (nodes are in preorder)
        uint32_t tok_lo;    // its subtree's tokens: sorted[tok_lo, tok_hi); those ending here come
        uint32_t tok_mid;   // first: sorted[tok_lo, tok_mid)
        uint32_t tok_hi;
    };

    static std::shared_ptr<const TokenTable> of(const std::shared_ptr<const Vocab> & vocab);

    int32_t n_tokens = 0;
    std::vector<uint8_t> kind;                 // by id
    std::vector<int32_t> eog;                  // end-of-generation ids
    std::vector<uint32_t> piece_off;           // by id: bytes[piece_off[id], piece_off[id + 1])
    std::string bytes;
    std::vector<uint32_t> cp_off;              // by id: the code points decoded from an empty start
    std::vector<uint32_t> cps;
    std::vector<Utf8Partial> tail;             // by id: the partial character it ends with
    std::vector<Node> nodes;                   // the trie of TEXT tokens that decode validly; nodes[0]: root
    std::vector<int32_t> sorted;               // token ids in trie order
    std::vector<int32_t> rank;                 // id -> index in sorted, -1 if not in the trie

    std::string_view piece(int32_t id) const {
        return std::string_view(bytes).substr(piece_off[id], piece_off[id + 1] - piece_off[id]);
    }

private:
    void build(const Vocab & v);
    void build_trie();
};

}  // namespace psl
