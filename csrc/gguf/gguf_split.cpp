#include "gguf/gguf_split.h"

#include "error.h"

#include "ggml.h"
#include "gguf.h"

#include <cstdio>

namespace psl {

namespace {

// llama.cpp's keys (tools/gguf-split): split.no is 0-based.
const char * const k_split_no = "split.no";
const char * const k_split_count = "split.count";
const char * const k_split_tensors = "split.tensors.count";

std::string split_suffix(int no, int count) {
    char buf[48];
    snprintf(buf, sizeof(buf), "-%05d-of-%05d.gguf", no + 1, count);
    return buf;
}

}  // namespace

std::string split_path(const std::string & prefix, int no, int count) { return prefix + split_suffix(no, count); }

std::string split_prefix(const std::string & path, int no, int count) {
    const std::string suffix = split_suffix(no, count);
    if (path.size() <= suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
        return "";
    }
    return path.substr(0, path.size() - suffix.size());
}

GgufSplit::GgufSplit(const std::string & path, bool all_shards) {
    files_.push_back(std::make_unique<GgufFile>(path));
    const GgufFile & f = first();
    // Like llama.cpp, the metadata decides: a file without split.count > 1 is a whole model,
    // whatever its name.
    const int64_t count = f.get_int(k_split_count, 1);
    if (count > 1) {
        if (count > 65535) fail(PSL_ERR_FORMAT, "'%s': split.count %lld is out of range", path.c_str(), (long long) count);
        const int64_t no = f.get_int(k_split_no);
        if (no != 0) {
            const std::string prefix = no > 0 && no < count ? split_prefix(path, (int) no, (int) count) : "";
            fail(PSL_ERR_INVALID_ARGUMENT, "'%s' is shard %lld of %lld of a split model: load its first shard%s%s%s",
                 path.c_str(), (long long) no + 1, (long long) count, prefix.empty() ? "" : ", '",
                 prefix.empty() ? "" : split_path(prefix, 0, (int) count).c_str(), prefix.empty() ? "" : "'");
        }
    }
    index(*files_.front());
    if (count > 1 && all_shards) open_shards(path, (int) count);
}

// Opens shards 2..count beside the first, checks each belongs to the set, then the tensor total.
void GgufSplit::open_shards(const std::string & path, int count) {
    const std::string prefix = split_prefix(path, 0, count);
    if (prefix.empty()) {
        fail(PSL_ERR_FORMAT, "'%s' is shard 1 of %d (split.count) of a split model but its name does not end in '%s', the name its other shards are found by",
             path.c_str(), count, split_suffix(0, count).c_str());
    }
    const int64_t total = first().get_int(k_split_tensors);
    for (int i = 1; i < count; ++i) {
        const std::string p = split_path(prefix, i, count);
        try {
            files_.push_back(std::make_unique<GgufFile>(p));
        } catch (const Error & e) {
            fail(e.status, "split model '%s', shard %d of %d: %s", path.c_str(), i + 1, count, e.what());
        }
        const GgufFile & s = *files_.back();
        if (!s.has(k_split_count) || s.get_int(k_split_count) != count) {
            fail(PSL_ERR_FORMAT, "'%s' is not shard %d of split model '%s': its split.count is %s, the first shard's is %d",
                 p.c_str(), i + 1, path.c_str(),
                 s.has(k_split_count) ? std::to_string(s.get_int(k_split_count)).c_str() : "absent", count);
        }
        const int64_t no = s.get_int(k_split_no);
        if (no != i) {
            fail(PSL_ERR_FORMAT, "'%s' says it is shard %lld (split.no %lld) but is named as shard %d of split model '%s'",
                 p.c_str(), (long long) no + 1, (long long) no, i + 1, path.c_str());
        }
        if (s.get_int(k_split_tensors) != total) {
            fail(PSL_ERR_FORMAT, "'%s' belongs to another split model: split.tensors.count %lld, the first shard '%s' says %lld",
                 p.c_str(), (long long) s.get_int(k_split_tensors), path.c_str(), (long long) total);
        }
        index(*files_.back());
    }
    if ((int64_t) tensors_.size() != total) {
        std::string held;
        for (size_t i = 0; i < files_.size(); ++i) {
            held += (i ? ", " : "") + std::to_string(gguf_get_n_tensors(files_[i]->gguf())) + " in '" + files_[i]->path() + "'";
        }
        fail(PSL_ERR_FORMAT, "split model '%s': split.tensors.count is %lld but its shards hold %zu tensors (%s)",
             path.c_str(), (long long) total, tensors_.size(), held.c_str());
    }
}

void GgufSplit::index(GgufFile & f) {
    const int64_t n = gguf_get_n_tensors(f.gguf());
    for (int64_t i = 0; i < n; ++i) {
        const char * name = gguf_get_tensor_name(f.gguf(), i);
        // GgufFile checked that the description exists and the data lies inside the file.
        const TensorSource src = {&f, ggml_get_tensor(f.meta(), name), f.data_offset() + gguf_get_tensor_offset(f.gguf(), i)};
        auto [it, fresh] = tensors_.emplace(name, src);
        if (!fresh) {
            fail(PSL_ERR_FORMAT, "tensor '%s' is in both '%s' and '%s'", name, it->second.file->path().c_str(),
                 f.path().c_str());
        }
    }
}

const TensorSource * GgufSplit::find(const std::string & name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace psl
