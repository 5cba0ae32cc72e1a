#include "cache/staging.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "cache/codec.h"
#include "cache/file_io.h"

namespace objfs {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool PercentDecode(std::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      *out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return false;
    int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    *out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

// The bytes of the whole `block`-sized blocks that [from, to) touches: what writing it into
// unallocated space takes on disk.
uint64_t WholeBlocks(uint64_t from, uint64_t to, uint64_t block) {
  return (to + block - 1) / block * block - from / block * block;
}

}  // namespace

bool DecodeLegacySidecar(std::string_view text, std::string* key, Metadata* metadata) {
  metadata->clear();
  // The text form escaped every control character but its line ends: anything else is not
  // one (a binary record, whose length fields hold zero bytes, whatever its first byte).
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') return false;
  }
  size_t nl = text.find('\n');
  if (nl == std::string_view::npos) return false;
  if (!PercentDecode(text.substr(0, nl), key) || key->empty()) return false;
  text.remove_prefix(nl + 1);
  while (!text.empty()) {
    nl = text.find('\n');
    if (nl == std::string_view::npos) return false;
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return false;
    std::string name, value;
    if (!PercentDecode(line.substr(0, eq), &name) || !PercentDecode(line.substr(eq + 1), &value)) {
      return false;
    }
    (*metadata)[name] = value;
  }
  return true;
}

bool DecodeLegacyAttrsRecord(std::string_view text, std::string* key, ETag* etag,
                             Metadata* metadata) {
  // The ETag's text (empty for none) on the first line, escaped as in a sidecar.
  size_t nl = text.find('\n');
  std::string value;
  if (nl == std::string_view::npos || !PercentDecode(text.substr(0, nl), &value)) return false;
  for (char c : text.substr(0, nl)) {
    if (static_cast<unsigned char>(c) < 0x20) return false;
  }
  if (!DecodeLegacySidecar(text.substr(nl + 1), key, metadata)) return false;
  *etag = ETag::Parse(value);
  return true;
}

PendingAttrs::~PendingAttrs() = default;

Status PendingAttrs::Describe(std::string_view key, const ETag& etag, const Metadata& metadata) {
  std::string bytes;
  // Stamped with the time it is written: the next mount applies it only over an object no
  // other client has changed since.
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  PendingAttrsCodec::Encode(PendingAttrsRecord{std::string(key), etag, metadata, now_ns}, bytes);
  return WriteFileAtomically(path_, bytes);
}

void PendingAttrs::Remove() {
  if (removed_) return;
  ::unlink(path_.c_str());
  removed_ = true;
}

StagedFile::StagedFile(int fd, std::string data_path, std::string meta_path, uint64_t size)
    : fd_(fd), data_path_(std::move(data_path)), meta_path_(std::move(meta_path)), size_(size) {}

StagedFile::~StagedFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<size_t> StagedFile::ReadAt(uint64_t offset, std::span<std::byte> buf) const {
  size_t done = 0;
  while (done < buf.size() && offset + done < size_) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size() - done, size_ - offset - done));
    ssize_t n = ::pread(fd_, buf.data() + done, want, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read", data_path_, errno);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

Status StagedFile::Sync() {
  if (synced_) return Status::Ok();
  if (::fdatasync(fd_) != 0) return ErrnoStatus("sync", data_path_, errno);
  synced_ = true;
  return Status::Ok();
}

Status StagedFile::CutStaleTail() {
  if (!stale_tail_) return Status::Ok();
  if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
    return ErrnoStatus("truncate", data_path_, errno);
  }
  stale_tail_ = false;
  return Status::Ok();
}

