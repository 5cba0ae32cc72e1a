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

}  // namespace objfs
