// A set of disjoint byte ranges of a file.
//
// A staging file staged from a stored object is sparse (cache/staging.h): only the bytes a read
// or an upload needed were fetched, and the writer's own bytes are local too. This set says
// which ranges those are, so that a fetch asks the store only for what is missing and never
// overwrites a written byte. Ranges are half-open [start, end) and kept merged: adjacent or
// overlapping additions become one range, so the set stays as small as the pattern of writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace objfs {

class ExtentSet {
 public:
  struct Range {
    uint64_t start = 0;
    uint64_t end = 0;  // exclusive
    bool operator==(const Range&) const = default;
  };

  // Adds [offset, offset+length) (nothing for length 0).
  void Add(uint64_t offset, uint64_t length);
  // Removes [offset, offset+length).
  void Remove(uint64_t offset, uint64_t length);
  // Removes everything at or past `offset` (a truncate).
  void TrimFrom(uint64_t offset);
  // Every byte of [offset, offset+length) is in the set (true for length 0).
  bool Covers(uint64_t offset, uint64_t length) const;
  // Some byte of [offset, offset+length) is in the set (false for length 0).
  bool Overlaps(uint64_t offset, uint64_t length) const;
  // The sub-ranges of [offset, offset+length) that are not in the set, in order.
  std::vector<Range> Missing(uint64_t offset, uint64_t length) const;
  // The ranges of the set, in order.
  std::vector<Range> Ranges() const;
  // The bytes the set holds.
  uint64_t TotalBytes() const;
  bool empty() const { return ranges_.empty(); }
  size_t range_count() const { return ranges_.size(); }
  void Clear() { ranges_.clear(); }

  bool operator==(const ExtentSet&) const = default;

 private:
  std::map<uint64_t, uint64_t> ranges_;  // start -> end, disjoint and not touching
};

}  // namespace objfs
