#include "fs/file_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/log.h"
#include "backend/source_md5.h"
#include "cache/io_pool.h"
#include "fs/object_metadata.h"

namespace objfs {

namespace {

// Whether the object `there` holds the bytes of `source`, as its plain-MD5 ETag tells (false
// where it cannot: another kind of ETag, a failed read).
bool HoldsTheBytesOf(const ObjectInfo& there, const ByteSource& source) {
  if (!there.etag.is_plain_md5() || there.size != source.size()) return false;
  Result<Md5Digest> digest = Md5OfSource(source, 0, source.size());
  return digest.ok() && ETag::FromMd5(*digest) == there.etag;
}

// Whether the object `there`, at `key`, holds the bytes of `source` over `ranges`, read from
// the store by its ETag in blocks of `block` (false where a read fails).
bool SameBytesWhere(ObjectStore* store, std::string_view key, const ObjectInfo& there,
                    const ByteSource& source, const std::vector<ExtentSet::Range>& ranges,
                    uint64_t block) {
  block = std::max<uint64_t>(block, 4096);
  std::vector<std::byte> theirs(block);
  std::vector<std::byte> mine(block);
  const uint64_t size = std::min(there.size, source.size());
  for (const ExtentSet::Range& range : ranges) {
    for (uint64_t at = range.start; at < std::min(range.end, size);) {
      const size_t want = std::min<uint64_t>(block, std::min(range.end, size) - at);
      Result<size_t> got = store->read(key, at, std::span(theirs.data(), want), &there.etag);
      Result<size_t> have = source.read_at(at, std::span(mine.data(), want));
      if (!got.ok() || !have.ok() || *got != want || *have != want ||
          !std::equal(theirs.begin(), theirs.begin() + static_cast<std::ptrdiff_t>(want),
                      mine.begin())) {
        return false;
      }
      at += want;
    }
  }
  return true;
}

// Whether `there` has the attributes this upload's put gives its object (`ours`). Where the
// store keeps metadata as it is sent (S3: `attributes_by_copy`), all of it: mode, owner, times,
// extended attributes, nothing more (but the Content-Type the store reports). Otherwise
// (SFTP) the mode, type bits too, the mtime's second and, where the store keeps the owner it
// is given, the owner.
bool HasAttributesOf(const Metadata& ours, const ObjectInfo& there, const Capabilities& caps) {
  if (caps.attributes_by_copy) {
    Metadata mine = ours;
    Metadata theirs = there.metadata;
    mine.erase(kContentTypeMetadata);
    theirs.erase(kContentTypeMetadata);
    return theirs == mine;
  }
  const PosixMetadata mine = ParsePosixMetadata(ours);
  const PosixMetadata theirs = ParsePosixMetadata(there.metadata);
  constexpr uint32_t kModeBits = S_IFMT | 07777;
  constexpr int64_t kSecond = 1000000000;
  if (mine.mode && (!theirs.mode || (*theirs.mode & kModeBits) != (*mine.mode & kModeBits))) {
    return false;
  }
  if (mine.mtime_ns &&
      (!theirs.mtime_ns || *theirs.mtime_ns / kSecond != *mine.mtime_ns / kSecond)) {
    return false;
  }
  return !caps.stores_owner ||
         ((!mine.uid || mine.uid == theirs.uid) && (!mine.gid || mine.gid == theirs.gid));
}

// Whether the object `there` holds every byte of `source`: by its plain-MD5 ETag where it has
// one, else read back and compared.
bool HoldsEveryByteOf(ObjectStore* store, std::string_view key, const ObjectInfo& there,
                      const ByteSource& source, uint64_t block) {
  if (there.size != source.size()) return false;
  if (there.etag.is_plain_md5()) return HoldsTheBytesOf(there, source);
  return !there.etag.empty() &&
         SameBytesWhere(store, key, there, source, {{0, source.size()}}, block);
}

// The staged file's bytes, with the base's bytes it still lacks read from the server as they
// are asked for rather than stored: the source of an upload made when cache_dir has no room to
// fetch them (a file edited until the cache disk filled). They are read in aligned blocks of
// `block` bytes, the last few kept, so that the upload's small reads (curl's buffer) make no
// small backend calls; on S3 each block is read twice all the same (for the MD5, then to send).
class BaseFilledSource : public ByteSource {
 public:
  BaseFilledSource(ObjectStore* store, const StagedFile& staged, uint64_t block)
      : store_(store),
        staged_(staged.Source()),
        base_(staged.base_key()),
        etag_(staged.base_etag()),
        limit_(staged.base_limit()),
        block_(std::max<uint64_t>(block, 4096)),
        missing_(staged.MissingBase(0, staged.size())) {}

  uint64_t size() const override { return staged_.size(); }

  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override {
    const uint64_t end = std::min<uint64_t>(offset + buf.size(), size());
    uint64_t at = offset;
    while (at < end) {
      // The first missing range that ends past `at`.
      auto it = std::upper_bound(
          missing_.begin(), missing_.end(), at,
          [](uint64_t value, const ExtentSet::Range& range) { return value < range.end; });
      if (it != missing_.end() && it->start <= at) {
        const uint64_t stop = std::min({end, it->end, (at / block_ + 1) * block_});
        OBJFS_ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<std::byte>> data,
                               Block(at / block_));
        const uint64_t from = at - at / block_ * block_;
        if (from + (stop - at) > data->size()) {
          return PreconditionFailedError("read " + base_ + ": shorter than the " +
                                         std::to_string(limit_) + " bytes of its base");
        }
        std::copy_n(data->begin() + static_cast<std::ptrdiff_t>(from), stop - at,
                    buf.begin() + static_cast<std::ptrdiff_t>(at - offset));
        at = stop;
        continue;
      }
      const uint64_t stop = it != missing_.end() ? std::min(end, it->start) : end;
      OBJFS_ASSIGN_OR_RETURN(size_t n, staged_.read_at(at, buf.subspan(at - offset, stop - at)));
      if (n == 0) break;
      at += n;
    }
    return static_cast<size_t>(at - offset);
  }

 private:
  static constexpr size_t kKeptBlocks = 8;

  Result<std::shared_ptr<const std::vector<std::byte>>> Block(uint64_t index) const {
    {
      MutexLock lock(&mu_);
      auto found = blocks_.find(index);
      if (found != blocks_.end()) return found->second;
    }
    const uint64_t start = index * block_;
    auto data = std::make_shared<std::vector<std::byte>>(
        std::min(block_, limit_ > start ? limit_ - start : 0));
    OBJFS_ASSIGN_OR_RETURN(size_t n,
                           store_->read(base_, start, *data, etag_.empty() ? nullptr : &etag_));
    data->resize(n);
    MutexLock lock(&mu_);
    if (blocks_.size() >= kKeptBlocks) {
      blocks_.erase(order_.front());
      order_.erase(order_.begin());
    }
    if (blocks_.emplace(index, data).second) order_.push_back(index);
    return std::shared_ptr<const std::vector<std::byte>>(data);
  }

  ObjectStore* const store_;
  const FileSource staged_;
  const std::string base_;
  const ETag etag_;
  const uint64_t limit_;
  const uint64_t block_;
  const std::vector<ExtentSet::Range> missing_;
  mutable Mutex mu_;  // lock 31 of fs/lock_order.h: a leaf
  mutable std::map<uint64_t, std::shared_ptr<const std::vector<std::byte>>> blocks_ GUARDED_BY(mu_);
  mutable std::vector<uint64_t> order_ GUARDED_BY(mu_);  // blocks_, oldest first
};

std::chrono::nanoseconds Seconds(double s) {
  return std::chrono::nanoseconds(static_cast<int64_t>(s * 1e9));
}

// The part size a file must reach before its parts stream, for a store that names none.
constexpr uint64_t kDefaultStreamPart = 8 << 20;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t ModifiedNs(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// " [start, end)" for each range of the file at `path` that holds data (not a hole), as the file
// system reports them (to its block size).
std::string DataRanges(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return " (unknown ranges)";
  off_t at = 0;
  for (int n = 0; n < 64; ++n) {
    const off_t data = ::lseek(fd, at, SEEK_DATA);
    if (data < 0) break;
    const off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole <= data) break;
    out += " [" + std::to_string(data) + ", " + std::to_string(hole) + ")";
    at = hole;
  }
  ::close(fd);
  return out.empty() ? " (no ranges)" : out;
}

// An upload of `inode` keeps the encryption of the object its data came from, under this key or
// another before a rename (S3; unknown: the store asks the object it replaces).
template <typename UploadOrPutOptions>
void KeepStoredEncryption(const Inode& inode, UploadOrPutOptions& options) REQUIRES(inode.mu) {
  options.replaces_object = inode.in_store;
  options.keep_encryption = inode.stored_encryption;
}

// A put of `inode` keeps a chmod another client made of the file it replaces (SFTP).
void KeepOthersChmod(const Inode& inode, PutOptions& put) REQUIRES(inode.mu) {
  if (inode.in_store) put.replaced = inode.stored_file;
}

}  // namespace

Status SetStoredEncryption(Inode& inode, const std::optional<AtRestEncryption>& encryption) {
  inode.stored_encryption = encryption;
  Status status;
  for (StagedFile* file : {inode.staged.get(), inode.accepted_copy.get()}) {
    if (file == nullptr) continue;
    if (Status recorded = file->SetEncryption(encryption); !recorded.ok()) {
      status = recorded.WithContext("recording the encryption of " + file->data_path());
    }
  }
  return status;
}

FileWriter::FileWriter(ObjectStore* store, StagingArea* staging, InodeTable* inodes,
                       MetaCache* meta_cache, const ObjectAttrs* attrs, Metrics* metrics,
                       std::shared_ptr<Clock> clock, Options options)
    : store_(store),
      staging_(staging),
      inodes_(inodes),
      meta_cache_(meta_cache),
      attrs_(attrs),
      metrics_(metrics),
      clock_(std::move(clock)),
      options_(std::move(options)),
      coalescer_(
          store_, staging_, [this](LogLevel level, const std::string& line) { Log(level, line); },
          [this](const std::string& key) { meta_cache_->Invalidate(key); }),
      recovery_([this](LogLevel level, const std::string& line) { Log(level, line); }),
      caps_(store_->capabilities()) {
  // A store's own bound (S3: parallel_parts) governs streamed uploads and edits as it does its
  // puts and copies, on as many threads as it takes.
  if (options_.stream_parts_in_flight > 0 && caps_.parts_in_flight > 0) {
    options_.stream_parts_in_flight = caps_.parts_in_flight;
    options_.stream_threads = std::max(options_.stream_threads, caps_.parts_in_flight);
  }
  if (options_.stream_parts_in_flight > 0 && caps_.upload_sessions) {
    stream_pool_ = std::make_unique<IoPool>(std::max<size_t>(options_.stream_threads, 1));
  }
  WritebackQueue::Options queue;
  queue.clock = clock_;
  queue.work = [this](uint64_t ino) { return UploadDueFile(ino); };
  queue.done = [this](uint64_t ino) { recovery_.Done(ino); };
  queue.upload_threads = options_.upload_threads;
  queue.retry_delay = Seconds(retry_seconds());
  queue.max_retry_delay = Seconds(kMaxRetrySeconds);
  queue_ = std::make_unique<WritebackQueue>(std::move(queue));
  if ((writeback() || holds_metadata()) && options_.writeback_thread) queue_->Start();
}

FileWriter::~FileWriter() {
  queue_->Stop();
  // Parts and aborts still queued run (and return) before the pool goes: the last part of an
  // abandoned upload, or the task Abandon queued, aborts it.
  stream_pool_.reset();
}