Status StagedFile::WriteAt(uint64_t offset, std::span<const std::byte> data) {
  if (reserve_ != nullptr && !data.empty()) {
    // The blocks it takes: past the end, from the block after the last one the file has (or
    // the one the write starts in, past a gap); below it, where it has holes.
    const uint64_t block = reserve_->block();
    const uint64_t end = offset + data.size();
    uint64_t taking = 0;
    if (end > size_) {
      // (The block the file ends in, when it ends inside one, is its own already.)
      const uint64_t start = std::max(offset, size_);
      const uint64_t owned = (size_ + block - 1) / block * block;
      taking = end > owned ? WholeBlocks(std::max(start, owned), end, block) : 0;
    }
    if (offset < size_) taking += NewSpaceWithin(offset, std::min(end, size_), block);
    OBJFS_RETURN_IF_ERROR(reserve_->Take(taking));
  }
  synced_ = false;
  if (offset > size_) {
    OBJFS_RETURN_IF_ERROR(CutStaleTail());
  }
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n =
        ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      // A write that fails (a full disk) has not happened: bytes it left past the end would
      // otherwise surface as content if the file is later extended. If they cannot be cut off
      // now, they are before it grows (CutStaleTail).
      if (offset + done > size_ && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
        stale_tail_ = true;
      }
      return ErrnoStatus("write", data_path_, err);
    }
    done += static_cast<size_t>(n);
  }
  size_ = std::max<uint64_t>(size_, offset + data.size());
  if (has_base()) {
    present_.Add(offset, data.size());
    ForgetBaseIfWhole();
  }
  return Status::Ok();
}

uint64_t StagedFile::NewSpaceWithin(uint64_t start, uint64_t end, uint64_t block) const {
  // The holes the file system reports: a truncate's, a seek's past the end, a sparse file's
  // missing base.
  uint64_t holes = 0;
  for (uint64_t at = start; at < end;) {
    const off_t hole = ::lseek(fd_, static_cast<off_t>(at), SEEK_HOLE);
    if (hole < 0) {
      // Cannot tell: all of it, as a write into a hole takes it.
      holes += WholeBlocks(at, end, block);
      break;
    }
    if (static_cast<uint64_t>(hole) >= end) break;
    const off_t data = ::lseek(fd_, hole, SEEK_DATA);
    const uint64_t hole_end = data < 0 ? end : std::min<uint64_t>(static_cast<uint64_t>(data), end);
    holes += WholeBlocks(static_cast<uint64_t>(hole), hole_end, block);
    at = hole_end;
  }
  // Where the file system reports none (no SEEK_HOLE there), the base's missing ranges at least.
  uint64_t missing = 0;
  for (const ExtentSet::Range& r : MissingBase(start, end - start))
    missing += WholeBlocks(r.start, r.end, block);
  return std::max(holes, missing);
}

Status StagedFile::Truncate(uint64_t size) {
  synced_ = false;
  if (size > size_) {
    OBJFS_RETURN_IF_ERROR(CutStaleTail());
  }
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    return ErrnoStatus("truncate", data_path_, errno);
  }
  size_ = size;
  if (has_base()) {
    // The base's bytes from here on are cut off: what grows back is zeros.
    base_limit_ = std::min(base_limit_, size);
    present_.TrimFrom(size);
    ForgetBaseIfWhole();
  }
  return Status::Ok();
}

Status StagedFile::SetBase(std::string_view key, const ETag& etag, uint64_t size) {
  // A hole of the object's size: the file system allocates only what is fetched or written.
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    return ErrnoStatus("truncate", data_path_, errno);
  }
  size_ = size;
  base_key_ = std::string(key);
  base_etag_ = etag;
  base_size_ = size;
  base_limit_ = size;
  present_.Clear();
  ForgetBaseIfWhole();
  return Status::Ok();
}

void StagedFile::Rebase(std::string_view key, const ETag& etag) {
  if (!has_base()) return;
  base_key_ = std::string(key);
  base_etag_ = etag;
  base_size_ = size_;
}

std::vector<ExtentSet::Range> StagedFile::MissingBase(uint64_t offset, uint64_t length) const {
  if (!has_base() || offset >= base_limit_) return {};
  return present_.Missing(offset, std::min(length, base_limit_ - offset));
}

