#include "gguf/gguf_file.h"

#include "error.h"
#include "gguf/gguf_check.h"

#include "ggml.h"
#include "gguf.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace psl {

namespace {

bool is_int_type(gguf_type t) {
    switch (t) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
        case GGUF_TYPE_BOOL:
            return true;
        default:
            return false;
    }
}

}  // namespace

Fd::~Fd() {
    if (fd_ >= 0) ::close(fd_);
}

Mapping::~Mapping() {
    if (data_) munmap((void *) data_, size_);
}

void Mapping::map(int fd, size_t size) {
    // No MAP_POPULATE: pages of tensors that get copied (repacked, or sent to a GPU) must never
    // count in RSS; the tensors used in place are prefaulted one by one (prefetch).
    void * addr = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) fail(PSL_ERR_IO, "cannot mmap: %s", strerror(errno));
    data_ = (const uint8_t *) addr;
    size_ = size;
}

// O_NONBLOCK: opening a FIFO for reading would wait for a writer (-m on a named pipe hung); a
// regular file ignores the flag, and anything else is refused below.
GgufFile::GgufFile(const std::string & path)
    : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)) {
    if (fd_.get() < 0) {
        fail(PSL_ERR_IO, "cannot open model file '%s': %s", path.c_str(), strerror(errno));
    }
    struct stat st{};
    if (fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        const char * what = S_ISFIFO(st.st_mode) ? " (a named pipe)" : S_ISDIR(st.st_mode) ? " (a directory)" :
                            S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? " (a device)" :
                            S_ISSOCK(st.st_mode) ? " (a socket)" : "";
        fail(PSL_ERR_IO, "'%s' is not a regular file%s", path.c_str(), what);
    }
    file_size_ = (size_t) st.st_size;

    // Our own pass first: ggml's parser must never see a field it would misread (gguf_check.h).
    check_gguf_header(fd_.get(), file_size_, path);

    install_ggml_logger();   // a Tokenizer may be the first thing loaded: ggml's reasons must reach us
    take_ggml_error();
    ggml_context * meta = nullptr;
    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ &meta};
    // ggml parses the file that was checked: the same open file, not the path opened again
    const int fd2 = fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0);
    std::unique_ptr<FILE, int (*)(FILE *)> file(fd2 >= 0 ? fdopen(fd2, "rb") : nullptr, fclose);
    if (!file && fd2 >= 0) ::close(fd2);
    if (!file || fseeko(file.get(), 0, SEEK_SET) != 0) {
        fail(PSL_ERR_IO, "cannot read '%s': %s", path.c_str(), strerror(errno));
    }
    gguf_.reset(gguf_init_from_file_ptr(file.get(), params));
    meta_.reset(meta);
    if (!gguf_) {
        std::string why = take_ggml_error();
        fail(PSL_ERR_FORMAT, "'%s' is not a valid GGUF file%s%s", path.c_str(), why.empty() ? "" : ": ",
             why.c_str());
    }

    // gguf checks offsets against each other, not against the file: a truncated file is ours to catch.
    data_offset_ = gguf_get_data_offset(gguf());
    const int64_t n_tensors = gguf_get_n_tensors(gguf());
    for (int64_t i = 0; i < n_tensors; ++i) {
        const char * name = gguf_get_tensor_name(gguf(), i);
        const ggml_tensor * t = ggml_get_tensor(meta_.get(), name);
        const size_t off = gguf_get_tensor_offset(gguf(), i);
        const size_t end = data_offset_ + off + (t ? ggml_nbytes(t) : 0);
        if (!t || end > file_size_ || end < off) {
            fail(PSL_ERR_FORMAT, "'%s' is truncated: tensor '%s' ends at byte %zu but the file has %zu bytes",
                 path.c_str(), name, end, file_size_);
        }
    }
}

size_t GgufFile::tensor_file_offset(const char * name) const {
    const int64_t id = gguf_find_tensor(gguf(), name);
    if (id < 0) {
        fail(PSL_ERR_FORMAT, "tensor '%s' not found", name);
    }
    return data_offset_ + gguf_get_tensor_offset(gguf(), id);
}

const uint8_t * GgufFile::map() {
    if (!map_.data()) {
        try {
            map_.map(fd_.get(), file_size_);
        } catch (const Error & e) {
            fail(e.status, "'%s': %s", path_.c_str(), e.what());
        }
    }
    return map_.data();
}

void GgufFile::prefetch(size_t off, size_t n) const {
    if (!mapping() || n == 0) return;
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    const size_t begin = off / page * page;
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   // Linux 5.14; older kernels say EINVAL and we fall back
#endif
    if (madvise((void *) (mapping() + begin), off + n - begin, MADV_POPULATE_READ) != 0) {
        madvise((void *) (mapping() + begin), off + n - begin, MADV_WILLNEED);
    }
}

