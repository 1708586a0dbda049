#include "gguf/gguf_check.h"

#include "error.h"

#include "ggml.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_set>
#include <vector>
#include <unistd.h>

namespace psl {

namespace {

// The GGUF value types (gguf.h's enum gguf_type) with their sizes; 0: not a fixed-size scalar.
constexpr int32_t kTypeString = 8;
constexpr int32_t kTypeArray = 9;
constexpr int32_t kTypeCount = 13;
constexpr uint64_t kTypeSize[kTypeCount] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
constexpr const char * kTypeName[kTypeCount] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                               "str", "arr", "u64", "i64", "f64"};

// ggml refuses longer strings and arrays anyway (GGUF_MAX_STRING_LENGTH, GGUF_MAX_ARRAY_ELEMENTS);
// refusing them here says which field it was.
constexpr uint64_t kMaxString = 1ull << 30;
constexpr uint64_t kMaxArray = 1ull << 30;
// The smallest records: a key/value (length, a 1-byte key, type, a 1-byte value) and a tensor
// info (name length, empty name, n_dims, one dimension, type, offset). A count of records that
// cannot fit in what is left of the file is refused before anything is allocated for them.
constexpr uint64_t kMinKv = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensor = 8 + 4 + 8 + 4 + 8;

// What the records before the current one established.
struct Walk {
    std::unordered_set<std::string> seen;   // keys, then tensor names
    uint64_t alignment = 32;                // GGUF's default: general.alignment changes it
    uint64_t data_size = 0;                 // the data section so far, each tensor padded
};

// A name from the file as it can be printed in a message: hostile bytes and lengths are not.
std::string printable(const std::string & s) {
    std::string out;
    for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
    if (s.size() > 64) out += "...";
    return out;
}

// Buffered reads of the file through pread, each one checked against the file size.
class Reader {
public:
    Reader(int fd, uint64_t size, const std::string & path) : fd_(fd), size_(size), path_(path), buf_(1 << 16) {}

    uint64_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }

    [[noreturn]] __attribute__((format(printf, 2, 3))) void bad(const char * fmt, ...) const {
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fail(PSL_ERR_FORMAT, "'%s': invalid GGUF header: %s", path_.c_str(), msg);
    }

    // Moves n bytes on; `what` names the field for the message when they pass the end.
    void skip(uint64_t n, const char * what) {
        if (n > left()) {
            bad("%s (%" PRIu64 " bytes at byte %" PRIu64 ") passes the end of the file (%" PRIu64 " bytes)", what, n,
                pos_, size_);
        }
        pos_ += n;
    }

    void get(void * dst, uint64_t n, const char * what) {
        const uint64_t at = pos_;
        skip(n, what);
        uint8_t * out = static_cast<uint8_t *>(dst);
        for (uint64_t p = at; p < at + n;) {
            if (p < buf_at_ || p >= buf_at_ + buf_len_) fill(p);
            const uint64_t k = std::min(at + n - p, buf_at_ + buf_len_ - p);
            memcpy(out, buf_.data() + (p - buf_at_), k);
            out += k;
            p += k;
        }
    }

    template <typename T> T num(const char * what) {
        T v;
        get(&v, sizeof(v), what);
        return v;
    }

