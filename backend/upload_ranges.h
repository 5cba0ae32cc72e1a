// The ranges of an object that the calls of an upload session have filled so far.
//
// A store without whole parts (SFTP, MemoryStore) takes writes and copies of any range, in any
// order and in parallel; before it makes the object visible it must know that no hole is left
// (a hole would read as zeros, bytes nobody wrote). Upload implementations keep one of these
// under their own lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>

namespace objfs {

class UploadRanges {
 public:
  // Notes [start, end) as filled.
  void Add(uint64_t start, uint64_t end) {
    if (start >= end) return;
    auto it = ranges_.upper_bound(start);
    if (it != ranges_.begin()) {
      auto prev = std::prev(it);
      if (prev->second >= start) {
        start = prev->first;
        end = std::max(end, prev->second);
        it = ranges_.erase(prev);
      }
    }
    while (it != ranges_.end() && it->first <= end) {
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace(start, end);
  }

  // Whether [0, size) is filled without a gap.
  bool Covers(uint64_t size) const {
    if (size == 0) return true;
    auto it = ranges_.find(0);
    return it != ranges_.end() && it->second >= size;
  }

  // The first byte below `size` that no call filled (size when there is none).
  uint64_t FirstGap(uint64_t size) const {
    auto it = ranges_.find(0);
    if (it == ranges_.end()) return 0;
    return std::min(it->second, size);
  }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // start -> end, disjoint and not touching
};

}  // namespace objfs