void FileWriter::Stop() { queue_->Stop(); }

bool FileWriter::Queued(uint64_t ino) const { return queue_->Queued(ino); }

Result<std::string> FileWriter::KeyOf(uint64_t ino) const {
  auto key = inodes_->KeyOf(ino);
  if (!key) return NotFoundError("unknown inode " + std::to_string(ino));
  return *key;
}

void FileWriter::Log(LogLevel level, const std::string& message) const {
  LogTo(options_.log, level, message);
}

Status FileWriter::Stage(Inode& inode, const std::string& key, const MetaRecord& rec, bool empty) {
  if (inode.staged) return Status::Ok();
  FileAttr attr = ObjectAttrs::ToAttr(0, rec);
  Metadata extra = WithoutPosixMetadata(rec.metadata);
  if (inode.pending_metadata) {
    // A metadata change not in the store yet: the upload carries it.
    attr.mode = inode.attr.mode;
    attr.uid = inode.attr.uid;
    attr.gid = inode.attr.gid;
    attr.mtime_ns = inode.attr.mtime_ns;
    extra = inode.extra_metadata;
  }
  // No crash record yet: until a write changes it, the copy is only the stored object (a crash
  // in the middle of fetching it must never upload a prefix over the whole).
  auto created = staging_->Create();
  if (!created.ok()) {
    OBJFS_RETURN_IF_ERROR(RetryWithRoom(created.status(), &inode, empty ? 0 : rec.size, [&] {
      created = staging_->Create();
      return created.status();
    }));
  }
  std::unique_ptr<StagedFile> staged = std::move(*created);
  if (!empty && rec.size > 0) {
    // A hole of the object's size: reads and the upload fetch what they need (FetchStaged),
    // by the object's ETag, so that another client's newer object never mixes in.
    Status based = staged->SetBase(key, rec.etag, rec.size);
    // Without an ETag a later fetch could not tell a replaced object: the whole of it now,
    // while stat and listings show the file as it is stored (a file without local state has
    // no attributes for ServerWorkScope to take).
    if (based.ok() && rec.etag.empty()) {
      FileAttr stored = attr;
      stored.size = rec.size;
      ServerWorkScope fetching(inode, stored);
      based = FillFromBase(*staged, &inode, key, 0, rec.size);
    }
    if (!based.ok()) {
      staged->Remove();
      return based.WithContext("staging " + key + " for writing");
    }
  }
  attr.size = staged->size();
  inode.attr = attr;
  inode.extra_metadata = std::move(extra);
  inode.staged = std::move(staged);
  // The edit's base: a close after writes that touched only some parts copies the others from
  // it on the server (UploadEdit).
  inode.touched.Clear();
  inode.base.reset();
  // (An empty object too: an append to it is built on that version.)
  if (!empty && !rec.etag.empty()) inode.base = InfoFromRecord(key, rec);
  inode.in_store = true;  // staged from the stored object (Create clears it for a new file)
  inode.created_as.clear();
  inode.recovered.reset();
  inode.replacing.reset();
  // Staged empty, to be written anew (O_TRUNC): an upload after the close goes only over this
  // version, or over no object when there is none (Inode::replacing).
  if (empty && !rec.etag.empty()) {
    inode.replacing = Inode::KeyCondition{
        .key = key, .condition = UploadCondition{.if_match = rec.etag, .if_none_match = false}};
  }
  // (A mode held to be set is this mount's: it wins.)
  inode.stored_file.reset();
  if (!inode.pending_metadata)
    inode.stored_file =
        ReplacedFile{rec.mode & 07777, rec.size, rec.mtime_ns, std::make_pair(rec.uid, rec.gid)};
  // (No record yet: the first write makes it.)
  (void)SetStoredEncryption(inode, rec.encryption);
  if (!inode.removed()) inode.state = Inode::FileState::kCached;
  inode.has_local_data.store(true);
  return Status::Ok();
}

Status FileWriter::FetchStaged(Inode& inode, const std::string& key, uint64_t offset,
                               uint64_t length) {
  if (!inode.staged) return Status::Ok();
  return FillFromBase(*inode.staged, &inode, key, offset, length);
}

Status FileWriter::FetchAllStaged(Inode& inode, const std::string& key) {
  if (inode.staged) OBJFS_RETURN_IF_ERROR(FetchStaged(inode, key, 0, inode.staged->size()));
  if (inode.accepted_copy) {
    OBJFS_RETURN_IF_ERROR(
        FillFromBase(*inode.accepted_copy, &inode, key, 0, inode.accepted_copy->size()));
  }
  return Status::Ok();
}

void FileWriter::KeepStagedReadable(Inode& inode) {
  if (!inode.staged || !inode.staged->has_base() || inode.open_handles.load() == 0) return;
  const std::string base = inode.staged->base_key();
  Status fetched = FillFromBase(*inode.staged, &inode, base, 0, inode.staged->size());
  if (!fetched.ok())
    Log(LogLevel::kError, "an open file of " + base + " stays incomplete: " + fetched.message());
}

Status FileWriter::FillFromBase(StagedFile& staged, Inode* busy, const std::string& key,
                                uint64_t offset, uint64_t length, bool* base_changed) {
  const std::vector<ExtentSet::Range> missing = staged.MissingBase(offset, length);
  if (missing.empty()) return Status::Ok();
  // A read, a write or a removal of the file waits for the fetch under its lock; a stat or a
  // listing of it need not (a stuck server holds it for the read's allowance, every retry).
  std::optional<ServerWorkScope> working;
  if (busy != nullptr) {
    busy->mu.AssertHeld();  // (the caller's: see the header)
    working.emplace(*busy);
  }
  // Whole blocks of read_buffer, aligned to it: a small read or write never turns into a small
  // backend call, and neighbouring reads find their block fetched.
  const uint64_t block = std::max<uint64_t>(options_.read_buffer, 4096);
  std::vector<std::byte> buf(block);
  const std::string base = staged.base_key();  // copies: FillBase forgets them once whole
  const ETag etag = staged.base_etag();
  const uint64_t limit = staged.base_limit();
  uint64_t fetched_to = 0;  // the blocks below were fetched by this call
  for (const ExtentSet::Range& range : missing) {
    for (uint64_t at = std::max(range.start / block * block, fetched_to); at < range.end;
         at += block) {
      const uint64_t want = std::min(block, limit - at);
      auto n = store_->read(base, at, std::span(buf.data(), want), etag.empty() ? nullptr : &etag);
      if (n.ok() && *n < want) {
        n = PreconditionFailedError("read " + base + ": shorter than the " +
                                    std::to_string(staged.base_size()) + " bytes staged");
      }
      if (!n.ok()) {
        const StatusCode code = n.status().code();
        if (code != StatusCode::kPreconditionFailed && code != StatusCode::kNotFound) {
          return n.status().WithContext("fetching " + key + " for writing");
        }
        std::string why = "the unwritten bytes of " + key + " at " + std::to_string(at);
        why += " cannot be fetched: " + base + " changed or was removed on the server since ";
        why += key + " was opened for writing (" + n.status().message() + ")";
        Log(LogLevel::kError, why);
        if (base_changed != nullptr) *base_changed = true;
        return IoError(why);
      }
      const std::span<const std::byte> piece(buf.data(), want);
      OBJFS_RETURN_IF_ERROR(RetryWithRoom(staged.FillBase(at, piece), busy, want,
                                          [&] { return staged.FillBase(at, piece); }));
      fetched_to = at + block;
    }
  }
  return Status::Ok();
}

void FileWriter::Discard(Inode& inode) {
  KeepStagedReadable(inode);  // (the object may be gone already: then logged)
  GiveUpStream(inode, "", std::nullopt, Status::Ok());  // nothing of it is ever to be stored
  inode.base.reset();
  inode.touched.Clear();
  inode.unwritten.clear();
  inode.state = Inode::FileState::kRemoved;
  ForgetHeldMetadata(inode);
  MetadataCoalescer::Forget(inode.carried);
  if (inode.open_handles.load() == 0) {
    DropStaging(inode);
  } else if (inode.staged) {
    inode.staged->Orphan();  // open handles keep the data; a crash must not upload it
    if (inode.accepted_copy) {
      inode.accepted_copy->Remove();
      inode.accepted_copy.reset();
    }
  }
}

void FileWriter::DropStaging(Inode& inode) {
  GiveUpStream(inode, "", std::nullopt, Status::Ok());
  inode.may_stream = false;
  inode.base.reset();
  inode.touched.Clear();
  inode.unwritten.clear();
  MetadataCoalescer::Forget(inode.carried);
  if (inode.accepted_copy) {
    inode.accepted_copy->Remove();
    inode.accepted_copy.reset();
  }
  if (!inode.staged) return;
  inode.staged->Remove();
  inode.staged.reset();
  if (!inode.removed()) inode.state = Inode::FileState::kStored;
  inode.has_local_data.store(inode.pending_metadata.has_value());
}

void FileWriter::ForgetHeldMetadata(Inode& inode) {
  MetadataCoalescer::Forget(inode.pending_metadata);
  inode.has_local_data.store(inode.staged != nullptr);
}

bool FileWriter::HoldMetadata(uint64_t ino, Inode& inode, const std::string& key,
                              const MetaRecord& rec, const FileAttr& attr, const Metadata& extra,
                              const Metadata& metadata) {
  std::optional<HeldChange> held =
      coalescer_.Hold(key, InfoFromRecord(key, rec), rec.own_write, metadata);
  if (!held) return false;
  inode.pending_metadata = std::move(held);
  inode.attr = attr;
  inode.extra_metadata = extra;
  inode.has_local_data.store(true);

  ObjectInfo info = inode.pending_metadata->object;
  info.metadata = metadata;
  info.has_metadata = true;
  MetaRecord updated = attrs_->FromInfo(info, false);
  updated.complete = true;
  updated.own_write = rec.own_write;
  meta_cache_->Put(key, updated);
  Bump(metrics_->metadata_deferred);

  auto due =
      clock_->now() + std::chrono::nanoseconds(static_cast<int64_t>(options_.hold_metadata * 1e9));
  // An upload due later (a write-back window, a retry) must not hold the change back.
  queue_->ScheduleNoLaterThan(ino, due);
  return true;
}

Status FileWriter::ApplyHeldMetadata(Inode& inode, const std::string& key) {
  if (!inode.pending_metadata) return Status::Ok();
  // (S3: a self-copy, minutes for gigabytes.) Stat and listings answer meanwhile.
  ServerWorkScope working(inode);
  OBJFS_ASSIGN_OR_RETURN(MetadataCoalescer::Applied applied,
                         coalescer_.Apply(*inode.pending_metadata, key));
  switch (applied.outcome) {
    case MetadataCoalescer::Outcome::kRefused:
      DropRefusedMetadata(inode, key, applied.reason);
      return Status::Ok();
    case MetadataCoalescer::Outcome::kGone:
      ForgetHeldMetadata(inode);
      return Status::Ok();
    case MetadataCoalescer::Outcome::kApplied:
      break;
  }
  MetaRecord updated = attrs_->FromInfo(applied.info, false);
  updated.complete = true;
  updated.own_write = true;
  meta_cache_->Put(key, updated);
  // A staged copy of those bytes (kept for open handles) fetches what it lacks, and an edit
  // copies, by their new version, as after a change made at once (Filesystem::MutateMetadata):
  // the old one is gone. Only where the copy proved it copied those bytes: a server that
  // ignores the copy's condition may have copied another client's, which must never fill the
  // copy's holes (it then fails as for another client's change, and is set aside).
  if (!applied.info.etag.empty() &&
      (!caps_.attributes_by_copy || applied.info.same_bytes_as_source)) {
    Retagged(inode, key, inode.pending_metadata->object.etag, applied.info.etag);
  }
  // Same bytes, new version (a self-copy): the kernel's pages of the old one still hold them.
  if (inode.page_version == inode.pending_metadata->object.etag) {
    inode.page_version = applied.info.etag;
  }
  inode.uploaded_etag = applied.info.etag;
  ForgetHeldMetadata(inode);
  return Status::Ok();
}