    // A length-prefixed string; a length over `max` is refused without reading it.
    std::string str(uint64_t max, const char * what) {
        const uint64_t n = num<uint64_t>(what);
        if (n > max || n > left()) {
            bad("%s: length %" PRIu64 " at byte %" PRIu64 " passes %s", what, n, pos_ - 8,
                n > left() ? "the end of the file" : "the longest one allowed");
        }
        std::string s(n, '\0');
        get(s.data(), n, what);
        return s;
    }

private:
    void fill(uint64_t at) {
        const size_t want = (size_t) std::min<uint64_t>(buf_.size(), size_ - at);
        size_t got = 0;
        while (got < want) {
            const ssize_t r = ::pread(fd_, buf_.data() + got, want - got, (off_t) (at + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                fail(PSL_ERR_IO, "read of '%s' failed at byte %" PRIu64 ": %s", path_.c_str(), at + got,
                     r == 0 ? "unexpected end of file" : strerror(errno));
            }
            got += (size_t) r;
        }
        buf_at_ = at;
        buf_len_ = got;
    }

    int fd_;
    uint64_t size_;
    const std::string & path_;
    std::vector<uint8_t> buf_;
    uint64_t pos_ = 0, buf_at_ = 0, buf_len_ = 0;
};

// The array that follows an array type tag: element type, count, elements.
void check_array(Reader & r, const std::string & key) {
    const int32_t et = r.num<int32_t>("array element type");
    if (et < 0 || et >= kTypeCount) {
        r.bad("key '%s': array element type %d is not a GGUF type (0..%d)", key.c_str(), et, kTypeCount - 1);
    }
    if (et == kTypeArray) {
        r.bad("key '%s': array of arrays (nested arrays are not supported)", key.c_str());
    }
    const uint64_t n = r.num<uint64_t>("array length");
    if (n > kMaxArray) {
        r.bad("key '%s': array of %" PRIu64 " elements (at most %" PRIu64 ")", key.c_str(), n, kMaxArray);
    }
    if (et != kTypeString) {
        uint64_t bytes = 0;
        if (__builtin_mul_overflow(n, kTypeSize[et], &bytes) || bytes > r.left()) {
            r.bad("key '%s': array of %" PRIu64 " %s elements passes the end of the file", key.c_str(), n,
                  kTypeName[et]);
        }
        r.skip(bytes, "array");
        return;
    }
    if (n > r.left() / 8) {
        r.bad("key '%s': array of %" PRIu64 " strings passes the end of the file", key.c_str(), n);
    }
    for (uint64_t i = 0; i < n; ++i) {
        const uint64_t len = r.num<uint64_t>("string length");
        if (len > kMaxString || len > r.left()) {
            r.bad("key '%s': string %" PRIu64 " of the array has length %" PRIu64 ", past the end of the file",
                  key.c_str(), i, len);
        }
        r.skip(len, "string");
    }
}

// One key/value record: key, value type, value.
void check_kv(Reader & r, int64_t i, Walk & walk) {
    char what[64];
    snprintf(what, sizeof(what), "key %" PRId64, i);
    const std::string raw = r.str(kMaxString, what);
    if (raw.empty()) r.bad("key %" PRId64 " is empty", i);
    const std::string key = printable(raw);
    if (!walk.seen.insert(raw).second) r.bad("duplicate key '%s'", key.c_str());

    const int32_t t = r.num<int32_t>("value type");
    if (t < 0 || t >= kTypeCount) {
        r.bad("key '%s': value type %d is not a GGUF type (0..%d)", key.c_str(), t, kTypeCount - 1);
    }
    if (raw == "general.alignment") {   // where the data section and each tensor's data start
        const uint32_t a = t == 4 ? r.num<uint32_t>("alignment") : 0;
        if (t != 4) r.bad("key 'general.alignment' has type %s, not u32", kTypeName[t]);
        if (a == 0 || (a & (a - 1)) != 0) r.bad("key 'general.alignment': %u is not a power of 2", a);
        walk.alignment = a;
    } else if (t == kTypeArray) {
        check_array(r, key);
    } else if (t == kTypeString) {
        const uint64_t len = r.num<uint64_t>("string length");
        if (len > kMaxString || len > r.left()) {
            r.bad("key '%s': string length %" PRIu64 " passes the end of the file", key.c_str(), len);
        }
        r.skip(len, "string");
    } else {
        r.skip(kTypeSize[t], "value");
    }
}

// One tensor info record: name, n_dims, dimensions, ggml type, data offset. Every product ggml
// will form from it (elements, bytes) must fit in an int64_t.
void check_tensor_info(Reader & r, int64_t i, Walk & walk) {
    char what[64];
    snprintf(what, sizeof(what), "tensor %" PRId64 " name", i);
    const std::string raw = r.str(kMaxString, what);
    if (raw.size() >= GGML_MAX_NAME) {
        r.bad("tensor %" PRId64 ": name of %zu bytes is too long (ggml takes %d at most)", i, raw.size(),
              GGML_MAX_NAME - 1);
    }
    const std::string name = printable(raw);
    if (!walk.seen.insert(raw).second) r.bad("duplicate tensor name '%s'", name.c_str());

    const uint32_t n_dims = r.num<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > GGML_MAX_DIMS) {
        r.bad("tensor '%s': n_dims %u outside [1, %d]", name.c_str(), n_dims, GGML_MAX_DIMS);
    }
    int64_t ne[GGML_MAX_DIMS] = {1, 1, 1, 1};
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
        ne[d] = r.num<int64_t>("dimension");
        if (ne[d] <= 0) r.bad("tensor '%s': dimension %u is %" PRId64 " (must be > 0)", name.c_str(), d, ne[d]);
        if (__builtin_mul_overflow(n_elements, ne[d], &n_elements)) {
            r.bad("tensor '%s': element count overflows int64 (dimension %u)", name.c_str(), d);
        }
    }

    const int32_t type = r.num<int32_t>("ggml type");
    if (type < 0 || type >= GGML_TYPE_COUNT) {
        r.bad("tensor '%s': ggml type %d is not a ggml type (0..%d)", name.c_str(), type, GGML_TYPE_COUNT - 1);
    }
    const int64_t blck = ggml_blck_size((ggml_type) type);
    const int64_t type_size = (int64_t) ggml_type_size((ggml_type) type);
    if (blck <= 0 || type_size <= 0) {
        r.bad("tensor '%s': ggml type %d is no longer supported", name.c_str(), type);
    }
    if (ne[0] % blck != 0) {
        r.bad("tensor '%s': rows of %" PRId64 " elements are not a multiple of the %s block size %" PRId64,
              name.c_str(), ne[0], ggml_type_name((ggml_type) type), blck);
    }
    int64_t bytes = (ne[0] / blck);
    bool over = __builtin_mul_overflow(bytes, type_size, &bytes);
    for (uint32_t d = 1; d < GGML_MAX_DIMS; ++d) over = over || __builtin_mul_overflow(bytes, ne[d], &bytes);
    if (over) r.bad("tensor '%s': byte size overflows int64", name.c_str());

    // ggml takes the tensors' data in order, each padded to the alignment, and nothing else
    const uint64_t offset = r.num<uint64_t>("tensor data offset");
    if (offset != walk.data_size) {
        r.bad("tensor '%s': data offset %" PRIu64 ", expected %" PRIu64 " (the data of the tensors before it, "
              "each padded to %" PRIu64 " bytes)", name.c_str(), offset, walk.data_size, walk.alignment);
    }
    const uint64_t padded = ((uint64_t) bytes + walk.alignment - 1) / walk.alignment * walk.alignment;
    if (__builtin_add_overflow(walk.data_size, padded, &walk.data_size)) {
        r.bad("tensor '%s': the data section's size overflows", name.c_str());
    }
}

}  // namespace

