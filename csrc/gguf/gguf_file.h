// A GGUF file opened for loading: metadata, tensor descriptions and (optionally) a read-only
// mapping of the file. Every check that keeps a bad file from reaching a ggml assertion lives
// here or in model.cpp.
#pragma once

#include "ggml-cpp.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace psl {

// An open file descriptor, closed with its owner.
class Fd {
public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    ~Fd();
    Fd(const Fd &) = delete;
    Fd & operator=(const Fd &) = delete;
    int get() const { return fd_; }
private:
    int fd_;
};

// A read-only mapping of a whole file, unmapped with its owner.
class Mapping {
public:
    Mapping() = default;
    ~Mapping();
    Mapping(const Mapping &) = delete;
    Mapping & operator=(const Mapping &) = delete;
    void map(int fd, size_t size);     // fails with PSL_ERR_IO
    const uint8_t * data() const { return data_; }
private:
    const uint8_t * data_ = nullptr;
    size_t size_ = 0;
};

class GgufFile {
public:
    explicit GgufFile(const std::string & path);
    GgufFile(const GgufFile &) = delete;
    GgufFile & operator=(const GgufFile &) = delete;

    const std::string & path() const { return path_; }
    gguf_context * gguf() const { return gguf_.get(); }
    ggml_context * meta() const { return meta_.get(); }   // tensors with shapes, no data
    size_t file_size() const { return file_size_; }
    size_t data_offset() const { return data_offset_; }

    // File offset of a tensor's data (already checked to lie inside the file).
    size_t tensor_file_offset(const char * name) const;

    // Maps the whole file read-only, faulting nothing in; returns its base address.
    const uint8_t * map();
    // Faults the mapped bytes [off, off + n) in now rather than during the first evaluation.
    void prefetch(size_t off, size_t n) const;
    const uint8_t * mapping() const { return map_.data(); }
    // Tells the kernel this process no longer needs the mapped bytes [off, off + n) (their data
    // was copied elsewhere, e.g. repacked): they stop counting in its resident memory.
    void release(size_t off, size_t n) const;
    // Reads n bytes at file offset off into dst (the path without mmap).
    void read(size_t off, void * dst, size_t n) const;

    // Metadata access. `key` is the full key. get_* fail with PSL_ERR_FORMAT naming the key when
    // it is absent (and required) or has the wrong type.
    bool has(const std::string & key) const;
    int64_t get_int(const std::string & key) const;
    int64_t get_int(const std::string & key, int64_t dflt) const;
    double get_float(const std::string & key, double dflt) const;
    std::string get_str(const std::string & key) const;
    std::string get_str(const std::string & key, const std::string & dflt) const;
    // An integer key or an array of integers / bools (a per-layer value): its values, one for a
    // scalar, none when absent.
    std::vector<int64_t> get_ints(const std::string & key) const;

private:
    // Every resource is owned by a member, so a constructor that fails half way (a truncated
    // or foreign file) releases what it acquired.
    std::string path_;
    Fd fd_;
    gguf_context_ptr gguf_;
    ggml_context_ptr meta_;
    Mapping map_;
    size_t file_size_ = 0;
    size_t data_offset_ = 0;
};

}  // namespace psl