void FileWriter::DropRefusedMetadata(Inode& inode, const std::string& key, const Status& refusal) {
  if (inode.pending_metadata) {
    const HeldChange& pending = *inode.pending_metadata;
    Log(LogLevel::kWarn, "dropping a metadata change of " + key + " (" +
                             ChangedMetadataNames(pending.object.metadata, pending.metadata) +
                             "): the server refuses it for good (" + refusal.ToString() +
                             "); the object keeps the metadata it has");
  }
  if (inode.pending_metadata && inode.pending_metadata->object.has_metadata) {
    // What the store holds, for a staged copy kept for open handles.
    const ObjectInfo& object = inode.pending_metadata->object;
    const FileAttr stored = ObjectAttrs::ToAttr(0, attrs_->FromInfo(object, false));
    inode.attr.mode = stored.mode;
    inode.attr.uid = stored.uid;
    inode.attr.gid = stored.gid;
    inode.attr.mtime_ns = stored.mtime_ns;
    inode.extra_metadata = WithoutPosixMetadata(object.metadata);
  }
  meta_cache_->Invalidate(key);
  ForgetHeldMetadata(inode);
}

Result<ObjectInfo> FileWriter::PutWithAcceptedMetadata(const std::string& key,
                                                       const ByteSource& source,
                                                       const std::optional<ETag>& if_match,
                                                       Metadata* metadata, const Status& refusal) {
  Metadata accepted;
  Result<ObjectInfo> stored = store_->head(key);
  if (stored.ok()) {
    accepted = WithoutPosixMetadata(stored->metadata);
  } else if (stored.status().code() != StatusCode::kNotFound) {
    return refusal;
  }
  for (const char* name : {kModeMetadata, kUidMetadata, kGidMetadata, kMtimeMetadata}) {
    auto it = metadata->find(name);
    if (it != metadata->end()) accepted[name] = it->second;
  }
  if (accepted == *metadata) return refusal;  // it was not the metadata the server refused
  PutOptions put;
  put.metadata = accepted;
  put.if_match = if_match;
  if (stored.ok()) {
    put.keep_encryption = stored->encryption;
    put.replaces_object = true;
  }
  Result<ObjectInfo> result = store_->put(key, source, put);
  if (!result.ok()) return IsPermanentRefusal(result.status()) ? refusal : result.status();
  Log(LogLevel::kWarn, "uploaded " + key + " without its metadata change (" +
                           ChangedMetadataNames(accepted, *metadata) +
                           "), which the server refuses for good (" + refusal.ToString() +
                           "): the object keeps the metadata the server last accepted");
  *metadata = std::move(accepted);
  return result;
}

Metadata FileWriter::UploadMetadata(const Inode& inode) {
  Metadata metadata = inode.extra_metadata;
  SetPosixMetadata(inode.attr.mode, inode.attr.uid, inode.attr.gid, inode.attr.mtime_ns, &metadata);
  return metadata;
}

Status FileWriter::Upload(Inode& inode, const std::string& key, bool accept) {
  if (Unfinished(inode)) return UnfinishedError(inode, key);
  // Stat and listings answer while the file goes up (its tail, or all of it).
  ServerWorkScope working(inode);
  Metadata metadata = UploadMetadata(inode);
  // Accepted before this upload (the write-back window, a failed close, an earlier mount): a
  // file written anew goes only over the version it replaced (Inode::replacing).
  const std::optional<UploadCondition> later =
      inode.staged->state() == StagedFile::State::kAccepted ? Replacing(inode, key) : std::nullopt;
  // A writer's close or an fsync vouches for the data as it is: should objfs die during the
  // upload, the next mount uploads it. (Not synced first: the upload is what keeps it, and a
  // failed one syncs it below.) Any other upload only keeps an existing record current.
  if (accept) inode.staged->SetCondition(key, ConditionOf(inode, key));
  Status described = accept && !inode.removed()
                         ? inode.staged->MarkAccepted(key, metadata, /*sync=*/false)
                         : inode.staged->Describe(key, metadata);
  if (!described.ok()) {
    Log(LogLevel::kWarn, "uploading " + key + " with a stale crash record: " + described.message());
  } else if (accept) {
    MetadataCoalescer::Forget(inode.carried);  // the accepted record carries the change
    if (inode.accepted_copy) {                 // superseded by this version
      inode.accepted_copy->Remove();
      inode.accepted_copy.reset();
    }
  }
  // Streamed while it was written: what is left of its parts, and completed. Otherwise (or
  // when that was given up) the whole file.
  std::optional<Result<ObjectInfo>> streamed = FinishStream(inode, key, &metadata, later);
  if (!streamed) streamed = UploadEdit(inode, key, metadata);
  PutOptions put;
  put.metadata = metadata;
  KeepStoredEncryption(inode, put);
  KeepOthersChmod(inode, put);
  put.if_match = KeptBase(inode, key);
  put.if_none_match = CreatedHere(inode, key);
  const bool replacing_only = later && !put.if_match && !put.if_none_match;
  if (replacing_only) {
    put.if_match = later->if_match;
    put.if_none_match = later->if_none_match;
  }
  // A whole put needs every byte here: what a sparse file still lacks is fetched first (a
  // failure is the upload's, below).
  Result<ObjectInfo> result = ObjectInfo{};
  bool base_changed = false;
  // What a whole put sends: the staged file, or it with the bytes it lacks read from the base.
  std::optional<FileSource> whole;
  std::optional<BaseFilledSource> filled;
  const ByteSource* source = nullptr;
  if (streamed) {
    result = std::move(*streamed);
  } else if (Status fetched =
                 FillFromBase(*inode.staged, &inode, key, 0, inode.staged->size(), &base_changed);
             fetched.ok()) {
    source = &whole.emplace(inode.staged->Source());
    result = store_->put(key, *source, put);
  } else if (fetched.code() == StatusCode::kNoSpace && inode.staged->has_base()) {
    // No room in cache_dir for what the file lacks: read from the server as it goes up, or
    // the edit would stay here, filling the disk, at every retry.
    Log(LogLevel::kWarn, "uploading " + key + " with the bytes it lacks read from " +
                             inode.staged->base_key() + " as they are sent: " + fetched.message());
    source = &filled.emplace(store_, *inode.staged, options_.read_buffer);
    result = store_->put(key, *source, put);
  } else if (base_changed && LoseBase(inode, key)) {
    meta_cache_->Invalidate(key);
    return UnfinishedError(inode, key);  // no retry can upload it: set aside by the caller's end
  } else {
    result = fetched;
  }
  if (!result.ok() && source != nullptr && put.if_match && BaseReplaced(result.status()) &&
      !inode.uploaded_etag.empty() && inode.uploaded_etag != *put.if_match) {
    // A change of this mount's own since (a chmod or touch by a self-copy that could not prove
    // it kept the bytes, which gives a multipart object a new ETag) is no other client's: where
    // the key holds that version, the put goes over it.
    Result<ObjectInfo> now = store_->head(key);
    if (now.ok() && now->etag == inode.uploaded_etag) {
      put.if_match = now->etag;
      result = store_->put(key, *source, put);
    }
  }
  if (!result.ok() && (put.if_none_match || put.if_match) && source != nullptr &&
      BaseReplaced(result.status()) &&
      ((inode.recovered && inode.recovered->key == key) || replacing_only)) {
    // A file the earlier mount created or edited, and may have stored itself just before it
    // stopped (its record not dropped yet), or one whose failed close's put the server carried
    // out after all (a stalled server does, once it goes on): then the name holds these very
    // bytes, and only the attributes may be left to set: a chmod, touch or setfattr made here
    // since that put, or, where another client stored these very bytes, all of this file's.
    // Told by a plain-MD5 ETag; another kind (multipart, SFTP's version) by reading the object
    // back.
    Result<ObjectInfo> there = store_->head(key);
    if (there.ok() && HoldsEveryByteOf(store_, key, *there, *source, options_.read_buffer)) {
      if (HasAttributesOf(put.metadata, *there, store_->capabilities())) {
        result = std::move(there);
      } else {
        SetAttributesOptions set;
        set.expected = *there;
        set.expected.key = key;
        result = store_->set_attributes(key, put.metadata, set);
      }
    }
  }
  if (!result.ok() && (put.if_match || put.if_none_match) && BaseReplaced(result.status()) &&
      LoseBase(inode, key, replacing_only)) {
    // Another client's version came between this edit's start and its upload: uploaded over
    // it, the edit would undo that change, which its writer was told was stored.
    meta_cache_->Invalidate(key);
    return UnfinishedError(inode, key);
  }
  if (!result.ok() && result.status().code() == StatusCode::kIsDirectory &&
      LoseBase(inode, key, /*replaced_after_close=*/false, /*by_directory=*/true)) {
    // Another client made a directory of the file's name (SFTP says so; an object store keeps
    // both): set aside now, rather than retried in vain every 10 s until unmount.
    meta_cache_->Invalidate(key);
    return UnfinishedError(inode, key);
  }
  if (!result.ok() && (source != nullptr || streamed) && IsPermanentRefusal(result.status())) {
    // (After a streamed or copying upload: every byte, the ones it lacks from its base.)
    if (source == nullptr) source = &filled.emplace(store_, *inode.staged, options_.read_buffer);
    result = PutWithAcceptedMetadata(key, *source, put.if_match, &metadata, result.status());
    if (result.ok()) inode.extra_metadata = WithoutPosixMetadata(metadata);
  }
  if (!result.ok()) {
    meta_cache_->Invalidate(key);
    if (accept && !inode.removed()) {
      // Accepted all the same: kept for a retry, and uploaded by the next mount should objfs
      // die first.
      Status recorded = inode.staged->MarkAccepted(key, metadata);
      if (recorded.ok()) MetadataCoalescer::Forget(inode.carried);
      if (recorded.ok() && inode.accepted_copy) {
        inode.accepted_copy->Remove();
        inode.accepted_copy.reset();
      }
      if (!recorded.ok())
        Log(LogLevel::kWarn, "no crash record for " + key + ": " + recorded.message());
    }
    return result.status().WithContext("uploading " + key);
  }
  if (inode.unsaved()) inode.state = Inode::FileState::kCached;
  // The server kept a chmod another client made since this mode was read (KeepOthersChmod):
  // the file shows the mode it has.
  const PosixMetadata stored = ParsePosixMetadata(result->metadata);
  const std::optional<uint32_t> kept = stored.mode;
  if (kept && inode.in_store && inode.stored_file &&
      (inode.attr.mode & 07777) == inode.stored_file->permissions &&
      (*kept & 07777) != inode.stored_file->permissions) {
    inode.attr.mode = (inode.attr.mode & S_IFMT) | (*kept & 07777);
    metadata[kModeMetadata] = std::to_string(inode.attr.mode);
  }
  // The file as the server has it now, where it says (its mode and mtime).
  inode.stored_file.reset();
  if (result->mtime_ns > 0) {
    inode.stored_file = ReplacedFile{(kept ? *kept : inode.attr.mode) & 07777, inode.staged->size(),
                                     result->mtime_ns, std::nullopt};
    if (stored.uid && stored.gid) {
      inode.stored_file->owner = std::make_pair(*stored.uid, *stored.gid);
    }
  }
  inode.in_store = true;
  inode.created_as.clear();  // the name is this file's now: later uploads go by its version
  inode.recovered.reset();
  inode.replacing.reset();
  // The records go with the upload just done; a write after it records the new version's.
  (void)SetStoredEncryption(inode, result->encryption);
  inode.may_stream = false;  // further writes edit a stored object
  inode.uploaded_etag = result->etag;
  // Every byte of it was written through the kernel, whose pages hold them: the next open of
  // this version keeps them. Unless a drop of them is still queued: they may hold other data
  // (an unfinished writer's, set aside), and the next open drops them.
  inode.page_version = inode.pages_drop_queued ? ETag() : result->etag;
  inode.page_version_settled = true;
  inode.touched.Clear();
  inode.base.reset();
  if (!result->etag.empty()) {
    inode.base = ObjectInfo{};
    inode.base->key = key;
    inode.base->size = inode.staged->size();
    inode.base->etag = result->etag;
  }
  // Bytes an edit copied on the server and never fetched are the new object's now.
  if (inode.staged->has_base()) inode.staged->Rebase(key, result->etag);
  ForgetHeldMetadata(inode);  // the upload carried it
  MetadataCoalescer::Forget(inode.carried);
  if (inode.accepted_copy) {  // an older version: the store has a newer one now
    inode.accepted_copy->Remove();
    inode.accepted_copy.reset();
  }
  ObjectInfo info = *result;
  info.size = inode.staged->size();
  info.metadata = metadata;
  // The Content-Type the store says it stored (one chosen by the name), for a chmod to keep.
  if (auto type = result->metadata.find(kContentTypeMetadata); type != result->metadata.end()) {
    info.metadata.insert(*type);
  }
  info.has_metadata = true;
  MetaRecord rec = attrs_->FromInfo(info, false);
  rec.complete = true;
  rec.own_write = true;
  meta_cache_->Put(key, rec);
  if (const size_t slash = key.rfind('/');
      slash != std::string::npos && caps_.directory_attributes) {
    // The server dated the directory the file went into.
    meta_cache_->Invalidate(key.substr(0, slash));
  }
  if (inode.open_handles.load() == 0) {
    DropStaging(inode);
  } else {
    // Kept for the open handles, but the store has it: a crash must not upload it again, over
    // whatever changed since (a held chmod applied, another client's write).
    inode.staged->Orphan();
  }
  return Status::Ok();
}

