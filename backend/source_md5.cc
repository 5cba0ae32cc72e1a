#include "backend/source_md5.h"

#include <algorithm>
#include <memory>
#include <span>

namespace objfs {

// Streams the MD5 of a slice of a source with bulk reads. The buffer is not zeroed (every byte
// hashed is read into it first) and is small enough to stay in the core's cache between the
// read and the hash: a zeroed 4 MiB one per part cost a memset and page faults of every part's
// size, and the hash then read it back from memory.
Result<Md5Digest> Md5OfSource(const ByteSource& source, uint64_t offset, uint64_t size) {
  constexpr uint64_t kHashBuffer = 256 << 10;
  Md5 md5;
  const size_t buf_size = std::max<uint64_t>(std::min(size, kHashBuffer), 1);
  auto buf = std::make_unique_for_overwrite<std::byte[]>(buf_size);
  uint64_t done = 0;
  while (done < size) {
    size_t want = std::min<uint64_t>(buf_size, size - done);
    OBJFS_ASSIGN_OR_RETURN(size_t n, source.read_at(offset + done, std::span(buf.get(), want)));
    if (n == 0) return IoError("staged data is shorter than its recorded size");
    md5.Update(std::span<const std::byte>(buf.get(), n));
    done += n;
  }
  return md5.Final();
}

Result<size_t> Md5WhileRead::read_at(uint64_t offset, std::span<std::byte> buf) const {
  OBJFS_ASSIGN_OR_RETURN(size_t n, source_.read_at(offset, buf));
  if (offset == start_) {
    md5_ = Md5();
    next_ = start_;
    in_order_ = true;
  }
  if (offset != next_) in_order_ = false;
  if (in_order_) {
    const size_t hashed = static_cast<size_t>(std::min<uint64_t>(n, end_ - std::min(end_, offset)));
    md5_.Update(std::span<const std::byte>(buf.data(), hashed));
    next_ += n;
  }
  return n;
}

std::optional<Md5Digest> Md5WhileRead::TakeDigest() {
  if (!in_order_ || next_ < end_) return std::nullopt;
  in_order_ = false;  // Final() ends the hash
  return md5_.Final();
}

}  // namespace objfs