void GgufFile::release(size_t off, size_t n) const {
    if (!mapping()) return;
    const size_t page = (size_t) sysconf(_SC_PAGESIZE);
    const size_t begin = (off + page - 1) / page * page, end = (off + n) / page * page;
    if (end > begin) madvise((void *) (mapping() + begin), end - begin, MADV_DONTNEED);
}

void GgufFile::read(size_t off, void * dst, size_t n) const {
    uint8_t * p = (uint8_t *) dst;
    while (n > 0) {
        const ssize_t got = ::pread(fd_.get(), p, n, (off_t) off);
        if (got <= 0) {
            fail(PSL_ERR_IO, "read of '%s' failed at byte %zu: %s", path_.c_str(), off,
                 got == 0 ? "unexpected end of file" : strerror(errno));
        }
        p += got;
        off += (size_t) got;
        n -= (size_t) got;
    }
}

bool GgufFile::has(const std::string & key) const { return gguf_find_key(gguf(), key.c_str()) >= 0; }

int64_t GgufFile::get_int(const std::string & key) const {
    const int64_t id = gguf_find_key(gguf(), key.c_str());
    if (id < 0) {
        fail(PSL_ERR_FORMAT, "'%s': required key '%s' is missing", path_.c_str(), key.c_str());
    }
    const gguf_type t = gguf_get_kv_type(gguf(), id);
    switch (t) {
        case GGUF_TYPE_UINT8:  return gguf_get_val_u8(gguf(), id);
        case GGUF_TYPE_INT8:   return gguf_get_val_i8(gguf(), id);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(gguf(), id);
        case GGUF_TYPE_INT16:  return gguf_get_val_i16(gguf(), id);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(gguf(), id);
        case GGUF_TYPE_INT32:  return gguf_get_val_i32(gguf(), id);
        case GGUF_TYPE_UINT64: return (int64_t) gguf_get_val_u64(gguf(), id);
        case GGUF_TYPE_INT64:  return gguf_get_val_i64(gguf(), id);
        case GGUF_TYPE_BOOL:   return gguf_get_val_bool(gguf(), id) ? 1 : 0;
        default: break;
    }
    (void) is_int_type;
    fail(PSL_ERR_FORMAT, "'%s': key '%s' should be an integer but has GGUF type %d", path_.c_str(),
         key.c_str(), (int) t);
}

int64_t GgufFile::get_int(const std::string & key, int64_t dflt) const { return has(key) ? get_int(key) : dflt; }

double GgufFile::get_float(const std::string & key, double dflt) const {
    const int64_t id = gguf_find_key(gguf(), key.c_str());
    if (id < 0) {
        return dflt;
    }
    const gguf_type t = gguf_get_kv_type(gguf(), id);
    if (t == GGUF_TYPE_FLOAT32) return gguf_get_val_f32(gguf(), id);
    if (t == GGUF_TYPE_FLOAT64) return gguf_get_val_f64(gguf(), id);
    if (is_int_type(t)) return (double) get_int(key);
    fail(PSL_ERR_FORMAT, "'%s': key '%s' should be a number but has GGUF type %d", path_.c_str(), key.c_str(),
         (int) t);
}

std::string GgufFile::get_str(const std::string & key) const {
    const int64_t id = gguf_find_key(gguf(), key.c_str());
    if (id < 0) {
        fail(PSL_ERR_FORMAT, "'%s': required key '%s' is missing", path_.c_str(), key.c_str());
    }
    if (gguf_get_kv_type(gguf(), id) != GGUF_TYPE_STRING) {
        fail(PSL_ERR_FORMAT, "'%s': key '%s' should be a string", path_.c_str(), key.c_str());
    }
    return gguf_get_val_str(gguf(), id);
}

std::string GgufFile::get_str(const std::string & key, const std::string & dflt) const {
    return has(key) ? get_str(key) : dflt;
}

std::vector<int64_t> GgufFile::get_ints(const std::string & key) const {
    const int64_t id = gguf_find_key(gguf(), key.c_str());
    if (id < 0) return {};
    if (gguf_get_kv_type(gguf(), id) != GGUF_TYPE_ARRAY) return {get_int(key)};
    const size_t n = gguf_get_arr_n(gguf(), id);
    const void * d = gguf_get_arr_data(gguf(), id);
    std::vector<int64_t> out;
    out.reserve(n);
    switch (gguf_get_arr_type(gguf(), id)) {
        case GGUF_TYPE_INT32:  for (size_t i = 0; i < n; ++i) out.push_back(((const int32_t *) d)[i]); break;
        case GGUF_TYPE_UINT32: for (size_t i = 0; i < n; ++i) out.push_back(((const uint32_t *) d)[i]); break;
        case GGUF_TYPE_INT64:  for (size_t i = 0; i < n; ++i) out.push_back(((const int64_t *) d)[i]); break;
        case GGUF_TYPE_BOOL:   for (size_t i = 0; i < n; ++i) out.push_back(((const int8_t *) d)[i] != 0); break;
        default: fail(PSL_ERR_FORMAT, "'%s': key '%s' is not an integer array", path_.c_str(), key.c_str());
    }
    return out;
}

}  // namespace psl