Status FileWriter::MarkDirty(Inode& inode, const std::string& key, bool keep_content) {
  // (A file removed or replaced while open keeps writing to a copy nothing will upload.)
  if (!inode.staged || inode.removed()) return Status::Ok();
  // Emptied to be written anew: what the key holds, as this mount knows it, is what an upload
  // after the close may go over (Inode::replacing). Known already when the data pending since
  // an earlier emptying was not uploaded yet.
  if (!keep_content && !(inode.replacing && inode.replacing->key == key) && inode.base &&
      inode.base->key == key && !inode.base->etag.empty()) {
    inode.replacing = Inode::KeyCondition{
        .key = key,
        .condition = UploadCondition{.if_match = inode.base->etag, .if_none_match = false}};
  }
  const std::optional<StagedFile::State> state = inode.staged->state();
  if (state == StagedFile::State::kWriting) {
    inode.state = Inode::FileState::kUnsaved;
    return Status::Ok();
  }
  Metadata metadata = UploadMetadata(inode);
  // The accepted version's streamed upload would complete data that is about to change (and
  // reads the copy about to be set aside); emptied anyway, the file may stream anew.
  if (inode.stream) {
    GiveUpStream(inode, key, keep_content ? std::optional(Fallback::kReplaced) : std::nullopt,
                 Status::Ok());
  }
  if (state == StagedFile::State::kAccepted) {
    // Accepted and not uploaded yet: that version stays as it is, with its record, and the
    // writer changes a copy, so that a crash uploads what was closed, never a mix. (An empty
    // one, when the writer empties the file anyway.)
    auto copy = keep_content ? staging_->Clone(*inode.staged) : staging_->Create();
    if (!copy.ok()) {
      const uint64_t needed = keep_content ? inode.staged->size() : 0;
      OBJFS_RETURN_IF_ERROR(RetryWithRoom(copy.status(), &inode, needed, [&] {
        inode.mu.AssertHeld();  // run by RetryWithRoom, under this call's lock
        copy = keep_content ? staging_->Clone(*inode.staged) : staging_->Create();
        return copy.status();
      }));
    }
    if (inode.accepted_copy) inode.accepted_copy->Remove();
    inode.accepted_copy = std::move(inode.staged);
    inode.staged = std::move(*copy);
    // (A clone has it already; an empty new one is still the same file's data.) No record yet:
    // MarkWriting below writes it.
    (void)inode.staged->SetEncryption(inode.stored_encryption);
  }
  // A clean copy has no crash record (a fetched object, or one the upload removed); it is about
  // to hold data the store lacks. The record carries the metadata the mount shows, a held
  // change included, whose own record then goes: replayed after the data, it would undo
  // changes made after it.
  Status recorded = RetryWithRoom(inode.staged->MarkWriting(key, metadata), &inode, 4096, [&] {
    inode.mu.AssertHeld();  // run by RetryWithRoom, under this call's lock
    return inode.staged->MarkWriting(key, metadata);
  });
  if (!recorded.ok()) {
    if (inode.accepted_copy) {  // back as it was
      inode.staged->Remove();
      inode.staged = std::move(inode.accepted_copy);
    }
    return recorded;
  }
  // ... but its own record stays until this data is accepted: a crash before that sets the data
  // aside, and the change, acknowledged already, still applies to the stored object.
  MetadataCoalescer::Carry(inode.pending_metadata, inode.carried);
  inode.set_while_written = 0;
  inode.has_local_data.store(true);
  inode.state = Inode::FileState::kUnsaved;
  // Written from empty: its parts may go up while it is written (and none is the base's).
  inode.may_stream = !keep_content || inode.staged->size() == 0;
  if (!keep_content) {
    inode.touched.Add(0, UINT64_MAX);
    inode.created_as.clear();  // emptied to be written anew: whatever the name holds goes
    inode.recovered.reset();
  }
  return Status::Ok();
}

void FileWriter::WriteFailedPartway(Inode& inode, uint64_t offset, uint64_t length) {
  if (inode.stream && inode.staged && length > 0) {
    inode.stream->Wrote(offset, length, inode.staged->size());
  }
}

void FileWriter::Wrote(Inode& inode, const std::string& key, uint64_t offset, uint64_t length) {
  if (inode.base || inode.recovered) inode.touched.Add(offset, length);
  // A failed write's bytes, written after all.
  for (auto& [fh, entry] : inode.unwritten) entry.ranges.Remove(offset, length);
  std::erase_if(inode.unwritten, [](const auto& entry) { return entry.second.ranges.empty(); });
  if (!inode.staged || !inode.unsaved()) return;
  const uint64_t size = inode.staged->size();
  if (inode.stream) {
    Status failed = inode.stream->failure();
    if (!failed.ok()) {
      GiveUpStream(inode, key, Fallback::kPartFailed, failed);
      return;
    }
    inode.stream->Wrote(offset, length, size);
    return;
  }
  if (!inode.may_stream || stream_pool_ == nullptr) return;
  // Small files keep the one put at close.
  const uint64_t threshold =
      caps_.part_size > 0 ? std::max(caps_.part_size, caps_.min_part_size) : kDefaultStreamPart;
  if (size < threshold) return;
  StreamedUpload::Options options;
  options.max_in_flight = options_.stream_parts_in_flight;
  options.pool = stream_pool_.get();
  options.metrics = metrics_;
  options.metadata = UploadMetadata(inode);
  // A store that sets metadata by a self-copy after the upload starts without the mtime the
  // writes keep moving: the object's Last-Modified, its completion, then stands for it
  // (FinishStream).
  if (caps_.attributes_by_copy) options.metadata.erase(kMtimeMetadata);
  options.started_ns = NowNs();
  UploadOptions upload;
  upload.metadata = options.metadata;
  KeepStoredEncryption(inode, upload);
  upload.part_size = threshold;  // what the store makes of it, without a size hint
  if (caps_.min_part_size > 0) upload.part_size = std::max(upload.part_size, caps_.min_part_size);
  Result<std::shared_ptr<StreamedUpload>> started =
      StreamedUpload::Start(*store_, key, inode.staged->data_path(), upload, options);
  if (!started.ok()) {
    inode.may_stream = false;
    Bump(metrics_->streamed_fallbacks);
    GiveUpStream(inode, key, Fallback::kNotStarted, started.status());
    return;
  }
  inode.stream = std::move(*started);
  inode.stream->Wrote(0, 0, size);
}

void FileWriter::Truncated(Inode& inode, uint64_t size) {
  // What lies past the new end is not the base's any more, should the file grow again.
  if (inode.base || inode.recovered) inode.touched.Add(size, UINT64_MAX);
  // A failed write past the end is not missed any more.
  for (auto& [fh, entry] : inode.unwritten) entry.ranges.TrimFrom(size);
  std::erase_if(inode.unwritten, [](const auto& entry) { return entry.second.ranges.empty(); });
  if (inode.stream) inode.stream->Truncated(size);
  if (size == 0 && inode.unsaved()) inode.may_stream = true;
  if (size == 0) {  // as for O_TRUNC (MarkDirty)
    inode.created_as.clear();
    inode.recovered.reset();
  }
}

void FileWriter::WriteFailed(Inode& inode, uint64_t fh, uint64_t offset, uint64_t length,
                             const Status& failure) {
  // Only data a writer is changing: a write that failed before it changed an accepted (or
  // recovered) version, which is complete, leaves that version as it is.
  if (!inode.unsaved() || length == 0 || !inode.staged ||
      inode.staged->state() != StagedFile::State::kWriting) {
    return;
  }
  Inode::Unwritten& entry = inode.unwritten[fh];
  if (entry.ranges.empty()) {
    entry.failure = failure;
    entry.serial = ++inode.write_failures;
  }
  entry.ranges.Add(offset, length);
}

std::optional<ETag> FileWriter::KeptBase(const Inode& inode, const std::string& key) {
  if (!inode.base && inode.recovered && inode.recovered->key == key &&
      inode.recovered->condition.if_match && inode.staged) {
    // Which of its bytes were that version's is not known here: all of them, until writes
    // since cover the whole file (an empty one was written onto an empty version).
    const uint64_t size = inode.staged->size();
    if (size > 0 && inode.touched.Covers(0, size)) return std::nullopt;
    return inode.recovered->condition.if_match;
  }
  if (!inode.base || inode.base->key != key || inode.base->etag.empty() || !inode.staged) {
    return std::nullopt;
  }
  // An empty version: whatever was written goes on it (`>>` on an empty log).
  if (inode.base->size == 0) return inode.base->etag;
  const uint64_t old_bytes = std::min(inode.base->size, inode.staged->size());
  if (old_bytes == 0 || inode.touched.Covers(0, old_bytes)) return std::nullopt;
  return inode.base->etag;
}

UploadCondition FileWriter::ConditionOf(const Inode& inode, const std::string& key) {
  UploadCondition condition{KeptBase(inode, key), CreatedHere(inode, key)};
  if (!condition.if_match && !condition.if_none_match) {
    if (const std::optional<UploadCondition> later = Replacing(inode, key)) return *later;
  }
  return condition;
}

std::optional<UploadCondition> FileWriter::Replacing(const Inode& inode, const std::string& key) {
  if (!inode.replacing || inode.replacing->key != key) return std::nullopt;
  return inode.replacing->condition;
}

