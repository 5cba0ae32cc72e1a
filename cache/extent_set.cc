#include "cache/extent_set.h"

#include <algorithm>
#include <limits>

namespace objfs {

namespace {

// offset + length, saturated (a range never wraps past the largest offset).
uint64_t EndOf(uint64_t offset, uint64_t length) {
  return length > std::numeric_limits<uint64_t>::max() - offset
             ? std::numeric_limits<uint64_t>::max()
             : offset + length;
}

}  // namespace

void ExtentSet::Add(uint64_t offset, uint64_t length) {
  if (length == 0) return;
  uint64_t start = offset;
  uint64_t end = EndOf(offset, length);
  // The first range that could touch [start, end): the last one starting at or before start.
  auto it = ranges_.upper_bound(start);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second >= start) it = prev;
  }
  // Merge every range that overlaps or touches [start, end).
  while (it != ranges_.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(start, end);
}

void ExtentSet::Remove(uint64_t offset, uint64_t length) {
  if (length == 0) return;
  const uint64_t end = EndOf(offset, length);
  auto it = ranges_.upper_bound(offset);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second > offset) it = prev;
  }
  while (it != ranges_.end() && it->first < end) {
    const uint64_t r_start = it->first;
    const uint64_t r_end = it->second;
    it = ranges_.erase(it);
    if (r_start < offset) ranges_.emplace(r_start, offset);
    if (r_end > end) {
      ranges_.emplace(end, r_end);
      break;
    }
  }
}

void ExtentSet::TrimFrom(uint64_t offset) {
  Remove(offset, std::numeric_limits<uint64_t>::max() - offset);
}

bool ExtentSet::Covers(uint64_t offset, uint64_t length) const {
  if (length == 0) return true;
  auto it = ranges_.upper_bound(offset);
  if (it == ranges_.begin()) return false;
  --it;
  return it->first <= offset && it->second >= EndOf(offset, length);
}

bool ExtentSet::Overlaps(uint64_t offset, uint64_t length) const {
  if (length == 0) return false;
  auto it =
      ranges_.lower_bound(EndOf(offset, length));  // the first range starting at or past the end
  if (it == ranges_.begin()) return false;
  return std::prev(it)->second > offset;
}

std::vector<ExtentSet::Range> ExtentSet::Missing(uint64_t offset, uint64_t length) const {
  std::vector<Range> out;
  if (length == 0) return out;
  const uint64_t end = EndOf(offset, length);
  uint64_t at = offset;
  auto it = ranges_.upper_bound(offset);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second > offset) it = prev;
  }
  for (; it != ranges_.end() && it->first < end && at < end; ++it) {
    if (it->first > at) out.push_back(Range{at, it->first});
    at = std::max(at, it->second);
  }
  if (at < end) out.push_back(Range{at, end});
  return out;
}

std::vector<ExtentSet::Range> ExtentSet::Ranges() const {
  std::vector<Range> out;
  out.reserve(ranges_.size());
  for (const auto& [start, end] : ranges_) out.push_back(Range{start, end});
  return out;
}

uint64_t ExtentSet::TotalBytes() const {
  uint64_t total = 0;
  for (const auto& [start, end] : ranges_) total += end - start;
  return total;
}

}  // namespace objfs
