// Unicode support for the tokenizer: code point properties (general category, White_Space) from
// the generated table in unicode_data.cpp, and UTF-8 helpers that decode exactly as llama.cpp's
// tokenizer does (so that pre-tokenization of malformed input matches it too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace psl::unicode {

// General categories; the order is the table's encoding (scripts/gen_unicode_data.py).
enum Category : uint8_t {
    Cn, Cc, Cf, Co, Cs,
    Ll, Lm, Lo, Lt, Lu,
    Mc, Me, Mn,
    Nd, Nl, No,
    Pc, Pd, Pe, Pf, Pi, Po, Ps,
    Sc, Sk, Sm, So,
    Zl, Zp, Zs,
    kCategoryCount
};

// Properties of one code point, one byte: the low 5 bits are the Category, then the bits below.
enum : uint8_t {
    kCategoryMask = 0x1F,
    kWhitespace   = 0x80,   // White_Space (\s)
};

// Category groups, as bits: what \p{L}, \p{N}, ... test.
enum Group : uint8_t {
    kGroupUndefined   = 0x01,   // Cn, and code points past U+10FFFF
    kGroupNumber      = 0x02,   // \p{N}
    kGroupLetter      = 0x04,   // \p{L}
    kGroupSeparator   = 0x08,   // \p{Z}
    kGroupMark        = 0x10,   // \p{M}
    kGroupPunctuation = 0x20,   // \p{P}
    kGroupSymbol      = 0x40,   // \p{S}
    kGroupControl     = 0x80,   // \p{C} but Cn
};

struct RangeEntry {
    uint32_t first;
    uint8_t  value;
};

// Generated (unicode_data.cpp).
extern const char * const kUnicodeVersion;
extern const RangeEntry kPropertyRanges[];
extern const size_t kPropertyRangeCount;

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kReplacement  = 0xFFFD;

namespace detail {
extern const uint8_t * const * stage1;   // [0x1100] blocks of 256
extern const uint8_t kGroupOf[32];
}  // namespace detail

// Property byte of a code point (Cn for anything past U+10FFFF).
inline uint8_t properties(uint32_t cpt) {
    return cpt <= kMaxCodepoint ? detail::stage1[cpt >> 8][cpt & 0xFF] : uint8_t(Cn);
}

inline uint8_t group(uint8_t props) { return detail::kGroupOf[props & kCategoryMask]; }
inline bool is_whitespace(uint8_t props) { return (props & kWhitespace) != 0; }

// Length of the UTF-8 sequence a lead byte announces (1 for continuation and invalid bytes),
// as llama.cpp's unicode_len_utf8.
inline size_t utf8_len(uint8_t lead) {
    static constexpr uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

// Decodes one code point at s[*off] (off < n) and advances *off. Malformed input gives U+FFFD
// and advances one byte. Like llama.cpp, overlong forms and surrogates are accepted as they
// come; unlike it, values past U+10FFFF (which make llama.cpp throw) also give U+FFFD.
uint32_t decode_utf8(const char * s, size_t n, size_t * off);

void append_utf8(std::string & out, uint32_t cpt);

// Length of the longest prefix of s[0..n) that is complete, well-formed UTF-8, except that an
// ill-formed byte counts as complete (it can never become valid); what is left is the start of a
// sequence that later bytes may complete.
size_t utf8_complete_prefix(const char * s, size_t n);

// GPT-2's byte-level alphabet (its bytes_to_unicode): the code point standing for each byte, and
// back (-1 for a code point outside the alphabet).
uint32_t gpt2_byte_to_cpt(uint8_t b);
int gpt2_cpt_to_byte(uint32_t cpt);

}  // namespace psl::unicode
