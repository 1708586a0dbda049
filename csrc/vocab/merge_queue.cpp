// See merge_queue.h.
#include "vocab/merge_queue.h"

#include <algorithm>
#include <functional>

namespace psl {

namespace {

// Buckets that grew past this many entries give their memory back when released.
constexpr size_t kKeepCapacity = size_t(1) << 16;

}  // namespace

void MergeQueue::reset(size_t n_symbols) {
    heap_.clear();
    for (uint32_t r : ranks_) release(r);
    ranks_.clear();
    use_buckets_ = n_symbols >= kBucketMin;
}

void MergeQueue::push(uint32_t rank, uint32_t pos) {
    if (!use_buckets_) {
        heap_.push_back((uint64_t(rank) << 32) | pos);
        std::push_heap(heap_.begin(), heap_.end(), std::greater<uint64_t>());
        return;
    }
    if (rank >= slot_of_rank_.size()) slot_of_rank_.resize(size_t(rank) + 1, -1);
    int32_t s = slot_of_rank_[rank];
    if (s < 0) {
        // (in this order, an allocation that throws leaves the queue as it was: reset() can
        // still release every bucket)
        if (free_slots_.empty()) {
            slots_.emplace_back();
            free_slots_.push_back((int32_t) slots_.size() - 1);
        }
        ranks_.push_back(rank);
        std::push_heap(ranks_.begin(), ranks_.end(), std::greater<uint32_t>());
        s = free_slots_.back();
        free_slots_.pop_back();
        slot_of_rank_[rank] = s;
    }
    Bucket & b = slots_[s];
    if (b.open && b.head == b.run.size()) {   // read to the end: start a new run
        b.run.clear();
        b.head = 0;
        b.open = false;
    }
    if (!b.open || pos >= b.run.back()) {
        b.run.push_back(pos);
    } else {
        b.late.push_back(pos);
        std::push_heap(b.late.begin(), b.late.end(), std::greater<uint32_t>());
    }
}

bool MergeQueue::pop(uint32_t & rank, uint32_t & pos) {
    if (use_buckets_) return pop_bucket(rank, pos);
    if (heap_.empty()) return false;
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<uint64_t>());
    rank = uint32_t(heap_.back() >> 32);
    pos = uint32_t(heap_.back());
    heap_.pop_back();
    return true;
}

bool MergeQueue::pop_bucket(uint32_t & rank, uint32_t & pos) {
    while (!ranks_.empty()) {
        const uint32_t r = ranks_.front();
        Bucket & b = slots_[slot_of_rank_[r]];
        if (!b.open) {
            if (!std::is_sorted(b.run.begin(), b.run.end())) std::sort(b.run.begin(), b.run.end());
            b.open = true;
        }
        const bool has_run = b.head < b.run.size();
        if (!has_run && b.late.empty()) {
            std::pop_heap(ranks_.begin(), ranks_.end(), std::greater<uint32_t>());
            ranks_.pop_back();
            release(r);
            continue;
        }
        rank = r;
        if (has_run && (b.late.empty() || b.run[b.head] <= b.late.front())) {
            pos = b.run[b.head++];
        } else {
            std::pop_heap(b.late.begin(), b.late.end(), std::greater<uint32_t>());
            pos = b.late.back();
            b.late.pop_back();
        }
        return true;
    }
    return false;
}

void MergeQueue::release(uint32_t rank) {
    const int32_t s = slot_of_rank_[rank];
    Bucket & b = slots_[s];
    if (b.run.capacity() > kKeepCapacity) std::vector<uint32_t>().swap(b.run);
    if (b.late.capacity() > kKeepCapacity) std::vector<uint32_t>().swap(b.late);
    b.run.clear();
    b.late.clear();
    b.head = 0;
    b.open = false;
    slot_of_rank_[rank] = -1;
    free_slots_.push_back(s);
}

}  // namespace psl