Status StagedFile::FillBase(uint64_t offset, std::span<const std::byte> data) {
  const std::vector<ExtentSet::Range> missing = MissingBase(offset, data.size());
  if (reserve_ != nullptr) {
    const uint64_t block = reserve_->block();
    uint64_t taking = 0;
    for (const ExtentSet::Range& r : missing) taking += WholeBlocks(r.start, r.end, block);
    OBJFS_RETURN_IF_ERROR(reserve_->Take(taking));
  }
  for (const ExtentSet::Range& r : missing) {
    const std::span<const std::byte> piece = data.subspan(r.start - offset, r.end - r.start);
    size_t done = 0;
    while (done < piece.size()) {
      ssize_t n = ::pwrite(fd_, piece.data() + done, piece.size() - done,
                           static_cast<off_t>(r.start + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        // Within the file's size: nothing to cut back; the range stays missing.
        return ErrnoStatus("write", data_path_, errno);
      }
      done += static_cast<size_t>(n);
    }
    synced_ = false;
    present_.Add(r.start, r.end - r.start);
  }
  ForgetBaseIfWhole();
  return Status::Ok();
}

void StagedFile::ForgetBaseIfWhole() {
  if (!has_base() || !present_.Covers(0, base_limit_)) return;
  base_key_.clear();
  base_etag_ = ETag();
  base_size_ = 0;
  base_limit_ = 0;
  present_.Clear();
}

Status StagedFile::WriteRecord(std::string_view key, const Metadata& metadata, State state) {
  std::string bytes;
  StagedUploadCodec::Encode(RecordOf(key, metadata, state), bytes);
  // Each rewrite is a new file renamed into place; close, release and rename of a file in a
  // write-back window describe it again, mostly with nothing changed.
  if (bytes != described_) {
    OBJFS_RETURN_IF_ERROR(WriteFileAtomically(meta_path_, bytes));
    described_ = std::move(bytes);
  }
  state_ = state;
  if (key_ != key) key_ = std::string(key);
  if (metadata_ != metadata) metadata_ = metadata;
  return Status::Ok();
}

StagedUploadRecord StagedFile::RecordOf(std::string_view key, const Metadata& metadata,
                                        State state) const {
  StagedUploadRecord record{std::string(key), metadata, state,
                            state == State::kAccepted ? size_ : 0};
  record.encryption = encryption_;
  record.condition = ConditionOf(key);
  if (has_base()) {
    record.base_key = base_key_;
    record.base_etag = base_etag_;
    record.base_size = base_size_;
    record.base_limit = base_limit_;
    record.present.reserve(present_.range_count());
    for (const ExtentSet::Range& r : present_.Ranges()) record.present.emplace_back(r.start, r.end);
  }
  return record;
}

Status StagedFile::SetEncryption(const std::optional<AtRestEncryption>& encryption) {
  if (encryption_ == encryption) return Status::Ok();
  encryption_ = encryption;
  if (!state_) return Status::Ok();
  // On failure the record on disk says the old one until its next write, which says this.
  return WriteRecord(key_, metadata_, *state_);
}

void StagedFile::SetCondition(std::string_view key, UploadCondition condition) {
  condition_key_ = std::string(key);
  condition_ = std::move(condition);
}

Status StagedFile::MarkWriting(std::string_view key, const Metadata& metadata) {
  return WriteRecord(key, metadata, State::kWriting);
}

Status StagedFile::MarkAccepted(std::string_view key, const Metadata& metadata, bool sync) {
  if (sync) OBJFS_RETURN_IF_ERROR(Sync());
  return WriteRecord(key, metadata, State::kAccepted);
}

Status StagedFile::Describe(std::string_view key, const Metadata& metadata) {
  if (!state_) return Status::Ok();
  return WriteRecord(key, metadata, *state_);
}

std::optional<StagedFile::State> StagedFile::Orphan() {
  std::optional<State> was = state_;
  ::unlink(meta_path_.c_str());
  described_.clear();
  state_.reset();
  return was;
}

Status StagedFile::Restore(std::optional<State> state) {
  if (!state) return Status::Ok();
  if (*state == State::kAccepted) return MarkAccepted(key_, metadata_);
  return WriteRecord(key_, metadata_, *state);
}

void StagedFile::Remove() {
  if (removed_) return;
  ::unlink(data_path_.c_str());
  ::unlink(meta_path_.c_str());
  removed_ = true;
}

Result<std::unique_ptr<StagingArea>> StagingArea::Open(const std::string& dir, uint64_t reserve) {
  if (dir.empty()) return InvalidArgumentError("no staging directory (cache_dir) given");
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      path = dir.substr(0, i);
      if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
        return ErrnoStatus("mkdir", path, errno);
      }
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus("stat", dir, errno);
  if (!S_ISDIR(st.st_mode)) return InvalidArgumentError(dir + " is not a directory");
  return std::unique_ptr<StagingArea>(new StagingArea(dir, reserve));
}