bool FileWriter::CreatedHere(const Inode& inode, const std::string& key) {
  return !inode.in_store && !inode.base && !inode.created_as.empty() && inode.created_as == key;
}

bool FileWriter::BaseReplaced(const Status& failure) {
  // S3 answers an If-Match on a missing key with NoSuchKey, as AWS documents.
  return failure.code() == StatusCode::kPreconditionFailed ||
         failure.code() == StatusCode::kAlreadyExists ||
         (failure.code() == StatusCode::kNotFound && failure.server_code() == "NoSuchKey");
}

Result<size_t> FileWriter::ReadThroughBase(const StagedFile& staged, uint64_t offset,
                                           std::span<std::byte> buf) {
  const BaseFilledSource source(store_, staged, options_.read_buffer);
  return source.read_at(offset, buf);
}

bool FileWriter::LoseBase(Inode& inode, const std::string& key, bool replaced_after_close,
                          bool by_directory) {
  if (!inode.staged || !inode.unsaved()) return false;
  if (by_directory) replaced_after_close = true;
  const uint64_t size = inode.staged->size();
  // The old version's bytes the file still holds as they were: those never fetched, gone with
  // it, and (of an edit of this key) those read here but not written since.
  const std::vector<ExtentSet::Range> gone = inode.staged->MissingBase(0, size);
  std::vector<ExtentSet::Range> kept;
  if (inode.base && inode.base->key == key) {
    kept = inode.touched.Missing(0, std::min(inode.base->size, size));
  }
  // An earlier mount's edit of the version the key no longer holds: which of its bytes were
  // that version's is not known here, so all of them are kept from it (but those written
  // since).
  const bool recovered_edit = KeptBase(inode, key) && !inode.base;
  if (recovered_edit && size > 0) {
    for (const ExtentSet::Range& range : inode.touched.Missing(0, size)) kept.push_back(range);
  }
  // Written onto an empty version, or under a name created here: all of it was meant to go on
  // what the name held (nothing), which it no longer does.
  const bool onto_nothing =
      size > 0 &&
      ((inode.base && inode.base->key == key && inode.base->size == 0) || CreatedHere(inode, key));
  if (onto_nothing) kept.push_back(ExtentSet::Range{0, size});
  // Written anew and accepted by a close, then uploaded after it: the key holds another
  // client's version since, newer than this file, which stands.
  if (replaced_after_close && size > 0) kept.push_back(ExtentSet::Range{0, size});
  // Created here and still empty: nothing to keep, but the other client's file stands, and the
  // upload is not tried again (every 10 s, then by the next mount).
  const bool created_empty =
      size == 0 && (CreatedHere(inode, key) || recovered_edit || replaced_after_close);
  if (gone.empty() && kept.empty() && !created_empty) return false;
  Inode::Unwritten& entry = inode.unwritten[kLostBase];
  for (const ExtentSet::Range& range : gone) entry.ranges.Add(range.start, range.end - range.start);
  for (const ExtentSet::Range& range : kept) entry.ranges.Add(range.start, range.end - range.start);
  if (entry.serial == 0) {
    std::string why = (inode.staged->has_base() ? inode.staged->base_key() : key) +
                      " changed or was removed on the server since " + key +
                      " was opened for writing, ";
    if (by_directory) {
      why = "a directory was made on the server in the place of " + key +
            ", which no retry gets past";
    } else if (replaced_after_close) {
      why = key + " was stored on the server by another client after this file's writer closed " +
            "it: stored now, this file would undo that newer change";
    } else if (CreatedHere(inode, key)) {
      why = key + " was made on the server by another client since it was created here: " +
            "stored, this file would replace that one";
    } else if (recovered_edit) {
      why = key + " no longer holds the version this edit, accepted by an earlier mount, was " +
            "made to: stored, it would undo another client's change (should that mount have " +
            "stored it just before it stopped, the server holds these bytes already)";
    } else if (!gone.empty()) {
      why +=
          "so the bytes of it that were neither written nor read here cannot be fetched any "
          "more";
    } else if (onto_nothing) {
      why +=
          "and what was written here was to go on the empty file it was: stored, it would "
          "undo that change";
    } else {
      why +=
          "and this edit keeps bytes of the version it was opened from: stored, it would undo "
          "that change";
    }
    entry.failure = IoError(why + " (what the server has now stays)");
    entry.serial = ++inode.write_failures;
  }
  // No version a close accepted, whatever a close or the write-back window said before: a
  // later write keeps no copy of it as one, and a crash sets it aside.
  (void)inode.staged->MarkWriting(key, UploadMetadata(inode));
  return true;
}

Status FileWriter::UnfinishedError(const Inode& inode, const std::string& key) const {
  // The first failure of those still missing: another writer's may have been mended since.
  const Inode::Unwritten* first = nullptr;
  bool lost_base = false;
  for (const auto& [fh, entry] : inode.unwritten) {
    if (first == nullptr || entry.serial < first->serial) {
      first = &entry;
      lost_base = fh == kLostBase;
    }
  }
  const Status failure = first != nullptr ? first->failure : IoError("no write failed");
  if (lost_base) {
    return Status(failure.code(), key + " is not uploaded: " + failure.message(),
                  failure.server_code());
  }
  return Status(failure.code(),
                key + " is not uploaded: a write to it failed (" + failure.message() +
                    ") and no later write put those bytes there",
                failure.server_code());
}

Status FileWriter::SetAsideUnfinished(uint64_t ino, Inode& inode, const std::string& key) {
  Status error = UnfinishedError(inode, key);
  // Its streamed parts never become an object (only the completion would make one).
  GiveUpStream(inode, key, std::nullopt, Status::Ok());
  const uint64_t size = inode.staged->size();
  const bool sparse = inode.staged->has_base() && !inode.staged->present().Covers(0, size);
  // Nothing a writer wrote is there (emptied and never written, or only the stored file's
  // bytes): nothing to keep.
  const bool nothing_written = size == 0 || (inode.base && inode.touched.empty());
  std::string kept_as;
  if (nothing_written) {
    inode.staged->Remove();
  } else {
    Result<std::string> kept = staging_->SetAside(*inode.staged, key);
    if (kept.ok()) {
      kept_as = *std::move(kept);
      Bump(metrics_->unfinished_set_aside);
    } else {
      // Left where it is, with its record (kWriting), which has the next mount set it aside.
      // The file moves on all the same: its readers never see it, and a version a close
      // accepted goes up.
      kept_as = inode.staged->data_path() + " (it could not move: " + kept.status().message() +
                "; the next mount sets it aside)";
    }
  }
  Log(LogLevel::kError,
      error.message() + ", so it is not what its writer meant it to be and does not replace " +
          (inode.accepted_copy ? "the version closed before"
           : inode.in_store    ? "the stored file"
                               : "anything (it was new)") +
          (nothing_written
               ? "; it holds nothing its writers wrote, and is dropped"
               : "; its " + std::to_string(size) + " bytes are in " + kept_as +
                     (sparse ? " (holes where the stored file's bytes were not fetched)" : "") +
                     (error.code() == StatusCode::kNoSpace
                          ? ", taking room in cache_dir until removed"
                          : "")));
  inode.staged.reset();
  inode.unwritten.clear();
  inode.page_version = ETag();  // the kernel's pages hold the data set aside
  inode.pages_drop_queued = true;
  meta_cache_->Invalidate(key);
  if (inode.accepted_copy) {
    // The version a close accepted is the file again, waiting for its upload as before.
    inode.staged = std::move(inode.accepted_copy);
    inode.attr.size = inode.staged->size();
    return error;
  }
  inode.base.reset();
  inode.touched.Clear();
  inode.may_stream = false;
  inode.state = Inode::FileState::kStored;
  // A metadata change held when the writer began (and what joined it since) still applies to
  // the object, as it would after a crash: held again, and due as a held change is.
  if (std::optional<HeldChange> held = MetadataCoalescer::Uncarry(inode.carried)) {
    ObjectInfo info = held->object;
    info.key = key;
    info.metadata = held->metadata;
    info.has_metadata = true;
    MetaRecord shown = attrs_->FromInfo(info, false);
    shown.complete = true;
    shown.own_write = held->own_write;
    inode.attr = ObjectAttrs::ToAttr(ino, shown);
    inode.extra_metadata = WithoutPosixMetadata(held->metadata);
    inode.pending_metadata = std::move(held);
    meta_cache_->Put(key, shown);
    queue_->ScheduleNoLaterThan(ino, clock_->now() + std::chrono::nanoseconds(static_cast<int64_t>(
                                                         options_.hold_metadata * 1e9)));
  }
  inode.has_local_data.store(inode.pending_metadata.has_value());
  return error;
}

void FileWriter::Retagged(Inode& inode, const std::string& key, const ETag& from, const ETag& to) {
  if (inode.staged && inode.staged->base_key() == key && inode.staged->base_etag() == from) {
    inode.staged->Rebase(key, to);
  }
  if (inode.base && inode.base->key == key && inode.base->etag == from) inode.base->etag = to;
}

std::vector<EditPiece> EditPieces(const ExtentSet& touched, uint64_t base_size, uint64_t size,
                                  uint64_t part, bool whole_parts) {
  std::vector<EditPiece> pieces;
  part = std::max<uint64_t>(part, 1);
  if (whole_parts) {
    for (uint64_t offset = 0; offset < size; offset += part) {
      const uint64_t length = std::min(part, size - offset);
      pieces.push_back(
          {offset, length, offset + length <= base_size && !touched.Overlaps(offset, length)});
    }
    return pieces;
  }
  // The ranges to upload: what was touched, and what lies past the base, with short gaps
  // between them filled.
  ExtentSet upload = touched;
  if (size > base_size) upload.Add(base_size, size - base_size);
  upload.TrimFrom(size);
  std::vector<ExtentSet::Range> ranges;
  for (const ExtentSet::Range& r : upload.Ranges()) {
    if (!ranges.empty() && r.start - ranges.back().end < kMinEditCopy) {
      ranges.back().end = r.end;
    } else {
      ranges.push_back(r);
    }
  }
  // And short untouched stretches at either end.
  if (!ranges.empty() && ranges.front().start < kMinEditCopy) ranges.front().start = 0;
  if (!ranges.empty() && size - ranges.back().end < kMinEditCopy) ranges.back().end = size;
  auto add = [&](uint64_t start, uint64_t end, bool copy) {
    const uint64_t piece = copy ? std::max(kEditCopyPiece, part) : part;
    for (uint64_t offset = start; offset < end; offset += piece) {
      pieces.push_back({offset, std::min(piece, end - offset), copy});
    }
  };
  uint64_t at = 0;
  for (const ExtentSet::Range& r : ranges) {
    add(at, r.start, /*copy=*/true);
    add(r.start, r.end, /*copy=*/false);
    at = r.end;
  }
  add(at, size, /*copy=*/true);  // within the base: past it everything is uploaded
  return pieces;
}

