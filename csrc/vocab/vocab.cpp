// The vocabulary's maps and caches, token pieces, detokenization and the top of tokenization
// (loading is in vocab_load.cpp, the special-token partition in vocab_special.cpp).
#include "vocab/vocab.h"

#include "error.h"
#include "vocab/unicode.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>

namespace psl {

// ---- hashing and the string map ----------------------------------------------------------------

uint64_t hash_bytes(const char * p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(n) * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

void StringIdMap::rehash(size_t cap) {
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    n_slots_used_ = 0;
}

void StringIdMap::add_slot(uint32_t h, int32_t id) {
    size_t i = h & mask_;
    while (slots_[i].id >= 0) i = (i + 1) & mask_;
    slots_[i] = Slot{h, id};
    ++n_slots_used_;
}

void StringIdMap::build(std::vector<std::string_view> keys) {
    keys_ = std::move(keys);
    size_t cap = 16;
    while (cap < keys_.size() * 2) cap <<= 1;
    rehash(cap);
    for (size_t i = 0; i < keys_.size(); ++i) {
        if (find(keys_[i]) < 0) add_slot((uint32_t) hash_bytes(keys_[i].data(), keys_[i].size()), (int32_t) i);
    }
}

int32_t StringIdMap::insert(std::string_view key) {
    const int32_t found = find(key);
    if (found >= 0) return found;
    if ((n_slots_used_ + 1) * 2 > slots_.size()) {
        rehash(slots_.empty() ? 16 : slots_.size() * 2);
        for (size_t i = 0; i < keys_.size(); ++i) {
            if (find(keys_[i]) < 0) add_slot((uint32_t) hash_bytes(keys_[i].data(), keys_[i].size()), (int32_t) i);
        }
    }
    const int32_t id = (int32_t) keys_.size();
    keys_.push_back(key);
    add_slot((uint32_t) hash_bytes(key.data(), key.size()), id);
    return id;
}

// ---- the per-thread token cache ----------------------------------------------------------------

bool TokenCache::find(std::string_view key, uint64_t h, std::vector<int32_t> & out) const {
    if (slots_.empty()) return false;
    size_t i = h & (kSlots - 1);
    while (true) {
        const Slot & s = slots_[i];
        if (s.key_len == UINT32_MAX) return false;
        if (s.hash == h && s.key_len == key.size() && std::memcmp(keys_.data() + s.key_off, key.data(), key.size()) == 0) {
            out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
            return true;
        }
        i = (i + 1) & (kSlots - 1);
    }
}

void TokenCache::insert(std::string_view key, uint64_t h, const int32_t * ids, size_t n) {
    if (key.size() > kMaxKey) return;
    if (slots_.empty() || n_ >= kMaxEntries) {   // full: start over
        slots_.assign(kSlots, Slot{});
        keys_.clear();
        ids_.clear();
        n_ = 0;
    }
    size_t i = h & (kSlots - 1);
    while (slots_[i].key_len != UINT32_MAX) i = (i + 1) & (kSlots - 1);
    slots_[i] = Slot{h, (uint32_t) keys_.size(), (uint32_t) key.size(), (uint32_t) ids_.size(), (uint32_t) n};
    keys_.append(key.data(), key.size());
    ids_.insert(ids_.end(), ids, ids + n);
    ++n_;
}

namespace {
std::atomic<uint64_t> g_vocab_serial{1};
}  // namespace

Vocab::Vocab() : serial_(g_vocab_serial.fetch_add(1)) {}

TokenCache & Vocab::thread_cache() const {
    // A few vocabularies per thread (a target and a draft model, say), least recently used out.
    struct Entry {
        uint64_t serial = 0;
        std::unique_ptr<TokenCache> cache;
    };
    thread_local Entry entries[4];
    for (size_t i = 0; i < 4; ++i) {
        if (entries[i].serial == serial_) {
            if (i > 0) std::rotate(entries, entries + i, entries + i + 1);   // move to the front
            return *entries[0].cache;
        }
    }
    std::rotate(entries, entries + 3, entries + 4);   // the last becomes the first
    entries[0].serial = serial_;
    entries[0].cache = std::make_unique<TokenCache>();
    return *entries[0].cache;
}

namespace {
const char * const kSpace = "\xE2\x96\x81";   // U+2581, SentencePiece's escaped space
}  // namespace

// ---- pieces ------------------------------------------------------------------------------------

void Vocab::build_pieces() {
    pieces_.clear();
    std::string p;
    for (size_t i = 0; i < tokens_.size(); ++i) {
        auto & t = tokens_[i];
        const std::string_view tx = text((token_id) i);
        p.clear();
        if (t.attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
            p.assign(tx);
        } else if (t.attr & kAttrNormal) {
            if (type == Type::SPM) {
                for (size_t k = 0; k < tx.size();) {
                    if (tx.compare(k, 3, kSpace) == 0) {
                        p.push_back(' ');
                        k += 3;
                    } else {
                        p.push_back(tx[k++]);
                    }
                }
            } else {
                size_t off = 0;
                while (off < tx.size()) {
                    const size_t start = off;
                    const uint32_t cpt = unicode::decode_utf8(tx.data(), tx.size(), &off);
                    const int b = unicode::gpt2_cpt_to_byte(cpt);
                    if (b >= 0) {
                        p.push_back((char) b);
                    } else {
                        // not a byte-level character: its own UTF-8 (llama.cpp writes an [UNK_BYTE_..] marker)
                        p.append(tx.data() + start, off - start);
                    }
                }
            }
        } else if (t.attr & kAttrByte) {
            // "<0xXX>": llama.cpp reads the two characters after "<0x" as hex
            unsigned v = 0;
            for (size_t k = 3; k < 5 && k < tx.size(); ++k) {
                const char c = tx[k];
                if (!std::isxdigit((unsigned char) c)) break;
                v = v * 16 + (unsigned) (std::isdigit((unsigned char) c) ? c - '0' : (std::tolower((unsigned char) c) - 'a' + 10));
            }
            p.push_back((char) (uint8_t) v);
        }
        t.piece_off = (uint32_t) pieces_.size();
        t.piece_len = (uint32_t) p.size();
        pieces_ += p;
    }
}

std::string_view Vocab::piece(token_id id, bool render_special) const {
    const auto & t = tokens_[id];
    if (!render_special && (t.attr & (kAttrUnknown | kAttrControl))) return {};
    return std::string_view(pieces_.data() + t.piece_off, t.piece_len);
}

int32_t Vocab::effective_type(token_id id) const {
    const uint32_t a = tokens_[id].attr;
    if (a & kAttrControl) return 3;
    if (a & kAttrUserDefined) return 4;
    if (a & kAttrUnknown) return 2;
    if (a & kAttrByte) return 6;
    if (a & kAttrNormal) return 1;
    if (a & kAttrUnused) return 5;
    return 0;
}

bool Vocab::is_eog(token_id id) const {
    return std::binary_search(eog_.begin(), eog_.end(), id);
}

void Vocab::detokenize(const token_id * ids, size_t n, bool render_special, std::string & out) const {
    size_t i = 0;
    bool strip = add_space_prefix;
    for (; i < n; ++i) {
        std::string_view p = piece(ids[i], render_special);
        if (strip && !(i == 0 && ids[0] == bos)) {
            if (!p.empty() && p[0] == ' ') p.remove_prefix(1);
            strip = false;
        }
        out.append(p.data(), p.size());
    }
}

// ---- tokenize ----------------------------------------------------------------------------------

void Vocab::tokenize(std::string_view text, bool add_special, bool parse_special, std::vector<token_id> & out) const {
    if (text.size() >= UINT32_MAX) fail(PSL_ERR_INVALID_ARGUMENT, "text too long to tokenize (%zu bytes)", text.size());
    std::vector<Fragment> frags;
    partition(text, parse_special, frags);
    if (add_special && add_bos) out.push_back(bos);
    if (type == Type::SPM) {
        bool prev_special = true;   // the text start counts as after a special token
        std::string buf;
        for (const Fragment & f : frags) {
            if (f.id != kNoToken) {
                out.push_back(f.id);
                prev_special = true;
                continue;
            }
            buf.clear();
            if (add_space_prefix && prev_special) buf.append(kSpace);
            for (size_t k = f.begin; k < f.end; ++k) {
                if (text[k] == ' ') {
                    buf.append(kSpace);
                } else {
                    buf.push_back(text[k]);
                }
            }
            tokenize_spm(buf, out);
            prev_special = false;
        }
    } else {
        for (const Fragment & f : frags) {
            if (f.id != kNoToken) {
                out.push_back(f.id);
            } else {
                tokenize_bpe(text.substr(f.begin, f.end - f.begin), out);
            }
        }
    }
    if (add_special && add_eos) out.push_back(eos);
}

}  // namespace psl