Result<std::unique_ptr<StagedFile>> StagingArea::Create() {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string base = NextBase();
    std::string data_path = base + ".data";
    int fd = ::open(data_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return ErrnoStatus("create", data_path, errno);
    }
    // A record left by an earlier process of this PID would describe the new data.
    ::unlink((base + ".meta").c_str());
    std::unique_ptr<StagedFile> file(new StagedFile(fd, data_path, base + ".meta", 0));
    file->reserve_ = reserve_;
    return file;
  }
  return IoError("cannot find a free staging file name in " + dir_);
}

Result<std::unique_ptr<StagedFile>> StagingArea::Clone(const StagedFile& from) {
  OBJFS_ASSIGN_OR_RETURN(std::unique_ptr<StagedFile> copy, Create());
  // A reflink costs no space on file systems that have them (btrfs, XFS); elsewhere the kernel
  // copies without the bytes passing through this process: of a sparse file only the ranges
  // that hold its bytes (the rest is the base's, a hole, or zeros past base_limit).
  bool done = ::ioctl(copy->fd_, FICLONE, from.fd_) == 0;
  if (!done) {
    std::vector<ExtentSet::Range> ranges;
    if (from.has_base()) {
      ranges = from.present_.Ranges();
    } else {
      ranges.push_back(ExtentSet::Range{0, from.size_});
    }
    for (const ExtentSet::Range& r : ranges) {
      const uint64_t end = std::min(r.end, from.size_);
      loff_t in = static_cast<loff_t>(r.start), out = static_cast<loff_t>(r.start);
      while (static_cast<uint64_t>(in) < end) {
        ssize_t n = ::copy_file_range(from.fd_, &in, copy->fd_, &out,
                                      static_cast<size_t>(end - static_cast<uint64_t>(in)), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          int err = n < 0 ? errno : EIO;
          copy->Remove();
          return ErrnoStatus("copy into", copy->data_path_, err);
        }
      }
    }
  }
  // (Sparse staging files stay their size even where the copy ends early in a hole.)
  if (::ftruncate(copy->fd_, static_cast<off_t>(from.size_)) != 0) {
    int err = errno;
    copy->Remove();
    return ErrnoStatus("truncate", copy->data_path_, err);
  }
  copy->size_ = from.size_;
  copy->synced_ = false;
  copy->encryption_ = from.encryption_;
  copy->condition_key_ = from.condition_key_;
  copy->condition_ = from.condition_;
  copy->base_key_ = from.base_key_;
  copy->base_etag_ = from.base_etag_;
  copy->base_size_ = from.base_size_;
  copy->base_limit_ = from.base_limit_;
  copy->present_ = from.present_;
  return copy;
}

namespace {

// A file name for `key` in "unfinished/": '/' and '%' and control characters percent-encoded,
// at most 200 bytes, so that the user can tell which file it was.
std::string SetAsideName(std::string_view key) {
  std::string name;
  for (char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || c == '%' || u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      name += '%';
      name += kHex[u >> 4];
      name += kHex[u & 15];
    } else {
      name += c;
    }
    if (name.size() >= 200) break;
  }
  if (name.empty() || name == "." || name == "..") name = "%2E" + name;
  return name;
}

}  // namespace

Result<std::string> StagingArea::SetAside(const StagedLeftover& left) const {
  const std::string dir = dir_ + "/unfinished";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", dir, errno);
  const std::string base = dir + "/" + SetAsideName(left.key);
  for (int n = 0; n < 1000; ++n) {
    std::string path = n == 0 ? base : base + "." + std::to_string(n);
    // link(2) never replaces an existing name, unlike rename(2).
    if (::link(left.data_path.c_str(), path.c_str()) == 0) {
      ::unlink(left.data_path.c_str());
      ::unlink(left.meta_path.c_str());
      return path;
    }
    if (errno != EEXIST) return ErrnoStatus("link", path, errno);
  }
  return IoError("no free name in " + dir + " for " + left.key);
}