void check_gguf_header(int fd, size_t file_size, const std::string & path) {
    Reader r(fd, file_size, path);
    char magic[4] = {0, 0, 0, 0};
    if (file_size >= 4) r.get(magic, 4, "magic");
    if (memcmp(magic, "GGUF", 4) != 0) fail(PSL_ERR_FORMAT, "'%s' is not a GGUF file (bad magic)", path.c_str());
    const uint32_t version = r.num<uint32_t>("version");
    if (version != 2 && version != 3) {
        r.bad("unsupported GGUF version %u (versions 2 and 3 are read)%s", version,
              (version & 0xffff) == 0 ? "; a file of the other byte order?" : "");
    }
    const uint64_t n_tensors = r.num<uint64_t>("tensor count");
    const uint64_t n_kv = r.num<uint64_t>("key/value count");
    if (n_tensors > r.left() / kMinTensor) {
        r.bad("tensor count %" PRIu64 " cannot fit in the file (%" PRIu64 " bytes)", n_tensors, (uint64_t) file_size);
    }
    if (n_kv > (r.left() - n_tensors * kMinTensor) / kMinKv) {
        r.bad("key/value count %" PRIu64 " cannot fit in the file (%" PRIu64 " bytes)", n_kv, (uint64_t) file_size);
    }
    Walk walk;
    for (uint64_t i = 0; i < n_kv; ++i) check_kv(r, (int64_t) i, walk);
    walk.seen.clear();
    for (uint64_t i = 0; i < n_tensors; ++i) check_tensor_info(r, (int64_t) i, walk);
}

}  // namespace psl
