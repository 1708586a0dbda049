// A model's GGUF files: one file, or every shard of a split model in llama.cpp's gguf-split
// layout (`<prefix>-00001-of-0000N.gguf` ...: metadata in the first shard, the tensors divided
// among the shards, each shard with split.no / split.count / split.tensors.count). Each shard is
// its own GgufFile (checked header, own mapping); a tensor is read from the shard that holds it.
#pragma once

#include "gguf/gguf_file.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace psl {

// llama.cpp's shard naming (llama_split_path): shard no (0-based) of count after prefix.
std::string split_path(const std::string & prefix, int no, int count);
// The prefix of path when its name ends like shard no of count, else "" (llama_split_prefix).
std::string split_prefix(const std::string & path, int no, int count);

// Where a tensor's data lies.
struct TensorSource {
    GgufFile * file;
    const ggml_tensor * meta;   // shape and type, no data
    size_t offset;              // file offset of the data (checked to lie inside the file)
};

class GgufSplit {
public:
    // Opens path and, when it is the first shard of a split model, every other shard beside
    // it, checking that they form one set. all_shards = false opens the first file only (for
    // its metadata: the tokenizer); a non-first shard is refused either way.
    explicit GgufSplit(const std::string & path, bool all_shards = true);
    GgufSplit(const GgufSplit &) = delete;
    GgufSplit & operator=(const GgufSplit &) = delete;

    GgufFile & first() const { return *files_.front(); }   // the metadata
    size_t n_files() const { return files_.size(); }
    GgufFile & file(size_t i) const { return *files_[i]; }
    size_t n_tensors() const { return tensors_.size(); }
    // nullptr when no file holds it.
    const TensorSource * find(const std::string & name) const;

private:
    void open_shards(const std::string & path, int count);
    void index(GgufFile & f);
    // Every resource is owned by a file: a failed constructor releases each shard opened so far.
    std::vector<std::unique_ptr<GgufFile>> files_;
    std::unordered_map<std::string, TensorSource> tensors_;
};

}  // namespace psl