Result<std::string> StagingArea::SetAside(StagedFile& file, std::string_view key) const {
  StagedLeftover left;
  left.key = key;
  left.data_path = file.data_path_;
  left.meta_path = file.meta_path_;
  Result<std::string> kept = SetAside(left);
  if (kept.ok()) file.removed_ = true;  // both names are gone already
  return kept;
}

Status StagingArea::Drop(const StagedLeftover& left) const {
  // The record last: a crash in between leaves data no record names (RemoveUnrecorded).
  if (::unlink(left.data_path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("unlink", left.data_path, errno);
  }
  if (::unlink(left.meta_path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("unlink", left.meta_path, errno);
  }
  return Status::Ok();
}

Result<std::unique_ptr<StagedFile>> StagingArea::Adopt(const StagedLeftover& left) const {
  int fd = ::open(left.data_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open", left.data_path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("stat", left.data_path, err);
  }
  std::unique_ptr<StagedFile> file(
      new StagedFile(fd, left.data_path, left.meta_path, static_cast<uint64_t>(st.st_size)));
  file->reserve_ = reserve_;
  if (!left.base_key.empty()) {
    file->base_key_ = left.base_key;
    file->base_etag_ = left.base_etag;
    file->base_size_ = left.base_size;
    file->base_limit_ = std::min(left.base_limit, file->size_);
    file->present_ = left.present;
  }
  file->encryption_ = left.encryption;
  file->condition_key_ = left.key;
  file->condition_ = left.condition;
  // The record on disk says this already; WriteRecord rewrites it only once something changes.
  StagedUploadCodec::Encode(file->RecordOf(left.key, left.metadata, left.state), file->described_);
  file->state_ = left.state;
  file->key_ = left.key;
  file->metadata_ = left.metadata;
  return file;
}

bool StagedLeftover::publishable() const {
  if (state != StagedUploadRecord::State::kAccepted) return false;
  struct stat st;
  return ::stat(data_path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == size;
}

std::string StagingArea::NextBase() {
  MutexLock lock(&mu_);
  return dir_ + "/" + std::to_string(::getpid()) + "-" + std::to_string(next_id_++);
}

Result<std::unique_ptr<PendingAttrs>> StagingArea::CreateAttrs(std::string_view key,
                                                               const ETag& etag,
                                                               const Metadata& metadata) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string path = NextBase() + ".attrs";
    // A record of an earlier process that had this PID and whose change is still pending.
    if (::access(path.c_str(), F_OK) == 0) continue;
    std::unique_ptr<PendingAttrs> record(new PendingAttrs(std::move(path)));
    OBJFS_RETURN_IF_ERROR(record->Describe(key, etag, metadata));
    return record;
  }
  return IoError("cannot find a free record name in " + dir_);
}

namespace {

// Calls fn(path, text) for each file in `dir` whose name ends in `suffix` (and is longer).
Status ForEachRecordFile(const std::string& dir, std::string_view suffix,
                         const std::function<void(const std::string&, const std::string&)>& fn) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("opendir", dir, errno);
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.size() <= suffix.size() || !name.ends_with(suffix)) continue;
    std::string path = dir + "/" + std::string(name);
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    fn(path, text.str());
  }
  ::closedir(d);
  return Status::Ok();
}

}  // namespace

bool StagingArea::HoldsRecords(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return errno != ENOENT;
  bool found = false;
  while (struct dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    for (std::string_view suffix : {std::string_view(".meta"), std::string_view(".attrs")}) {
      if (name.size() > suffix.size() && name.ends_with(suffix)) found = true;
    }
    if (found) break;
  }
  ::closedir(d);
  return found;
}