std::optional<Result<ObjectInfo>> FileWriter::UploadEdit(Inode& inode, const std::string& key,
                                                         const Metadata& metadata) {
  if (!inode.base || inode.base->key != key || stream_pool_ == nullptr) return std::nullopt;
  // (Asked now: SFTP learns whether the server copies ranges at its first connection.)
  const Capabilities caps = store_->capabilities();
  if (!caps.copy_ranges) return std::nullopt;
  const ObjectInfo base = *inode.base;
  const uint64_t size = inode.staged->size();
  const uint64_t part =
      caps.part_size > 0 ? std::max(caps.part_size, caps.min_part_size) : kDefaultStreamPart;
  // Worth it only when a whole part of the base is left as it was.
  bool copies = false;
  for (uint64_t offset = 0; offset + part <= std::min(size, base.size) && !copies; offset += part) {
    copies = !inode.touched.Overlaps(offset, part);
  }
  if (!copies) return std::nullopt;
  UploadOptions options;
  options.size_hint = size;
  options.part_size = part;
  options.metadata = metadata;
  KeepStoredEncryption(inode, options);
  Status failed;
  // Where the server copies the whole base at once (SFTP: cp, which clones the file where the
  // file system can), it does so first, and the untouched ranges need no copy of their own.
  bool whole_copied = false;
  Result<std::unique_ptr<objfs::Upload>> started = UnsupportedError("not started");
  for (bool copy_whole = true;;) {
    started = store_->start_upload(key, options);
    if (!started.ok() && started.status().code() == StatusCode::kTimedOut) {
      // The server did not answer within operation_timeout: a whole put would fetch what the
      // file lacks and wait as long again. The close reports it; the data stays accepted and
      // the retry tries the edit again.
      return Result<ObjectInfo>(started.status());
    }
    if (!started.ok()) {
      Bump(metrics_->streamed_fallbacks);
      GiveUpStream(inode, key, Fallback::kEditFailed, started.status());
      return std::nullopt;
    }
    if (!copy_whole) break;
    const Status whole = (*started)->copy_whole(base);
    whole_copied = whole.ok();
    if (whole.ok() || whole.code() == StatusCode::kUnsupported) break;
    if (whole.code() == StatusCode::kPreconditionFailed) {
      failed = whole;  // the base changed: as a failed copy of a range
      break;
    }
    // The whole copy's end is unknown (SFTP: cp may still write that upload's temporary
    // file): that upload is left to its abort, and the edit starts again on a new one, with
    // copies of the ranges.
    Log(LogLevel::kInfo, "editing " + key + ": " + whole.ToString() + "; copying its ranges");
    stream_pool_->Submit([abandoned = std::shared_ptr<objfs::Upload>(std::move(*started))] {
      (void)abandoned->abort();
    });
    copy_whole = false;
  }
  objfs::Upload& upload = **started;
  const std::vector<EditPiece> pieces =
      EditPieces(inode.touched, base.size, size, upload.part_size(), upload.whole_parts());
  const FileSource source = inode.staged->Source();
  // Copies of the untouched ranges and uploads of the others, as many at a time as a streamed
  // upload sends (the store's parallel_parts).
  std::vector<std::future<Status>> parts;
  size_t collected = 0;
  auto collect = [&] {
    Status s = parts[collected++].get();
    // The first real failure, not a piece skipped for it.
    if (!s.ok() && (failed.ok() || failed.code() == StatusCode::kCancelled)) failed = s;
  };
  const size_t at_once = std::max<size_t>(options_.stream_parts_in_flight, 1);
  // Once a piece failed the upload is given up: pieces not started yet are skipped (on a server
  // that stopped answering each would wait operation_timeout, stream_threads at a time).
  std::atomic<bool> gave_up{false};
  for (const EditPiece& piece : pieces) {
    const uint64_t offset = piece.offset;
    const uint64_t length = piece.length;
    const bool copy = piece.copy;
    if (!failed.ok() || gave_up.load()) break;
    if (copy && whole_copied) continue;
    while (parts.size() - collected >= at_once) collect();
    if (!failed.ok() || gave_up.load()) break;
    if (!copy) failed = FetchStaged(inode, key, offset, length);
    if (!failed.ok()) break;
    parts.push_back(stream_pool_->Async([&upload, &source, &base, &gave_up, offset, length, copy] {
      if (gave_up.load()) return Status(StatusCode::kCancelled, "another piece failed");
      Status sent = copy ? upload.copy(offset, base, offset, length)
                         : upload.write(offset, source, offset, length);
      if (!sent.ok()) gave_up.store(true);
      return sent;
    }));
  }
  while (collected < parts.size()) collect();
  if (failed.ok()) {
    PutOptions put;
    put.metadata = metadata;
    KeepOthersChmod(inode, put);
    // Its pieces checked the base as they copied it; the completion checks it is still there,
    // so that another client's version stored meanwhile is not undone. On a failure the whole
    // put below fails the same way, and the edit is set aside (LoseBase).
    put.if_match = KeptBase(inode, key);
    Result<ObjectInfo> done = upload.complete(size, put);
    if (done.ok()) return done;
    failed = done.status();
  } else {
    // Aborted on the pool: an abort waits for the server like any request.
    stream_pool_->Submit([abandoned = std::shared_ptr<objfs::Upload>(std::move(*started))] {
      (void)abandoned->abort();
    });
  }
  if (failed.code() == StatusCode::kTimedOut) {
    // The server did not answer within operation_timeout: a whole put now would wait as long
    // again. The close reports it; the data stays accepted and the retry puts it.
    return Result<ObjectInfo>(failed);
  }
  Bump(metrics_->streamed_fallbacks);
  GiveUpStream(inode, key, Fallback::kEditFailed, failed);
  return std::nullopt;
}

void FileWriter::GiveUpStream(Inode& inode, const std::string& key, std::optional<Fallback> why,
                              const Status& detail) {
  if (inode.stream) {
    inode.stream->Abandon();  // aborted once its parts in flight return
    inode.stream.reset();
    if (why) Bump(metrics_->streamed_fallbacks);
  }
  if (!why) return;
  inode.may_stream = false;
  std::atomic<bool>& logged = fallback_logged_[static_cast<size_t>(*why)];
  if (logged.exchange(true)) return;
  const char* reason = "";
  switch (*why) {
    case Fallback::kNotStarted:
      reason = "its streamed upload could not start";
      break;
    case Fallback::kPartFailed:
      reason = "a part of its streamed upload failed";
      break;
    case Fallback::kCompleteFailed:
      reason = "completing its streamed upload failed";
      break;
    case Fallback::kRenamed:
      reason = "it was renamed while its parts went up";
      break;
    case Fallback::kReplaced:
      reason = "it was written again after its close";
      break;
    case Fallback::kEditFailed:
      reason = "copying its unchanged parts on the server failed";
      break;
    case Fallback::kCount:
      break;
  }
  Log(LogLevel::kInfo, "uploading " + key + " whole: " + reason +
                           (detail.ok() ? "" : " (" + detail.ToString() + ")") +
                           "; later files given up for this reason are not logged");
}

std::optional<Result<ObjectInfo>> FileWriter::FinishStream(
    Inode& inode, const std::string& key, Metadata* metadata,
    const std::optional<UploadCondition>& later) {
  if (!inode.stream) return std::nullopt;
  const std::shared_ptr<StreamedUpload> stream = inode.stream;
  const uint64_t size = inode.staged->size();
  if (size < stream->part_size()) {  // cut back to a small file: one put
    GiveUpStream(inode, key, std::nullopt, Status::Ok());
    return std::nullopt;
  }
  PutOptions put;
  put.metadata = *metadata;
  KeepOthersChmod(inode, put);
  bool without_mtime = false;
  if (caps_.attributes_by_copy) {
    // Only the writes' mtime changed since the start: the object's Last-Modified stands for it,
    // rather than a self-copy of the whole object (an mtime set before the start, by utimens,
    // is kept at that cost).
    Metadata rest = *metadata;
    rest.erase(kMtimeMetadata);
    // (An mtime ahead of now was set, touch -d or another machine's clock: it is kept.)
    if (rest == stream->metadata() && inode.attr.mtime_ns >= stream->started_ns() &&
        inode.attr.mtime_ns <= NowNs()) {
      put.metadata = std::move(rest);
      without_mtime = true;
    }
  }
  const std::string streamed_key = stream->key();
  if (streamed_key != key && !caps_.native_rename && !caps_.server_side_copy) {
    GiveUpStream(inode, key, Fallback::kRenamed, Status::Ok());
    return std::nullopt;
  }
  // Renamed meanwhile: the rename removed the old name's object, and whatever holds that name
  // now (a file created or moved there since) is another file, never completed over.
  if (streamed_key != key || CreatedHere(inode, key)) {
    put.if_none_match = true;
  } else if (later) {
    put.if_match = later->if_match;
    put.if_none_match = later->if_none_match;
  }
  Result<ObjectInfo> done = stream->Finish(size, put);
  const Status part_failure = stream->failure();
  if (!done.ok()) {
    const Status& failure = part_failure.ok() ? done.status() : part_failure;
    if (failure.code() == StatusCode::kTimedOut) {
      // The server did not answer within operation_timeout: a whole put now would wait as long
      // again. The close reports it; the data stays accepted and the retry puts it whole.
      GiveUpStream(inode, key, std::nullopt, Status::Ok());
      return Result<ObjectInfo>(failure);
    }
    GiveUpStream(inode, key, part_failure.ok() ? Fallback::kCompleteFailed : Fallback::kPartFailed,
                 failure);
    return std::nullopt;
  }
  GiveUpStream(inode, key, std::nullopt, Status::Ok());
  if (streamed_key != key) {
    // Renamed in the write-back window (rsync's temporary file): completed under the name it
    // had, then moved on the server. The move cannot ask the new name for a version: an upload
    // after the close that may only go over the one it replaced checks it just before (a round
    // trip's window).
    if (later) {
      PutOptions asked;
      asked.if_match = later->if_match;
      asked.if_none_match = later->if_none_match;
      if (Status holds =
              CheckPutConditions(*store_, key, asked, "moving " + streamed_key + " to " + key);
          !holds.ok()) {
        (void)store_->remove(streamed_key);
        return Result<ObjectInfo>(holds);
      }
    }
    Status moved;
    if (caps_.native_rename) {
      moved = store_->rename(streamed_key, key);
      if (moved.ok()) done->key = key;
    } else {
      Result<ObjectInfo> copied = store_->copy(*done, key, CopyOptions{});
      moved = copied.status();
      if (copied.ok()) {
        moved = store_->remove(streamed_key);
        done = std::move(copied);
      }
    }
    if (!moved.ok()) {
      (void)store_->remove(streamed_key);
      GiveUpStream(inode, key, Fallback::kRenamed, moved);
      Bump(metrics_->streamed_fallbacks);
      return std::nullopt;
    }
  }
  if (without_mtime) *metadata = std::move(put.metadata);
  return done;
}

Status FileWriter::Close(uint64_t ino, Inode& inode) {
  if (Unfinished(inode)) {
    auto key = KeyOf(ino);
    if (!key.ok()) return key.status();
    Status error = SetAsideUnfinished(ino, inode, *key);
    if (!inode.unsaved()) return error;
    // The version a close accepted before is the file again: uploaded as it would have been.
    Status closed = Close(ino, inode);
    return closed.ok() ? error : closed;
  }
  if (writeback()) return DeferUpload(ino, inode);
  auto key = KeyOf(ino);
  Status status = key.ok() ? Upload(inode, *key) : key.status();
  if (status.ok()) queue_->Succeeded(ino);
  // Its base is gone (LoseBase): set aside now, by the caller (Filesystem::Release).
  if (Unfinished(inode)) return status;
  // close(2) reported the failure; the data stays staged and is tried again in the background
  // (and at unmount at the latest).
  if (!status.ok()) RetryLater(ino, status);
  return status;
}

