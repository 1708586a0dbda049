// Code point properties (two-stage table built from the generated ranges) and UTF-8 helpers.
#include "vocab/unicode.h"

#include <cstring>
#include <map>
#include <memory>
#include <vector>

namespace psl::unicode {
namespace detail {

const uint8_t kGroupOf[32] = {
    kGroupUndefined,                                                              // Cn
    kGroupControl, kGroupControl, kGroupControl, kGroupControl,                   // Cc Cf Co Cs
    kGroupLetter, kGroupLetter, kGroupLetter, kGroupLetter, kGroupLetter,         // Ll Lm Lo Lt Lu
    kGroupMark, kGroupMark, kGroupMark,                                           // Mc Me Mn
    kGroupNumber, kGroupNumber, kGroupNumber,                                     // Nd Nl No
    kGroupPunctuation, kGroupPunctuation, kGroupPunctuation, kGroupPunctuation,   // Pc Pd Pe Pf
    kGroupPunctuation, kGroupPunctuation, kGroupPunctuation,                      // Pi Po Ps
    kGroupSymbol, kGroupSymbol, kGroupSymbol, kGroupSymbol,                       // Sc Sk Sm So
    kGroupSeparator, kGroupSeparator, kGroupSeparator,                            // Zl Zp Zs
    kGroupUndefined, kGroupUndefined,
};

namespace {

constexpr uint32_t kBlocks = (kMaxCodepoint + 1) >> 8;

// Expands the ranges into 256-entry blocks, sharing identical blocks. Built once, during the
// library's static initialisation, and never freed.
const uint8_t * const * build_tables() {
    static std::vector<std::unique_ptr<uint8_t[]>> storage;
    static const uint8_t * index[kBlocks];
    std::map<std::vector<uint8_t>, const uint8_t *> unique;
    std::vector<uint8_t> block(256);
    size_t r = 0;
    for (uint32_t b = 0; b < kBlocks; ++b) {
        for (uint32_t i = 0; i < 256; ++i) {
            const uint32_t cpt = (b << 8) | i;
            while (r + 1 < kPropertyRangeCount && kPropertyRanges[r + 1].first <= cpt) {
                ++r;
            }
            block[i] = kPropertyRanges[r].value;
        }
        auto it = unique.find(block);
        if (it == unique.end()) {
            storage.emplace_back(new uint8_t[256]);
            std::memcpy(storage.back().get(), block.data(), 256);
            it = unique.emplace(block, storage.back().get()).first;
        }
        index[b] = it->second;
    }
    return index;
}

}  // namespace

const uint8_t * const * stage1 = build_tables();

}  // namespace detail

uint32_t decode_utf8(const char * s, size_t n, size_t * off) {
    const auto * u = reinterpret_cast<const uint8_t *>(s);
    const size_t i = *off;
    const uint8_t c = u[i];
    auto cont = [&](size_t k) { return i + k < n && (u[i + k] & 0xC0) == 0x80; };
    if (c < 0x80) {
        *off = i + 1;
        return c;
    }
    if ((c & 0x40) == 0) {                 // stray continuation byte
        *off = i + 1;
        return kReplacement;
    }
    if ((c & 0x20) == 0) {
        if (!cont(1)) { *off = i + 1; return kReplacement; }
        *off = i + 2;
        return (uint32_t(c & 0x1F) << 6) | (u[i + 1] & 0x3F);
    }
    if ((c & 0x10) == 0) {
        if (!cont(1) || !cont(2)) { *off = i + 1; return kReplacement; }
        *off = i + 3;
        return (uint32_t(c & 0x0F) << 12) | (uint32_t(u[i + 1] & 0x3F) << 6) | (u[i + 2] & 0x3F);
    }
    if ((c & 0x08) == 0) {
        if (!cont(1) || !cont(2) || !cont(3)) { *off = i + 1; return kReplacement; }
        const uint32_t cpt = (uint32_t(c & 0x07) << 18) | (uint32_t(u[i + 1] & 0x3F) << 12) |
                             (uint32_t(u[i + 2] & 0x3F) << 6) | (u[i + 3] & 0x3F);
        if (cpt > kMaxCodepoint) { *off = i + 1; return kReplacement; }
        *off = i + 4;
        return cpt;
    }
    *off = i + 1;
    return kReplacement;
}

void append_utf8(std::string & out, uint32_t cpt) {
    if (cpt <= 0x7F) {
        out.push_back(char(cpt));
    } else if (cpt <= 0x7FF) {
        out.push_back(char(0xC0 | (cpt >> 6)));
        out.push_back(char(0x80 | (cpt & 0x3F)));
    } else if (cpt <= 0xFFFF) {
        out.push_back(char(0xE0 | (cpt >> 12)));
        out.push_back(char(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cpt & 0x3F)));
    } else {
        out.push_back(char(0xF0 | ((cpt >> 18) & 0x07)));
        out.push_back(char(0x80 | ((cpt >> 12) & 0x3F)));
        out.push_back(char(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cpt & 0x3F)));
    }
}

namespace {

struct Gpt2Alphabet {
    uint32_t to_cpt[256];
    int16_t to_byte[256 + 68];
    Gpt2Alphabet() {
        auto self = [](int c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
        for (auto & b : to_byte) b = -1;
        uint32_t n = 0;
        for (int c = 0; c < 256; ++c) {
            to_cpt[c] = self(c) ? uint32_t(c) : 256 + n++;
            to_byte[to_cpt[c]] = int16_t(c);
        }
    }
};
const Gpt2Alphabet g_gpt2;

}  // namespace

uint32_t gpt2_byte_to_cpt(uint8_t b) { return g_gpt2.to_cpt[b]; }

int gpt2_cpt_to_byte(uint32_t cpt) { return cpt < 256 + 68 ? g_gpt2.to_byte[cpt] : -1; }

size_t utf8_complete_prefix(const char * s, size_t n) {
    const auto * u = reinterpret_cast<const uint8_t *>(s);
    // The last lead byte within the last 3 bytes is the only sequence that can be incomplete.
    size_t start = n;
    for (size_t k = 1; k <= 3 && k <= n; ++k) {
        const uint8_t c = u[n - k];
        if ((c & 0xC0) != 0x80) {
            start = n - k;
            break;
        }
    }
    if (start == n) {
        return n;
    }
    const uint8_t lead = u[start];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;   // the allowed range of the second byte
    if (lead >= 0xC2 && lead <= 0xDF) {
        need = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        need = 3;
        if (lead == 0xE0) lo = 0xA0;
        if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        need = 4;
        if (lead == 0xF0) lo = 0x90;
        if (lead == 0xF4) hi = 0x8F;
    } else {
        return n;                    // ASCII or a byte that starts nothing: complete as it is
    }
    const size_t have = n - start;
    if (have >= need) {
        return n;
    }
    if (have >= 2 && (u[start + 1] < lo || u[start + 1] > hi)) {
        return n;                    // already ill-formed: waiting cannot fix it
    }
    return start;
}

}  // namespace psl::unicode