Result<std::vector<AttrsLeftover>> StagingArea::AttrsLeftovers(
    std::vector<std::string>* unreadable) const {
  std::vector<AttrsLeftover> out;
  OBJFS_RETURN_IF_ERROR(
      ForEachRecordFile(dir_, ".attrs", [&](const std::string& path, const std::string& bytes) {
        AttrsLeftover left;
        left.path = path;
        bool decoded = false;
        if (!bytes.empty() && static_cast<uint8_t>(bytes[0]) == PendingAttrsCodec::kTag) {
          Result<PendingAttrsRecord> record = PendingAttrsCodec::Decode(bytes);
          if (record.ok()) {
            left.key = std::move(record->key);
            left.etag = std::move(record->etag);
            left.metadata = std::move(record->metadata);
            left.changed_ns = record->changed_ns;
            decoded = true;
          }
        } else {
          decoded = DecodeLegacyAttrsRecord(bytes, &left.key, &left.etag, &left.metadata);
        }
        if (!decoded) {
          // Cut short or damaged (a power loss before the disk had it): it can never be
          // applied, and a partial one must not be.
          if (unreadable != nullptr) unreadable->push_back(path);
          ::unlink(path.c_str());
          return;
        }
        out.push_back(std::move(left));
      }));
  return out;
}

Result<uint64_t> StagingArea::RemoveUnrecorded(size_t* files) const {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return ErrnoStatus("opendir", dir_, errno);
  uint64_t freed = 0;
  size_t removed = 0;
  constexpr std::string_view kData = ".data";
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.size() <= kData.size() || !name.ends_with(kData)) continue;
    const std::string path = dir_ + "/" + std::string(name);
    const std::string meta = path.substr(0, path.size() - kData.size()) + ".meta";
    struct stat st;
    if (::stat(meta.c_str(), &st) == 0 || errno != ENOENT) continue;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlink(path.c_str()) == 0) {
      freed += static_cast<uint64_t>(st.st_size);
      ++removed;
    }
  }
  ::closedir(d);
  if (files != nullptr) *files = removed;
  return freed;
}

Result<std::vector<StagedLeftover>> StagingArea::Leftovers(
    std::vector<std::string>* unreadable, std::vector<StagedLeftover>* without_data) const {
  std::vector<StagedLeftover> out;
  const std::string_view suffix = ".meta";
  OBJFS_RETURN_IF_ERROR(
      ForEachRecordFile(dir_, suffix, [&](const std::string& path, const std::string& bytes) {
        StagedLeftover left;
        left.meta_path = path;
        left.data_path = path.substr(0, path.size() - suffix.size()) + ".data";
        struct stat st;
        if (::stat(left.data_path.c_str(), &st) != 0 && errno == ENOENT) {
          // Nothing left to upload: a stop between the two unlinks after an upload (Remove
          // takes the data first), or data removed by hand. The record goes, so that it is
          // not looked at by every mount, and the caller says so (where it went).
          if (::unlink(path.c_str()) == 0 && without_data != nullptr) {
            Result<StagedUploadRecord> record = StagedUploadCodec::Decode(bytes);
            if (record.ok()) {
              left.key = std::move(record->key);
              left.state = record->state;
            }
            without_data->push_back(left);
          }
          return;
        }
        bool decoded = false;
        if (!bytes.empty() && static_cast<uint8_t>(bytes[0]) == StagedUploadCodec::kTag) {
          Result<StagedUploadRecord> record = StagedUploadCodec::Decode(bytes);
          if (record.ok()) {
            left.key = std::move(record->key);
            left.metadata = std::move(record->metadata);
            left.state = record->state;
            left.size = record->size;
            left.base_key = std::move(record->base_key);
            left.base_etag = std::move(record->base_etag);
            left.base_size = record->base_size;
            left.base_limit = record->base_limit;
            for (const auto& [start, end] : record->present) left.present.Add(start, end - start);
            left.encryption = std::move(record->encryption);
            left.condition = std::move(record->condition);
            decoded = true;
          }
        } else {
          // Written by an earlier objfs: a line of text per field. (No such line can start
          // with the codec's tag byte, a control character.)
          decoded = DecodeLegacySidecar(bytes, &left.key, &left.metadata);
        }
        // No object has an empty name, nor a NUL in it (the name of the mount's root, or a
        // request the server refuses for ever).
        if (left.key.empty() || left.key.find('\0') != std::string::npos) decoded = false;
        if (!decoded) {
          // Where this data belongs is not known: it stays for someone to look at.
          if (unreadable != nullptr) unreadable->push_back(left.data_path);
          return;
        }
        out.push_back(std::move(left));
      }));
  return out;
}

}  // namespace objfs