Status FileWriter::JoinHeldMetadata(Inode& inode, const std::string& key, const FileAttr& attr,
                                    const Metadata& extra) {
  const FileAttr old_attr = inode.attr;
  const Metadata old_extra = inode.extra_metadata;
  Metadata metadata = extra;
  SetPosixMetadata(attr.mode, attr.uid, attr.gid, attr.mtime_ns, &metadata);
  HeldChange& pending = *inode.pending_metadata;
  ObjectInfo info = pending.object;
  const bool own_write = pending.own_write;
  inode.attr = attr;
  inode.extra_metadata = extra;
  Status recorded = coalescer_.Join(pending, key, metadata);
  if (!recorded.ok()) {
    // Without a crash record the change goes to the store now.
    Log(LogLevel::kWarn, "changing the metadata of " + key + " at once: " + recorded.message());
    Metadata previous = std::move(pending.metadata);
    pending.metadata = metadata;
    Status applied = ApplyHeldMetadata(inode, key);
    if (!applied.ok()) {
      if (inode.pending_metadata) inode.pending_metadata->metadata = std::move(previous);
      inode.attr = old_attr;
      inode.extra_metadata = old_extra;
    }
    return applied;
  }
  info.key = key;
  info.metadata = std::move(metadata);
  info.has_metadata = true;
  MetaRecord updated = attrs_->FromInfo(info, false);
  updated.complete = true;
  updated.own_write = own_write;
  meta_cache_->Put(key, updated);
  Bump(metrics_->metadata_deferred);
  return Status::Ok();
}

Result<FileAttr> FileWriter::ChangeUnsavedMetadata(
    uint64_t ino, Inode& inode, const std::string& key,
    const std::function<Status(FileAttr&, Metadata&)>& change) {
  FileAttr attr = inode.attr;
  Metadata extra = inode.extra_metadata;
  OBJFS_RETURN_IF_ERROR(change(attr, extra));
  inode.attr = attr;
  inode.extra_metadata = std::move(extra);
  attr.ino = ino;
  attr.size = inode.staged->size();
  // A closed file in the write-back window: a crash must upload it with this change (which
  // may upload it at once, and drop its staging file).
  if (writeback() && inode.open_handles.load() == 0) {
    OBJFS_RETURN_IF_ERROR(DeferUpload(ino, inode));
    return attr;
  }
  // A record there carries the change too (its state stays: a file still being written
  // is not accepted by a chmod).
  const Metadata metadata = UploadMetadata(inode);
  Status described = inode.staged->Describe(key, metadata);
  if (described.ok() && inode.accepted_copy) {
    described = inode.accepted_copy->Describe(key, metadata);
  }
  if (described.ok() && inode.carried) {
    // So does the record of a change held before the write, for the object as it was:
    // its own metadata (its mtime, not the writer's) with this change too.
    ObjectInfo held;
    held.key = key;
    held.metadata = inode.carried.metadata;
    held.has_metadata = true;
    FileAttr held_attr = ObjectAttrs::ToAttr(ino, attrs_->FromInfo(held, false));
    Metadata held_extra = WithoutPosixMetadata(inode.carried.metadata);
    described = change(held_attr, held_extra);
    if (described.ok()) {
      Metadata changed = std::move(held_extra);
      SetPosixMetadata(held_attr.mode, held_attr.uid, held_attr.gid, held_attr.mtime_ns, &changed);
      described = inode.carried.record->Describe(key, inode.carried.etag, changed);
      if (described.ok()) inode.carried.metadata = std::move(changed);
    }
  }
  if (!described.ok())
    Log(LogLevel::kWarn, "a crash record of " + key + " is stale: " + described.message());
  return attr;
}

Status FileWriter::Flush(uint64_t ino, const std::shared_ptr<Inode>& inode, bool with_metadata,
                         bool accept) {
  MutexLock lock(&inode->mu);
  if (inode->removed()) return Status::Ok();
  const bool upload = inode->unsaved();
  if (!upload && !(with_metadata && inode->pending_metadata)) return Status::Ok();
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  Status done = upload ? Upload(*inode, key, accept) : ApplyHeldMetadata(*inode, key);
  if (done.ok()) queue_->Succeeded(ino);
  return done;
}

Status FileWriter::DeferUpload(uint64_t ino, Inode& inode) {
  auto key = KeyOf(ino);
  if (!key.ok()) return key.status();
  if (Unfinished(inode)) return UnfinishedError(inode, *key);  // never accepted
  const Metadata metadata = UploadMetadata(inode);
  inode.staged->SetCondition(*key, ConditionOf(inode, *key));
  // The record names what a crash before the upload must still upload at the next mount; the
  // data is on disk first, so that after a power loss no record describes lost data. (As with a
  // local file, only fsync, which uploads, makes the data safe from a power loss.)
  Status recorded = inode.staged->MarkAccepted(*key, metadata);
  if (recorded.ok()) MetadataCoalescer::Forget(inode.carried);  // this record carries the change
  if (recorded.ok() && inode.accepted_copy) {                   // superseded by this version
    inode.accepted_copy->Remove();
    inode.accepted_copy.reset();
  }
  if (!recorded.ok()) {
    // Without that record (the cache disk is full) the window would hold data a crash loses:
    // upload it now, as without a window.
    Log(LogLevel::kWarn, "uploading " + *key + " at close: " + recorded.message());
    Status uploaded = Upload(inode, *key);
    // (Unfinished, its base gone: set aside by the release.)
    if (!uploaded.ok() && !Unfinished(inode)) RetryLater(ino, uploaded);
    return uploaded;
  }
  auto due =
      clock_->now() + std::chrono::nanoseconds(static_cast<int64_t>(options_.writeback * 1e9));
  queue_->ScheduleUnlessQueued(ino, due);  // an earlier close's schedule stands
  return Status::Ok();
}

void FileWriter::NoteUploadFailure(const Status& failure, std::chrono::nanoseconds retry) {
  Bump(metrics_->writeback_failures);
  char when[64];
  std::snprintf(when, sizeof(when), "; kept in cache_dir, retrying in %.0f s",
                std::chrono::duration<double>(retry).count());
  // Data a close or the write-back window accepted is not on the server yet: an error, even
  // though it is kept and retried.
  Log(LogLevel::kError, failure.ToString() + when);
}

void FileWriter::RetryLater(uint64_t ino, const Status& failure) {
  NoteUploadFailure(failure, queue_->RetryLater(ino));
  // Without a write-back window or held metadata nothing else started the thread, and the retry
  // the log line promises would wait for the unmount.
  if (options_.writeback_thread) queue_->Start();
}

uint64_t FileWriter::MakeRoom(const Inode* busy, uint64_t needed) {
  auto upload_early = [&](uint64_t ino) -> std::optional<Result<uint64_t>> {
    std::shared_ptr<Inode> inode = inodes_->Get(ino);
    if (inode == nullptr || inode.get() == busy) return std::nullopt;
    // Never waits for another inode's lock while holding `busy`'s.
    if (!inode->mu.TryLock()) return std::nullopt;
    std::optional<Result<uint64_t>> freed;
    auto key = KeyOf(ino);
    if (inode->unsaved() && inode->open_handles.load() == 0 && key.ok()) {
      const uint64_t size = inode->staged->size();
      Status s = Upload(*inode, *key);
      if (s.ok()) {
        freed = size;
        queue_->Succeeded(ino);
      } else if (Unfinished(*inode)) {
        queue_->RetryLater(ino);  // its base gone: the queue sets it aside
      } else {
        RetryLater(ino, s);  // logged with the delay its failures in a row give it
      }
    }
    inode->mu.Unlock();
    return freed;
  };
  size_t uploaded = 0;
  const uint64_t freed = queue_->MakeRoom(needed, upload_early, &uploaded);
  if (uploaded > 0) {
    Log(LogLevel::kWarn, "cache_dir is full: uploaded " + std::to_string(uploaded) +
                             " file(s) of the write-back window early");
  }
  return freed;
}

Status FileWriter::FlushAll() {
  // In parallel: at unmount a write-back window may have left many small files to upload.
  std::unordered_map<uint64_t, std::shared_ptr<Inode>> local;
  std::vector<uint64_t> inos;
  for (auto& [ino, inode] : inodes_->WithLocalData("")) {
    inos.push_back(ino);
    local.emplace(ino, std::move(inode));
  }
  // Its writers are still at work as the mount goes, and left it unfinished (or its upload
  // found its base gone, LoseBase): set aside as a crash would, and the version a close
  // accepted, if any, goes up. True when it was.
  auto set_aside = [&](uint64_t ino, Inode& inode) -> Result<bool> {
    MutexLock lock(&inode.mu);
    if (!Unfinished(inode)) return false;
    OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
    (void)SetAsideUnfinished(ino, inode, key);  // logged
    return true;
  };
  // Emptied by a writer still at work (`cmd > file`), nothing written yet: not what its writer
  // meant the file to be either, and nothing of it to keep. The stored file stays, and so does a
  // version a close accepted, staged for the next mount.
  auto only_emptied = [&](uint64_t ino, Inode& inode) -> bool {
    MutexLock lock(&inode.mu);
    if (!EmptiedWhileWritten(inode)) return false;
    Result<std::string> key = KeyOf(ino);
    Log(LogLevel::kWarn,
        (key.ok() ? *key : "inode " + std::to_string(ino)) +
            " was emptied by a writer still at work as objfs stopped: not uploaded, the stored "
            "file stays" +
            (inode.accepted_copy ? " (the version a close accepted is uploaded by the next mount)"
                                 : ""));
    return true;
  };
  Status first = queue_->RunAll(inos, [&](uint64_t ino) {
    const std::shared_ptr<Inode>& inode = local.at(ino);
    if (only_emptied(ino, *inode)) return Status::Ok();
    OBJFS_RETURN_IF_ERROR(set_aside(ino, *inode).status());
    Status flushed = Flush(ino, inode);
    if (flushed.ok()) return flushed;
    Result<bool> aside = set_aside(ino, *inode);
    if (!aside.ok()) return aside.status();
    return *aside ? Flush(ino, inode) : flushed;
  });
  // Files taken over from an earlier mount that this uploaded (or that were removed or
  // uploaded meanwhile) are done: the log says so when they were the last.
  for (uint64_t ino : recovery_.Pending()) {
    bool done = true;
    if (std::shared_ptr<Inode> inode = inodes_->Find(ino)) {
      MutexLock lock(&inode->mu);
      done = !inode->unsaved();
    }
    if (done) recovery_.Done(ino);
  }
  return first;
}

Status FileWriter::UploadDue() {
  // (Without a write-back window or held metadata changes, the queue holds only the files
  // RecoverStaged took over and failed uploads to retry.)
  return queue_->RunDue();
}

Status FileWriter::UploadDueFile(uint64_t ino) {
  std::shared_ptr<Inode> inode = inodes_->Get(ino);
  if (inode == nullptr) return Status::Ok();
  Status status;
  bool set_aside = false;
  {
    MutexLock lock(&inode->mu);
    if (inode->removed()) return Status::Ok();
    if (inode->unsaved()) {
      // Open again: its last release schedules it anew.
      if (inode->open_handles.load() > 0) return Status::Ok();
      auto key = KeyOf(ino);
      status = key.ok() ? Upload(*inode, *key) : key.status();
      if (key.ok() && Unfinished(*inode)) {
        // Its base is gone (LoseBase): no retry can upload it. Set aside (logged), and the file
        // is what the store has, or the version a close accepted before, due again.
        (void)SetAsideUnfinished(ino, *inode, *key);
        status = Status::Ok();
        set_aside = true;
        if (inode->unsaved()) queue_->RetryLater(ino);
      }
    } else if (inode->pending_metadata) {
      auto key = KeyOf(ino);
      status = key.ok() ? ApplyHeldMetadata(*inode, *key) : key.status();
    } else {
      return Status::Ok();  // clean: uploaded, renamed or removed meanwhile
    }
    if (!status.ok()) RetryLater(ino, status);
  }
  if (status.ok() && options_.clear_abandoned_uploads) options_.clear_abandoned_uploads();
  // The kernel's pages and size were the data set aside.
  if (set_aside && options_.data_set_aside) options_.data_set_aside(ino);
  inodes_->Forget(ino, 0);  // an inode the kernel forgot goes once it is clean
  return status;
}

bool FileWriter::Adopt(
    const StagedLeftover& left,
    const std::function<void(const StagedLeftover&, const std::string&)>& set_aside) {
  Result<std::unique_ptr<StagedFile>> file = staging_->Adopt(left);
  if (file.ok() && (*file)->has_base()) {
    // A sparse file: the bytes it lacks are its base's, fetched now by the base's ETag (a
    // changed base would mix another client's bytes into what the close accepted).
    bool base_changed = false;
    Status filled = FillFromBase(**file, nullptr, left.key, 0, (*file)->size(), &base_changed);
    if (base_changed) {
      const bool maybe_stored = MayBeStoredBeforeTheStop(left, **file);
      file->reset();
      set_aside(left, " was accepted by a close, but " + left.base_key +
                          ", which its unwritten bytes were to come from, changed or was "
                          "removed on the server since, so it cannot be completed" +
                          (maybe_stored ? std::string(" (the file there has its size, mtime and "
                                                      "written bytes: the mount that stopped may "
                                                      "have stored it just before; if the file "
                                                      "is as you meant it, delete this copy)")
                                        : std::string()));
      return false;
    }
    if (filled.code() == StatusCode::kNoSpace) {
      // No room in cache_dir for what it lacks: it stays sparse, and its upload reads those
      // bytes from the base as it sends them (Upload), by the same ETag. Left here, it would
      // wait for room that the mount's own work may never leave.
      Log(LogLevel::kWarn, "staged data of " + left.key + " lacks bytes of " + left.base_key +
                               " that cache_dir has no room for; its upload reads them from "
                               "the server: " +
                               filled.message());
    } else if (!filled.ok()) {
      file = filled;
    }
  }
  if (!file.ok()) {
    Log(LogLevel::kError, "staged data of " + left.key + " stays in " + left.data_path +
                              " for the next mount: " + file.status().message());
    return false;
  }
  const uint64_t size = (*file)->size();
  ObjectInfo info;
  info.key = left.key;
  info.size = size;
  info.metadata = left.metadata;
  info.has_metadata = true;
  info.mtime_ns = ModifiedNs(left.data_path);  // when the metadata names no mtime
  const MetaRecord rec = attrs_->FromInfo(info, false);
  const uint64_t ino = inodes_->Acquire(left.key, 0);
  std::shared_ptr<Inode> inode = inodes_->Get(ino);
  {
    MutexLock lock(&inode->mu);
    inode->attr = ObjectAttrs::ToAttr(ino, rec);
    inode->extra_metadata = WithoutPosixMetadata(left.metadata);
    inode->staged = std::move(*file);
    // Where the record names it: the encryption of the object the data came from, kept even
    // under a name the data was renamed to before the crash. Otherwise the store asks.
    inode->stored_encryption = inode->staged->encryption();
    inode->state = Inode::FileState::kUnsaved;
    // Whether the store has an older object there is not known: a rename before the upload
    // removes the old name, which costs nothing when there is none. Unless the record says
    // the file was created here: its upload must find the name free, as that mount's would
    // have; and an edit's, the version it was made to.
    inode->in_store = !left.condition.if_none_match;
    if (left.condition.if_none_match) inode->created_as = left.key;
    inode->recovered = Inode::KeyCondition{left.key, left.condition};
    inode->has_local_data.store(true);
  }
  meta_cache_->Invalidate(left.key);
  recovery_.Add(ino, size);
  queue_->ScheduleAt(ino, clock_->now());  // due at once, window or not
  return true;
}

bool FileWriter::MayBeStoredBeforeTheStop(const StagedLeftover& left, const StagedFile& file) {
  Result<ObjectInfo> there = store_->head(left.key);
  if (!there.ok() || there->size != file.size() || there->etag.empty()) return false;
  const std::optional<int64_t> ours = ParsePosixMetadata(left.metadata).mtime_ns;
  const std::optional<int64_t> stored = ParsePosixMetadata(there->metadata).mtime_ns;
  constexpr int64_t kSecond = 1000000000;
  // A store that keeps whole seconds (SFTP) has the second of the record's time.
  if (!ours || !stored ||
      (*stored != *ours && (*stored % kSecond != 0 || *stored != *ours - *ours % kSecond))) {
    return false;
  }
  return SameBytesWhere(store_, left.key, *there, file.Source(), file.present().Ranges(),
                        options_.read_buffer);
}

Status FileWriter::RecoverStaged() {
  std::vector<std::string> unreadable;
  std::vector<StagedLeftover> without_data;
  OBJFS_ASSIGN_OR_RETURN(auto leftovers, staging_->Leftovers(&unreadable, &without_data));
  for (const std::string& data_path : unreadable) {
    Log(LogLevel::kError,
        "staged data " + data_path +
            " is not uploaded: the record naming its object is damaged; the data is left there");
  }
  for (const StagedLeftover& left : without_data) {
    // Remove() unlinks the data before the record: a stop between the two leaves this after
    // an upload that completed. Otherwise the data was removed by hand.
    Log(LogLevel::kInfo,
        "the staging record " + left.meta_path + (left.key.empty() ? "" : " of " + left.key) +
            (left.state == StagedUploadRecord::State::kAccepted ? " (accepted)" : "") +
            " has no data file: removed (its upload completed as the last mount stopped, or "
            "the data was removed by hand)");
  }
  // Kept for the user to look at, never uploaded.
  auto set_aside = [this](const StagedLeftover& left, const std::string& why) {
    struct stat st;
    const uint64_t bytes =
        ::stat(left.data_path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    Result<std::string> kept = staging_->SetAside(left);
    if (!kept.ok()) {
      Log(LogLevel::kError, "unfinished data of " + left.key + " stays in " + left.data_path +
                                ": " + kept.status().message());
      return;
    }
    std::string sparse;
    if (!left.base_key.empty()) {
      // Only some ranges hold its bytes; the rest was never fetched from the object it was
      // staged from and is a hole (zeros) in the file set aside. An accepted record names them
      // to the byte as its close left them (a read since may have fetched more); that of a
      // file still being written predates its last writes, and the file system knows them only
      // to its blocks.
      if (left.state == StagedUploadRecord::State::kAccepted) {
        std::string ranges;
        for (const ExtentSet::Range& r : left.present.Ranges()) {
          ranges += " [" + std::to_string(r.start) + ", " + std::to_string(r.end) + ")";
        }
        sparse = " (staged sparse from " + left.base_key +
                 ": what was written or fetched by its close is at" +
                 (ranges.empty() ? std::string(" no range") : ranges) +
                 ", the rest is a hole or bytes fetched since)";
      } else {
        sparse = " (staged sparse from " + left.base_key + ": only" + DataRanges(*kept) +
                 " (to the file system's blocks) hold written or fetched bytes, the rest is a "
                 "hole)";
      }
    }
    Log(LogLevel::kWarn, left.key + why + ": not uploaded; its " + std::to_string(bytes) +
                             " bytes are in " + *kept + sparse);
  };
  Status first;
  // The files to take over, one per key: should two accepted versions name the same key, the
  // newer one is the file.
  std::map<std::string, size_t> adopt;
  for (size_t i = 0; i < leftovers.size(); ++i) {
    const StagedLeftover& left = leftovers[i];
    if (!left.publishable()) {
      struct stat st {};
      if (left.state == StagedUploadRecord::State::kWriting && left.base_key.empty() &&
          ::stat(left.data_path.c_str(), &st) == 0 && st.st_size == 0) {
        // Created or emptied (O_TRUNC, cp's destination before a copy on the server) and not
        // written since: not uploaded either, but an empty file set aside is only noise. (An
        // accepted one that is empty now lost its bytes: set aside below, which says so.)
        Status dropped = staging_->Drop(left);
        Log(LogLevel::kWarn,
            left.key +
                " was being written when objfs stopped, and no close or fsync had accepted it: "
                "not uploaded; it was empty, so nothing is set aside" +
                (dropped.ok() ? "" : " (its empty staged file stays: " + dropped.message() + ")"));
        continue;
      }
      // Written and never closed or synced, or accepted and cut short since (a power loss
      // before the disk had all of it): not what its writer meant the file to be, so it never
      // replaces the object.
      if (left.state == StagedUploadRecord::State::kAccepted &&
          ::stat(left.data_path.c_str(), &st) == 0) {
        set_aside(left,
                  " was accepted by a close, fsync or the write-back window with " +
                      std::to_string(left.size) + " bytes, but its staged file holds " +
                      std::to_string(st.st_size) +
                      " bytes now (cut short, as by a power loss before the disk had it all)");
      } else {
        set_aside(left,
                  " was being written when objfs stopped, and no close or fsync had accepted it");
      }
      continue;
    }
    auto [it, inserted] = adopt.try_emplace(left.key, i);
    if (inserted) continue;
    size_t older = i;
    if (ModifiedNs(left.data_path) > ModifiedNs(leftovers[it->second].data_path)) {
      older = it->second;
      it->second = i;
    }
    set_aside(leftovers[older], " has a newer accepted version");
  }
  // Metadata changes that had not reached the store, applied here rather than in the
  // background: they move no data (a HEAD and a self-copy each, and only the changes of the
  // last metadata_delay seconds), and until then nothing would show them. The uploads of the
  // files taken over below carry their own metadata.
  Status held = coalescer_.Recover();
  if (!held.ok() && first.ok()) first = held;
  // Staged copies no record names were already in the store, or belonged to removed files.
  size_t unrecorded = 0;
  Result<uint64_t> freed = staging_->RemoveUnrecorded(&unrecorded);
  if (freed.ok() && unrecorded > 0) {
    Log(LogLevel::kInfo,
        "removed " + std::to_string(unrecorded) + " staged copies (" + std::to_string(*freed) +
            " bytes) that an earlier mount had already uploaded or whose files were removed");
  }
  // The accepted files are served from cache_dir at once and uploaded in the background: a
  // large backlog would otherwise keep the mount from answering for as long as it uploads.
  size_t adopted = 0;
  recovery_.Begin();
  for (const auto& [key, index] : adopt) {
    if (Adopt(leftovers[index], set_aside)) ++adopted;
  }
  if (adopted > 0) {
    Log(LogLevel::kInfo, "uploading " + std::to_string(adopted) + " files (" +
                             std::to_string(recovery_.bytes()) +
                             " bytes) left by an earlier mount in the background");
    if (options_.writeback_thread) queue_->Start();
  }
  recovery_.End();  // logs at once when all of them are uploaded already
  return first;
}

size_t FileWriter::recovering_files() const { return recovery_.pending(); }

size_t FileWriter::pending_uploads() const { return queue_->size(); }

std::string FileWriter::StatsText() const {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t busy = 0;  // of `files`, those whose size is not in `bytes`
  for (auto& [ino, inode] : inodes_->WithLocalData("")) {
    // Never waits for a file's lock: an upload may hold it for minutes.
    if (!inode->mu.TryLock()) {
      ++files;
      ++busy;
      continue;
    }
    if (inode->unsaved()) {
      ++files;
      if (inode->staged != nullptr) bytes += inode->staged->size();
    }
    inode->mu.Unlock();
  }
  uint64_t staged = 0;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(staging_->dir(), ec), end; !ec && it != end;
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      staged += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return "pending_upload_files=" + std::to_string(files) +
         "\npending_upload_bytes=" + std::to_string(bytes) +
         "\npending_upload_busy_files=" + std::to_string(busy) +
         "\nstaged_bytes=" + std::to_string(staged) + "\n";
}

}  // namespace objfs
