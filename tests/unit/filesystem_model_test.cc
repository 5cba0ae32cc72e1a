// A reference-model test of Filesystem: seeded sequences of operations over a small namespace
// (so that names collide), each checked against a simple in-memory model of what POSIX and
// README's promises say, with a crash of objfs as one of the operations.
//
// Why: the write path (staging, write-back window, held metadata changes, crash records) has
// many states per file, and hand-written tests cover the transitions someone thought of. A
// model checked after every operation, over random sequences, covers the ones nobody did. A
// failure prints its seed and a shrunk list of operations, one a line.
//
// The model keeps, per name, what the mount must show now (names, kinds, sizes, contents,
// modes, owners, mtimes, xattrs, link targets) and the set of states a crash at this instant
// may leave there once the next mount has recovered:
// - an operation that reaches the store before it returns (mkdir, rmdir, unlink, symlink,
//   rename, an upload at close or fsync, truncate of a closed file, a metadata change made at
//   once) leaves exactly what the mount shows;
// - a close into the write-back window accepts the file as it is (it is uploaded after a crash);
// - data written and not accepted since never replaces what was there (README: it goes to
//   cache_dir/unfinished/);
// - a metadata change not made durable may be lost, but never its data with it;
// - a rename moves the name's crash states along, and may also publish what the source shows.
// Another client's put or delete of a key: the last writer at upload time wins. On a name with
// nothing pending here the mount shows theirs once the cache's timeouts pass; a put over our
// unsaved data or open handles follows ContestedPut's rule (a delete, or a put over a held
// metadata change, waits until nothing is pending).
// The kernel's own checks (a missing name, a parent that is not a directory, O_EXCL, a rename
// between a file and a directory) are not objfs's: an op the kernel would refuse in the
// model's state is skipped, in generation and in replay.
//
// Environment: OBJFS_MODEL_RUNS (sequences per personality, default 100), OBJFS_MODEL_SEED
// (first seed, default 1), OBJFS_MODEL_OPS (operations per sequence, default 60),
// OBJFS_MODEL_SKIP (comma-separated op kinds not to generate: create, open, write, close,
// fsync, truncate, ftruncate, chmod, chown, utimens, setxattr, rename, unlink, mkdir, rmdir,
// symlink, external, advance, crash), OBJFS_MODEL_VERBOSE (print each replayed op and the
// crash states), OBJFS_MODEL_STATS (count the ops applied and the write path's ways to the
// store), OBJFS_MODEL_STRICT_UNLINKED (see KnownUnlinkedWriteFailureAllowed).
// tools/model-test.sh runs the long mode.
//
// The write path's ways to the store are counted over each personality's run set (Coverage),
// and a default-sized run set fails when one of them never ran: parts of a file streamed
// while it is written, a stream given up for a whole put, an edit assembled from server-side
// copies of its untouched parts, a sparse staged file fetched in part. Writes come in sizes
// around the part size, appends continue a file in several calls, and some checks leave the
// contents of busy files unread (reading fetches every byte of a sparse staged file, which
// would leave nothing sparse for a close, a rename or a crash to meet).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/etag.h"
#include "backend/fake/memory_store.h"
#include "backend/md5.h"
#include "backend/mutex.h"
#include "cache/content_etag_store.h"
#include "cache/store_db.h"
#include "fs/errno_map.h"
#include "fs/filesystem.h"
#include "fs/object_metadata.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

constexpr int kSlots = 4;
constexpr uint32_t kUid = 1000;
constexpr uint32_t kGid = 1000;
constexpr int64_t kNsPerSec = 1000000000;
// The store's multipart threshold and part size: some writes go past them.
constexpr uint64_t kPartSize = 16 << 10;
constexpr uint64_t kMultipartThreshold = 64 << 10;
// Appends stop growing a file past this (the checks read every file after every op).
constexpr uint64_t kMaxAppendedSize = 10 * kPartSize;

int64_t WallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// `len` bytes that differ with `seed` and along the data.
std::string Pattern(uint32_t seed, uint64_t len) {
  std::string out(len, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (uint64_t i = 0; i < len; ++i) {
    x = x * 1103515245u + 12345u;
    out[i] = static_cast<char>('a' + (x >> 16) % 26);
  }
  return out;
}

std::string Octal(uint32_t v) {
  std::ostringstream s;
  s << "0" << std::oct << v;
  return s.str();
}

// ---- Operations ----

struct Op {
  enum Kind {
    kCreate,
    kOpen,
    kWrite,
    kClose,
    kFsync,
    kTruncate,
    kFtruncate,
    kChmod,
    kChown,
    kUtimens,
    kSetXattr,
    kRename,
    kUnlink,
    kMkdir,
    kRmdir,
    kSymlink,
    kExternalPut,
    kExternalDelete,
    kAdvance,
    kCrash,
  };
  Kind kind = kCreate;
  std::string path;
  std::string path2;  // rename's target, a link's target, an xattr's name
  int slot = 0;
  int flags = 0;  // open: 0 read-only, 1 read-write, 2 read-write|O_TRUNC; create: 1 O_TRUNC;
                  // rename: 1 RENAME_NOREPLACE; external put: 1 with s3fs metadata
  uint64_t offset = 0;
  uint64_t size = 0;   // bytes; ms for kAdvance
  uint32_t value = 0;  // mode, uid, mtime seconds, data seed
  // The check after this op leaves the contents of files with handles or unsaved data unread
  // (their sizes, modes and the rest are still checked; a later check reads them).
  bool unread = false;
};

const char* KindName(Op::Kind k) {
  switch (k) {
    case Op::kCreate:
      return "create";
    case Op::kOpen:
      return "open";
    case Op::kWrite:
      return "write";
    case Op::kClose:
      return "close";
    case Op::kFsync:
      return "fsync";
    case Op::kTruncate:
      return "truncate";
    case Op::kFtruncate:
      return "ftruncate";
    case Op::kChmod:
      return "chmod";
    case Op::kChown:
      return "chown";
    case Op::kUtimens:
      return "utimens";
    case Op::kSetXattr:
      return "setxattr";
    case Op::kRename:
      return "rename";
    case Op::kUnlink:
      return "unlink";
    case Op::kMkdir:
      return "mkdir";
    case Op::kRmdir:
      return "rmdir";
    case Op::kSymlink:
      return "symlink";
    case Op::kExternalPut:
    case Op::kExternalDelete:
      return "external";
    case Op::kAdvance:
      return "advance";
    case Op::kCrash:
      return "crash";
  }
  return "?";
}

std::string Describe(const Op& op) {
  std::ostringstream s;
  const std::string slot = "#" + std::to_string(op.slot);
  switch (op.kind) {
    case Op::kCreate:
      s << "create " << slot << " " << op.path << (op.flags & 1 ? " O_TRUNC" : "");
      break;
    case Op::kOpen:
      s << "open " << slot << " " << op.path << " "
        << (op.flags == 0   ? "O_RDONLY"
            : op.flags == 1 ? "O_RDWR"
                            : "O_RDWR|O_TRUNC");
      break;
    case Op::kWrite:
      s << "write " << slot << " at " << op.offset << " " << op.size << " bytes (seed " << op.value
        << ")";
      break;
    case Op::kClose:
      s << "close " << slot;
      break;
    case Op::kFsync:
      s << "fsync " << slot;
      break;
    case Op::kTruncate:
      s << "truncate " << op.path << " to " << op.size;
      break;
    case Op::kFtruncate:
      s << "ftruncate " << slot << " to " << op.size;
      break;
    case Op::kChmod:
      s << "chmod " << Octal(op.value) << " " << op.path;
      break;
    case Op::kChown:
      s << "chown " << op.value << ":" << op.value << " " << op.path;
      break;
    case Op::kUtimens:
      s << "utimens " << op.path << " mtime " << op.value;
      break;
    case Op::kSetXattr:
      s << "setxattr " << op.path << " " << op.path2 << "=v" << op.value;
      break;
    case Op::kRename:
      s << "rename " << op.path << " -> " << op.path2 << (op.flags & 1 ? " NOREPLACE" : "");
      break;
    case Op::kUnlink:
      s << "unlink " << op.path;
      break;
    case Op::kMkdir:
      s << "mkdir " << op.path << " " << Octal(op.value);
      break;
    case Op::kRmdir:
      s << "rmdir " << op.path;
      break;
    case Op::kSymlink:
      s << "symlink " << op.path << " -> " << op.path2;
      break;
    case Op::kExternalPut:
      s << "another client puts " << op.path << " (" << op.size << " bytes, seed " << op.value
        << (op.flags & 1 ? ", mode 0600 mtime 1700000000" : ", no metadata")
        << (op.flags & 2 ? ", even over a busy file" : "") << ")";
      break;
    case Op::kExternalDelete:
      s << "another client deletes " << op.path;
      break;
    case Op::kAdvance:
      s << "clock +" << op.size << " ms, due uploads run";
      break;
    case Op::kCrash:
      s << "CRASH: objfs dies, the next mount recovers cache_dir";
      break;
  }
  if (op.unread) s << " [busy files not read back]";
  return s.str();
}

struct Config {
  bool sftp = false;
  double writeback = 0;
  double metadata_delay = 0;
  std::string Describe() const {
    std::ostringstream s;
    s << (sftp ? "sftp-like" : "s3-like") << " store, writeback=" << writeback
      << ", metadata_delay=" << metadata_delay;
    return s.str();
  }
};

// Known: a handle opened without O_TRUNC on a stored file, which nothing has written
// yet, cannot write (or ftruncate) once the file is removed: its content is fetched from the
// store by name at the first write, and the object is gone (NotFound, ENOENT), or the name is
// another file's, a link's or a directory's now (EISDIR, ESTALE). The data of a removed file
// is discarded at its last close anyway, so nothing is lost; the model lets such a write fail
// unless OBJFS_MODEL_STRICT_UNLINKED is set.
bool KnownUnlinkedWriteFailureAllowed() {
  return std::getenv("OBJFS_MODEL_STRICT_UNLINKED") == nullptr;
}

std::set<std::string> SkippedKinds() {
  std::set<std::string> out;
  const char* env = std::getenv("OBJFS_MODEL_SKIP");
  if (env == nullptr) return out;
  std::stringstream s(env);
  std::string item;
  while (std::getline(s, item, ',')) {
    if (!item.empty()) out.insert(item);
  }
  return out;
}

// ---- What the write path did in the store ----

// The write path's ways to the store that a run set must reach (ModelTest asserts each > 0).
struct Coverage {
  uint64_t streamed_parts = 0;     // parts sent while their file was written (Metrics)
  uint64_t stream_fallbacks = 0;   // streamed uploads given up for a whole put (Metrics)
  uint64_t copied_parts = 0;       // upload parts copied on the server from the base
  uint64_t edits_with_copies = 0;  // uploads completed with at least one copied part
  uint64_t sparse_fetches = 0;     // ops that fetched part, not all, of a staged file's object

  void Add(const Coverage& o) {
    streamed_parts += o.streamed_parts;
    stream_fallbacks += o.stream_fallbacks;
    copied_parts += o.copied_parts;
    edits_with_copies += o.edits_with_copies;
    sparse_fetches += o.sparse_fetches;
  }
  std::string ToString() const {
    std::ostringstream s;
    s << "streamed_parts=" << streamed_parts << " stream_fallbacks=" << stream_fallbacks
      << " copied_parts=" << copied_parts << " edits_with_copies=" << edits_with_copies
      << " sparse_fetches=" << sparse_fetches;
    return s.str();
  }
};

// Sits between the MemoryStore and the Filesystem (where MetricsStore sits in a mount) and
// counts what Metrics does not tell apart: copies of upload parts and the edits they complete,
// and the write path's reads of stored objects, so that an op that fetched only some blocks of
// a file (a sparse fetch) can be told from one that fetched it whole. Readers' reads (the
// checks') are left out: Pause() while they run.
class CountingStore : public ForwardingStore {
 public:
  explicit CountingStore(std::shared_ptr<MemoryStore> memory)
      : ForwardingStore(memory), memory_(std::move(memory)) {}

  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override {
    Result<size_t> n = ForwardingStore::read(key, offset, buf, if_match);
    if (n.ok() && *n > 0 && !paused_.load()) {
      auto head = memory_->head(key);
      MutexLock lock(&mu_);
      Fetched& f = fetched_[std::string(key)];
      f.bytes += *n;
      if (head.ok()) f.size = std::max(f.size, head->size);
    }
    return n;
  }

  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override {
    auto upload = ForwardingStore::start_upload(key, options);
    if (!upload.ok()) return upload.status();
    return std::unique_ptr<Upload>(
        std::make_unique<CountingUpload>(std::move(upload).value(), this));
  }

  // Readers' reads between Pause(true) and Pause(false) are not the write path's.
  void Pause(bool paused) { paused_.store(paused); }
  // Ends an op: an object of which it read some bytes, but fewer than its size, was fetched
  // sparsely. (An op does not fetch a block twice.)
  void EndOp() {
    MutexLock lock(&mu_);
    for (const auto& [key, f] : fetched_) {
      if (f.bytes < f.size) ++sparse_fetches_;
    }
    fetched_.clear();
  }
  uint64_t copied_parts() const { return copied_parts_.load(); }
  uint64_t edits_with_copies() const { return edits_with_copies_.load(); }
  uint64_t sparse_fetches() const {
    MutexLock lock(&mu_);
    return sparse_fetches_;
  }

 private:
  class CountingUpload : public ForwardingUpload {
   public:
    CountingUpload(std::unique_ptr<Upload> target, CountingStore* store)
        : ForwardingUpload(std::move(target)), store_(store) {}
    Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
                uint64_t length) override {
      Status s = ForwardingUpload::copy(offset, base, base_offset, length);
      if (s.ok()) {
        copies_.fetch_add(1);
        store_->copied_parts_.fetch_add(1);
      }
      return s;
    }
    Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) override {
      Result<ObjectInfo> done = ForwardingUpload::complete(size, options);
      if (done.ok() && copies_.load() > 0) store_->edits_with_copies_.fetch_add(1);
      return done;
    }

   private:
    CountingStore* store_;
    std::atomic<uint64_t> copies_{0};
  };
  struct Fetched {
    uint64_t bytes = 0;
    uint64_t size = 0;
  };

  std::shared_ptr<MemoryStore> memory_;
  std::atomic<bool> paused_{false};
  std::atomic<uint64_t> copied_parts_{0};
  std::atomic<uint64_t> edits_with_copies_{0};
  mutable Mutex mu_;  // a leaf
  std::map<std::string, Fetched> fetched_ GUARDED_BY(mu_);
  uint64_t sparse_fetches_ GUARDED_BY(mu_) = 0;
};

// ---- The model ----

struct FileModel {
  uint64_t id = 0;
  std::string data;
  uint32_t perms = 0644;
  uint32_t uid = kUid;
  uint32_t gid = kGid;
  int64_t mtime_lo = 0;  // the mtime is in [lo, hi]
  int64_t mtime_hi = 0;
  std::map<std::string, std::string> xattrs;
  // Its mtime is the object's Last-Modified (another client's put without s3fs metadata): an S3
  // copy (a rename) gives it a new one.
  bool mtime_from_store = false;
  // Its mtime is a write's (not utimens's, nor another client's): see StreamedMtime.
  bool mtime_by_writes = false;
  bool dirty = false;     // data not in the store (or not accepted)
  bool staged = false;    // objfs holds a copy in cache_dir (unsaved, or kept for handles)
  bool accepted = false;  // a close into the write-back window accepted a version not uploaded
  // Its unsaved data is stored only over what the name held when it was staged (README):
  // created here without O_TRUNC (`>>` on a new name: objfs's Inode::created_as), or an edit
  // of the stored version it was staged from (objfs's Inode::base), which keeps bytes of that
  // version or was written onto it empty. Set wherever objfs may hold either, so that the
  // model skips another client's put there rather than mispredicting it.
  bool created_here = false;
  bool onto_base = false;
  bool base_empty = false;  // that version was empty: written anew, still only over it
  // The handle whose O_TRUNC or ftruncate to 0 emptied it, until its close (objfs's
  // Inode::emptied_by): while the file is only emptied, no other close uploads it.
  uint64_t emptied_by = 0;
  // Another client's object put over this clean file while its handles kept a copy here: the
  // name shows it once that copy goes (ContestedPut).
  std::shared_ptr<FileModel> theirs;
  // The store has an object at this file's name that its pending upload replaces (objfs's
  // Inode::in_store), and, when another client put it over our unsaved data, that object.
  bool in_store = false;
  std::shared_ptr<FileModel> theirs_in_store;
  bool meta_held = false;  // a metadata change waits (metadata_delay)
  bool unlinked = false;
  int handles = 0;
  int writers = 0;
  std::optional<int64_t> due;  // fake clock ns of its write-back upload or held change
};

enum class Kind { kFile, kDir, kLink };

struct Node {
  Kind kind = Kind::kFile;
  std::shared_ptr<FileModel> file;  // kFile
  uint32_t perms = 0755;            // kDir
  uint32_t uid = kUid;              // kDir
  std::string target;               // kLink
};

Node FileNode(std::shared_ptr<FileModel> f) {
  Node n;
  n.kind = Kind::kFile;
  n.file = std::move(f);
  return n;
}

// What a name holds, as a crash may leave it.
struct Snap {
  bool present = false;
  Kind kind = Kind::kFile;
  std::string data;  // a file's content or a link's target
  uint32_t perms = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::map<std::string, std::string> xattrs;
  uint64_t id = 0;  // the model file it was taken of (not compared)

  bool operator==(const Snap& o) const {
    if (present != o.present) return false;
    if (!present) return true;
    return kind == o.kind && data == o.data && perms == o.perms && uid == o.uid && gid == o.gid &&
           xattrs == o.xattrs;
  }
};

std::string ShowData(const std::string& data) {
  if (data.size() <= 24) return "\"" + data + "\"";
  return std::to_string(data.size()) + " bytes \"" + data.substr(0, 12) + "...\" md5 " +
         HexMd5(Md5Of(data)).substr(0, 8);
}

std::string Show(const Snap& s) {
  if (!s.present) return "absent";
  std::ostringstream o;
  if (s.kind == Kind::kLink) {
    o << "link -> " << s.data;
    return o.str();
  }
  o << (s.kind == Kind::kDir ? "dir" : "file ") << (s.kind == Kind::kDir ? "" : ShowData(s.data))
    << " mode " << Octal(s.perms) << " owner " << s.uid << ":" << s.gid;
  for (const auto& [k, v] : s.xattrs) o << " " << k << "=" << v;
  return o.str();
}

std::string ParentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::string NameOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool Under(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size() + 1, dir + "/") == 0;
}

// ---- One run: the Filesystem and the model side by side ----

class ModelRun {
 public:
  ModelRun(const Config& config, const std::string& root) : config_(config), root_(root) {
    MemoryStoreOptions mo;
    mo.multipart_threshold = kMultipartThreshold;
    mo.part_size = kPartSize;
    if (config.sftp) {
      mo.native_etags = false;
      mo.native_rename = true;
      mo.attributes_by_copy = false;
      mo.stores_owner = false;
    }
    memory_ = std::make_shared<MemoryStore>(mo);
    counted_ = std::make_shared<CountingStore>(memory_);
    clock_ = std::make_shared<FakeClock>();
    options_.cache_dir = root_ + "/cache-0";
    options_.uid = kUid;
    options_.gid = kGid;
    options_.prefetch.read_buffer = 16 << 10;
    options_.prefetch.max_readahead = 64 << 10;
    options_.io_threads = 2;
    options_.writeback = config.writeback;
    options_.metadata_delay = config.metadata_delay;
    options_.writeback_thread = false;
    options_.log = [this](LogLevel, const std::string& line) { log_.push_back(line); };
  }

  ~ModelRun() {
    slots_ = {};
    fs_.reset();
  }

  // Empty on success, else what went wrong.
  std::string Start() {
    store_ = counted_;
    if (config_.sftp) {
      // As main.cc stacks an SFTP store: content MD5s kept in cache_dir.
      auto db = StoreDb::Open(options_.cache_dir + "/db");
      if (!db.ok()) return "StoreDb::Open: " + db.status().ToString();
      store_ = std::make_shared<ContentEtagStore>(
          counted_, std::make_shared<StoreDb>(std::move(db).value()), &metrics_);
    }
    auto fs = Filesystem::Create(store_, options_, &metrics_, clock_);
    if (!fs.ok()) return "Filesystem::Create: " + fs.status().ToString();
    fs_ = std::move(fs).value();
    return "";
  }

  // Applies `op` to both; empty on success. `applied` says whether it was run at all (ops
  // that the kernel would refuse before asking objfs, in the model's state, are skipped).
  std::string Apply(const Op& op, bool* applied);

  // Compares everything the mount shows with the model; with `unread`, the contents of files
  // with handles or unsaved data are not read (Op::unread).
  std::string Check(bool unread = false);

  // What the write path did in the store so far.
  Coverage coverage() const {
    Coverage c;
    c.streamed_parts = metrics_.streamed_parts.load();
    c.stream_fallbacks = metrics_.streamed_fallbacks.load();
    c.copied_parts = counted_->copied_parts();
    c.edits_with_copies = counted_->edits_with_copies();
    c.sparse_fetches = counted_->sparse_fetches();
    return c;
  }

  // The model's crash states, for OBJFS_MODEL_VERBOSE.
  std::string DumpCrashStates() {
    std::string out =
        "    (objfs: " + std::to_string(fs_ ? fs_->pending_uploads() : 0) + " queued; model due:";
    for (const auto& [path, node] : nodes_) {
      if (node.kind == Kind::kFile && node.file->due) {
        out += " " + path + "@" + std::to_string(*node.file->due / 1000000) + "ms" +
               (node.file->dirty ? " dirty" : "");
      }
    }
    out += ", now " + std::to_string(Now() / 1000000) + "ms)\n";
    for (const auto& [path, states] : crash_) {
      out += "    " + path + ":";
      for (const Snap& st : states) out += " [" + Show(st) + "]";
      out += "\n";
    }
    return out;
  }

  // The generator's view of the model.
  const std::map<std::string, Node>& nodes() const { return nodes_; }
  bool SlotOpen(int slot) const { return slots_[slot].open; }
  bool SlotWriter(int slot) const { return slots_[slot].writer; }
  // The size of the file open in `slot` as the model has it.
  uint64_t SlotSize(int slot) const {
    return slots_[slot].open ? slots_[slot].file->data.size() : 0;
  }
  bool Quiescent(const std::string& path) const {
    auto it = nodes_.find(path);
    if (it == nodes_.end() || it->second.kind != Kind::kFile) return true;
    const FileModel& f = *it->second.file;
    return f.handles == 0 && !f.dirty && !f.meta_held && !f.due;
  }
  bool IsDir(const std::string& path) const {
    if (path.empty()) return true;
    auto it = nodes_.find(path);
    return it != nodes_.end() && it->second.kind == Kind::kDir;
  }
  const Node* Find(const std::string& path) const {
    auto it = nodes_.find(path);
    return it == nodes_.end() ? nullptr : &it->second;
  }

 private:
  struct Slot {
    bool open = false;
    bool writer = false;
    std::shared_ptr<FileModel> file;
    uint64_t fh = 0;
    uint64_t ino = 0;
  };

  // The inode of `path` through lookups from the root (forgotten at the end of the op).
  Result<uint64_t> Ino(const std::string& path);
  void ForgetLookups() {
    for (uint64_t ino : lookups_) fs_->Forget(ino, 1);
    lookups_.clear();
  }

  std::optional<std::string> PathOf(const FileModel& f) const {
    if (f.unlinked) return std::nullopt;
    for (const auto& [path, node] : nodes_) {
      if (node.kind == Kind::kFile && node.file.get() == &f) return path;
    }
    return std::nullopt;
  }
  Snap SnapOf(const std::string& path) const {
    Snap s;
    auto it = nodes_.find(path);
    if (it == nodes_.end() || it->second.kind == Kind::kDir) return s;
    s.present = true;
    s.kind = it->second.kind;
    if (s.kind == Kind::kLink) {
      s.data = it->second.target;
      s.perms = 0777;
      s.uid = kUid;
      s.gid = kGid;
      return s;
    }
    const FileModel& f = *it->second.file;
    s.data = f.data;
    s.perms = f.perms;
    s.uid = f.uid;
    s.gid = f.gid;
    s.xattrs = f.xattrs;
    s.id = f.id;
    return s;
  }
  // A crash now leaves exactly what `path` shows.
  void Durable(const std::string& path) { crash_[path] = {SnapOf(path)}; }
  void AddCandidate(const std::string& path, const Snap& s) {
    auto& c = CrashOf(path);
    if (std::find(c.begin(), c.end(), s) == c.end()) c.push_back(s);
  }
  std::vector<Snap>& CrashOf(const std::string& path) {
    auto it = crash_.find(path);
    if (it == crash_.end()) it = crash_.emplace(path, std::vector<Snap>{Snap{}}).first;
    return it->second;
  }
  // A metadata change that a crash may lose: each crash state of this same file may also
  // come with the metadata the mount shows now.
  void AddMetadataVariants(const std::string& path) {
    const Snap now = SnapOf(path);
    std::vector<Snap> add;
    for (const Snap& s : CrashOf(path)) {
      if (!s.present || s.id != now.id || s.kind != Kind::kFile) continue;
      Snap v = s;
      v.perms = now.perms;
      v.uid = now.uid;
      v.gid = now.gid;
      v.xattrs = now.xattrs;
      add.push_back(v);
    }
    for (const Snap& s : add) AddCandidate(path, s);
  }
  // README: on S3 a file uploaded in parts while it was written takes its upload's completion
  // as its mtime (keeping the writes' last one would cost a self-copy of the object). The
  // model does not follow which files streamed: the upload of any written file of a part or
  // more, made just now, may have; its mtime may then be the object's Last-Modified, which an
  // S3 copy (a rename) renews.
  void StreamedMtime(FileModel& f) const {
    if (!config_.sftp && f.dirty && f.mtime_by_writes && f.data.size() >= kPartSize) {
      f.mtime_hi = WallNs();
      f.mtime_from_store = true;
    }
  }
  void Uploaded(FileModel& f) {
    StreamedMtime(f);
    f.in_store = true;
    f.theirs_in_store.reset();
    f.dirty = false;
    f.accepted = false;
    f.meta_held = false;
    f.created_here = false;
    f.onto_base = true;  // the uploaded version is the base of further writes
    f.base_empty = f.data.empty();
    // (Its write-back schedule, if any, stays: when it comes there is nothing left to do.)
    if (f.handles == 0) Idle(f);
    if (auto path = PathOf(f)) Durable(*path);
  }
  // Nothing of `f` is held here any more: the kernel's forget (the harness forgets every
  // lookup after each op) drops its inode, and with it the inode's write-back schedule, so a
  // later close schedules anew.
  void Idle(FileModel& f) {
    f.staged = false;
    if (!f.meta_held) f.due.reset();
  }
  // A handle of `f` closes (writer or not): README's rules for close.
  // Only emptied (README: `cmd > file`): empty, unsaved, over data the store or the write-back
  // window has (objfs's FileWriter::OnlyEmptied).
  static bool OnlyEmptied(const FileModel& f) {
    return f.dirty && f.data.empty() && (f.in_store || f.accepted);
  }
  void CloseModel(FileModel& f, bool writer, uint64_t fh = 0) {
    f.handles--;
    if (writer) f.writers--;
    const bool emptier = fh != 0 && f.emptied_by == fh;
    if (emptier) f.emptied_by = 0;
    if (f.handles == 0 && !f.dirty) {
      Idle(f);
      if (f.theirs != nullptr) {
        if (auto path = PathOf(f)) {
          std::shared_ptr<FileModel> theirs = std::move(f.theirs);
          f.unlinked = true;
          nodes_[*path] = FileNode(theirs);
          return;
        }
      }
    }
    if (f.unlinked || !f.dirty) return;
    if (!writer && (f.writers > 0 || f.due)) return;
    // Emptied, and the writer that emptied it still at work (where none is known, any writer):
    // its close stores the file; the server keeps the complete file it had until then.
    if (OnlyEmptied(f) && (f.emptied_by != 0 || (!emptier && f.writers > 0))) {
      if (auto path = PathOf(f)) AddCandidate(*path, SnapOf(*path));
      return;
    }
    if (config_.writeback > 0) {
      if (!f.due) f.due = Now() + static_cast<int64_t>(config_.writeback * kNsPerSec);
      f.accepted = true;
      if (auto path = PathOf(f)) Durable(*path);
    } else {
      Uploaded(f);
    }
  }
  std::shared_ptr<FileModel> NewFile() {
    auto f = std::make_shared<FileModel>();
    f->id = ++next_id_;
    return f;
  }
  int64_t Now() const { return clock_->now().count(); }
  std::string AdvanceModel(uint64_t ms);
  // Another client's put of a name whose file has open handles or unsaved data here. The rule:
  // the last writer at upload time wins. Unsaved data here is ours to upload (the mount keeps
  // showing it, and a version a close accepted is uploaded by the next mount after a crash);
  // a crash before our upload leaves theirs, never the object they replaced. A clean file kept
  // in cache_dir for its handles shows what it had until its last close; one not kept shows
  // theirs, and a writer's first write goes onto theirs.
  std::string ContestedPut(const Op& op, int64_t t0);
  // Another client's put of `op` into the store, and the file it makes as the model sees it;
  // null with *error set when the store refuses it.
  std::shared_ptr<FileModel> PutTheirs(const Op& op, int64_t t0, std::string* error);
  std::string MetadataChange(const Op& op, bool* applied);
  // Whether a chmod, chown or utimens leaves the object's metadata as it is, mode, owner and
  // mtime all there: objfs makes no request for it then, and holds nothing
  // (Filesystem::MutateMetadata).
  bool LeavesStoredMetadata(const Op& op) const;
  // README: an open (not O_TRUNC) of a multipart object applies the metadata change held for
  // it at once, as the self-copy may give it a new ETag that would fail the handle's reads.
  void OpenedStored(FileModel& f, const std::string& path) {
    if (config_.sftp || !f.meta_held || f.staged) return;
    Result<ObjectInfo> head = memory_->head(path);
    if (!head.ok() || head->etag.is_plain_md5()) return;
    f.meta_held = false;
    if (!f.dirty) f.due.reset();
    Durable(path);
  }
  std::string Crash();
  // Everything the mount shows, path -> state, through lookups and listings.
  std::string Observe(std::map<std::string, Snap>* out);
  // Checks the file at `path` as Check does, its contents read.
  std::string ReadBack(const std::string& path);
  // `read`: its contents too (a reader's open, read and close).
  std::string CheckFile(const std::string& path, uint64_t ino, const Entry& e,
                        std::shared_ptr<FileModel> f, bool read);
  Result<std::string> ReadWhole(uint64_t ino);

  Config config_;
  std::string root_;
  std::shared_ptr<MemoryStore> memory_;
  std::shared_ptr<CountingStore> counted_;  // over memory_
  std::shared_ptr<ObjectStore> store_;      // counted_, or a ContentEtagStore over it
  std::shared_ptr<FakeClock> clock_;
  Metrics metrics_;
  FilesystemOptions options_;
  std::unique_ptr<Filesystem> fs_;
  std::vector<std::string> log_;
  std::vector<uint64_t> lookups_;

  std::map<std::string, Node> nodes_;
  std::map<std::string, std::vector<Snap>> crash_;  // names absent here: {absent}
  std::array<Slot, kSlots> slots_;
  uint64_t next_id_ = 0;
  int crashes_ = 0;
};

Result<uint64_t> ModelRun::Ino(const std::string& path) {
  uint64_t ino = kRootIno;
  if (path.empty()) return ino;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    OBJFS_ASSIGN_OR_RETURN(Entry e, fs_->Lookup(ino, path.substr(start, slash - start)));
    lookups_.push_back(e.attr.ino);
    ino = e.attr.ino;
    start = slash + 1;
  }
  return ino;
}

bool KnownUnlinkedWriteFailure(const FileModel& f, const Status& s) {
  // (IsDirectory when a directory took the name since: the content is looked for by name.)
  return f.unlinked && KnownUnlinkedWriteFailureAllowed() &&
         (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kIsDirectory ||
          s.code() == StatusCode::kPreconditionFailed);
}

std::string Failed(const std::string& what, const Status& s) {
  return what + " failed: " + s.ToString();
}

std::string ModelRun::AdvanceModel(uint64_t ms) {
  clock_->Advance(std::chrono::milliseconds(ms));
  Status s = fs_->UploadDue();
  if (!s.ok()) return Failed("UploadDue", s);
  const int64_t now = Now();
  std::set<FileModel*> seen;
  for (auto& [path, node] : nodes_) {
    if (node.kind != Kind::kFile || !seen.insert(node.file.get()).second) continue;
    FileModel& f = *node.file;
    if (!f.due || *f.due > now) continue;
    f.due.reset();
    if (f.dirty) {
      if (f.handles == 0) Uploaded(f);  // else its last close schedules it again
    } else if (f.meta_held) {
      Uploaded(f);
    }
  }
  for (Slot& slot : slots_) {  // removed files' schedules lapse
    if (slot.open && slot.file->unlinked) slot.file->due.reset();
  }
  return "";
}

std::string ModelRun::Apply(const Op& op, bool* applied) {
  *applied = false;
  std::string result = [&]() -> std::string {
    Slot& slot = slots_[op.slot];
    const Node* node = Find(op.path);
    const int64_t t0 = WallNs();
    switch (op.kind) {
      case Op::kCreate:
      case Op::kOpen: {
        if (slot.open || !IsDir(ParentOf(op.path))) return "";
        if (node != nullptr && node->kind != Kind::kFile) return "";
        if (op.kind == Op::kOpen && node == nullptr) return "";
        const bool trunc = op.kind == Op::kCreate ? (op.flags & 1) : op.flags == 2;
        const bool writer = op.kind == Op::kCreate || op.flags > 0;
        const int flags = (writer ? O_RDWR : O_RDONLY) | (trunc ? O_TRUNC : 0);
        *applied = true;
        uint64_t fh = 0;
        uint64_t ino = 0;
        if (node != nullptr) {  // the kernel opens an existing name
          auto i = Ino(op.path);
          if (!i.ok()) return Failed("lookup " + op.path, i.status());
          auto h = fs_->Open(*i, flags);
          if (!h.ok()) return Failed("open", h.status());
          if (!trunc) OpenedStored(*node->file, op.path);
          fh = *h;
          ino = *i;
        } else {
          auto parent = Ino(ParentOf(op.path));
          if (!parent.ok()) return Failed("lookup of the parent", parent.status());
          auto c = fs_->Create(*parent, NameOf(op.path), 0644, flags | O_CREAT);
          if (!c.ok()) return Failed("create", c.status());
          lookups_.push_back(c->entry.attr.ino);
          fh = c->fh;
          ino = c->entry.attr.ino;
        }
        const int64_t t1 = WallNs();
        std::shared_ptr<FileModel> f;
        bool empty_already = false;
        if (node == nullptr) {
          f = NewFile();
          f->mtime_lo = t0;
          f->mtime_hi = t1;
          f->mtime_by_writes = true;
          f->dirty = true;
          f->staged = true;
          f->created_here = !trunc;
          nodes_[op.path] = FileNode(f);
        } else {
          f = node->file;
          empty_already = trunc && f->staged && f->data.empty();
          // Staged now from the stored version (its base), unless staged already.
          if (writer && !f->staged) {
            f->onto_base = !trunc && f->in_store;
            f->base_empty = f->onto_base && f->data.empty();
          }
          // O_TRUNC of a file whose staged copy is empty already changes nothing.
          if (trunc && (!f->staged || !f->data.empty())) {
            if (!f->data.empty()) f->mtime_lo = t0;
            f->mtime_from_store = false;
            f->mtime_hi = t1;
            f->mtime_by_writes = true;
            f->data.clear();
            f->dirty = true;
            f->staged = true;
            f->created_here = false;
            f->onto_base = f->base_empty;  // every byte written anew
            f->theirs.reset();
            f->meta_held = false;  // carried by the upload
          }
        }
        f->handles++;
        if (writer) f->writers++;
        // A second `>` of a file emptied already changes nothing: the first one's close stores it.
        if (trunc && !(empty_already && f->emptied_by != 0)) {
          f->emptied_by = OnlyEmptied(*f) ? fh : 0;
        }
        slot = Slot{true, writer, f, fh, ino};
        return "";
      }
      case Op::kWrite: {
        if (!slot.open || !slot.writer) return "";
        // Not onto a copy kept for handles whose name another client's put took (ContestedPut):
        // that is an edit of a version the server no longer has, which its close sets aside
        // with EIO, and an rm leaves the other client's file (README;
        // FilesystemTest.AnEditOfACopyKeptForAReaderAfterAnotherClientsPutIsSetAside), which
        // this model does not follow.
        if (slot.file->theirs != nullptr) return "";
        *applied = true;
        const std::string data = Pattern(op.value, op.size);
        auto n = fs_->Write(slot.fh, op.offset, Bytes(data));
        if (!n.ok() && KnownUnlinkedWriteFailure(*slot.file, n.status())) return "";
        if (!n.ok()) return Failed("write", n.status());
        if (*n != data.size()) return "write returned " + std::to_string(*n);
        FileModel& f = *slot.file;
        if (f.data.size() < op.offset + data.size()) f.data.resize(op.offset + data.size(), '\0');
        f.data.replace(op.offset, data.size(), data);
        f.mtime_lo = t0;
        f.mtime_from_store = false;
        f.mtime_hi = WallNs();
        f.mtime_by_writes = true;
        f.dirty = true;
        f.staged = true;
        f.theirs.reset();
        f.meta_held = false;
        return "";
      }
      case Op::kClose: {
        if (!slot.open) return "";
        *applied = true;
        Slot closing = slot;
        slot = Slot{};
        Status flushed = fs_->Flush(closing.fh);
        Status released = fs_->Release(closing.fh);
        CloseModel(*closing.file, closing.writer, closing.fh);
        if (!flushed.ok()) return Failed("flush", flushed);
        if (!released.ok()) return Failed("release", released);
        return "";
      }
      case Op::kFsync: {
        if (!slot.open) return "";
        *applied = true;
        Status s = fs_->Fsync(slot.fh, false);
        if (!s.ok()) return Failed("fsync", s);
        // (A clean file has nothing to upload: the store may hold another client's object.)
        if (!slot.file->unlinked && (slot.file->dirty || slot.file->meta_held)) {
          Uploaded(*slot.file);
        }
        return "";
      }
      case Op::kTruncate:
      case Op::kFtruncate: {
        std::shared_ptr<FileModel> f;
        uint64_t ino = 0;
        std::optional<uint64_t> fh;
        if (op.kind == Op::kTruncate) {
          if (node == nullptr || node->kind != Kind::kFile) return "";
          *applied = true;
          auto i = Ino(op.path);
          if (!i.ok()) return Failed("lookup " + op.path, i.status());
          ino = *i;
          f = node->file;
        } else {
          if (!slot.open || !slot.writer) return "";
          *applied = true;
          ino = slot.ino;
          fh = slot.fh;
          f = slot.file;
        }
        // (Nor a truncate that keeps bytes of such a copy: an edit too, as a write is.)
        if (f->theirs != nullptr && op.size > 0) {
          *applied = false;
          return "";
        }
        FileAttr attr;
        attr.size = op.size;
        auto e = fs_->SetAttr(ino, kSetSize, attr, fh);
        if (!e.ok() && KnownUnlinkedWriteFailure(*f, e.status())) return "";
        if (!e.ok()) return Failed("truncate", e.status());
        f->data.resize(op.size, '\0');
        if (!f->staged) {  // staged now: empty, or from the stored version
          f->onto_base = op.size > 0 && !f->data.empty() && f->in_store;
          f->base_empty = false;
        }
        if (op.size == 0) {  // emptied: written anew
          f->created_here = false;
          f->onto_base = f->base_empty;
        }
        f->mtime_lo = t0;
        f->mtime_from_store = false;
        f->mtime_hi = WallNs();
        f->mtime_by_writes = true;
        f->dirty = true;
        f->staged = true;
        f->theirs.reset();
        f->meta_held = false;
        // ftruncate(fd, 0): that handle's close stores the emptied file (not a truncate by path).
        f->emptied_by = fh && OnlyEmptied(*f) ? *fh : 0;
        if (f->handles == 0) {
          Uploaded(*f);
        } else if (auto path = PathOf(*f)) {
          AddCandidate(*path, SnapOf(*path));
        }
        if (e->attr.size != op.size) {
          return "truncate returned size " + std::to_string(e->attr.size);
        }
        return "";
      }
      case Op::kChmod:
      case Op::kChown:
      case Op::kUtimens:
      case Op::kSetXattr:
        return MetadataChange(op, applied);
      case Op::kRename: {
        if (node == nullptr || !IsDir(ParentOf(op.path2)) || op.path == op.path2) return "";
        const Node* target = Find(op.path2);
        const bool dir = node->kind == Kind::kDir;
        if (dir && (Under(op.path2, op.path))) return "";
        if (target != nullptr) {
          if ((op.flags & 1) || dir != (target->kind == Kind::kDir)) return "";
        }
        *applied = true;
        auto from_parent = Ino(ParentOf(op.path));
        auto to_parent = Ino(ParentOf(op.path2));
        if (!from_parent.ok() || !to_parent.ok()) return "lookup of a parent failed";
        // The kernel looks both names up before it asks for the rename.
        if (auto i = Ino(op.path); !i.ok()) return Failed("lookup " + op.path, i.status());
        if (target != nullptr) {
          if (auto i = Ino(op.path2); !i.ok()) return Failed("lookup " + op.path2, i.status());
        }
        Status s = fs_->Rename(*from_parent, NameOf(op.path), *to_parent, NameOf(op.path2),
                               (op.flags & 1) ? kRenameNoReplace : 0);
        bool not_empty = false;
        if (target != nullptr && dir) {
          for (const auto& [p, n] : nodes_) not_empty |= Under(p, op.path2);
        }
        if (not_empty) {
          if (s.code() != StatusCode::kNotEmpty) {
            return "rename onto a non-empty directory gave " + s.ToString() + ", not ENOTEMPTY";
          }
          return "";
        }
        if (!s.ok()) return Failed("rename", s);
        // The model: every name at or under `from` moves; a replaced target goes.
        const bool target_in_store =
            target != nullptr && (target->kind == Kind::kLink ||
                                  (target->kind == Kind::kFile && target->file->in_store));
        if (target != nullptr && target->kind == Kind::kFile) {
          target->file->unlinked = true;
          target->file->due.reset();
        }
        nodes_.erase(op.path2);
        target = nullptr;
        std::vector<std::string> moving;
        for (const auto& [p, n] : nodes_) {
          if (p == op.path || Under(p, op.path)) moving.push_back(p);
        }
        // With a write-back window an unsaved file is renamed where it is, and the store learns
        // of it with its upload: until then a crash may leave the target as it was, as a local
        // file system may before the rename reaches its disk.
        // (Only a file with a version a close accepted: one being written since its creation or
        // its last upload is renamed in the store.)
        const bool local = !dir && config_.writeback > 0 && node->kind == Kind::kFile &&
                           node->file->dirty && node->file->accepted;
        const std::vector<Snap> target_states = CrashOf(op.path2);
        // Another client's object under the unsaved file stays where it is when the file moves
        // in cache_dir only, unless the file had replaced a stored one (whose removal takes it).
        std::shared_ptr<FileModel> left_behind;
        if (local && !node->file->in_store) left_behind = node->file->theirs_in_store;
        if (local) node->file->in_store = target_in_store;
        if (node->kind == Kind::kFile) node->file->theirs_in_store.reset();
        std::map<std::string, std::vector<Snap>> moved_crash;
        for (const std::string& p : moving) {
          const std::string q = op.path2 + p.substr(op.path.size());
          std::vector<Snap> states = CrashOf(p);
          const Snap now = SnapOf(p);
          if (std::find(states.begin(), states.end(), now) == states.end()) states.push_back(now);
          for (const Snap& old : local ? target_states : std::vector<Snap>{}) {
            if (std::find(states.begin(), states.end(), old) == states.end()) states.push_back(old);
          }
          moved_crash[q] = states;
          crash_[p] = {Snap{}};
          Node n = nodes_[p];
          nodes_.erase(p);
          if (n.kind == Kind::kFile) {
            FileModel& f = *n.file;
            // The copy (or the directory's flush) takes unsaved data and held changes along;
            // with a write-back window an unsaved file's pending upload takes the new name.
            if (f.mtime_from_store && !config_.sftp) f.mtime_hi = WallNs();
            if (f.theirs != nullptr && f.theirs->mtime_from_store && !config_.sftp) {
              f.theirs->mtime_hi = WallNs();  // their object is what the store copies
            }
            f.onto_base = true;  // (as after an upload; or kept as it was)
            f.base_empty = f.base_empty || f.data.empty();
            if (!local) {
              StreamedMtime(f);
              f.in_store = true;
              f.dirty = false;
              f.accepted = false;
              f.meta_held = false;
              if (f.handles == 0) Idle(f);
            }
          }
          nodes_[q] = n;
        }
        for (auto& [q, states] : moved_crash) crash_[q] = states;
        if (left_behind != nullptr) {
          nodes_[op.path] = FileNode(left_behind);
          left_behind->in_store = true;
          Durable(op.path);
        }
        return "";
      }
      case Op::kUnlink: {
        if (node == nullptr || node->kind == Kind::kDir) return "";
        *applied = true;
        auto parent = Ino(ParentOf(op.path));
        if (!parent.ok()) return Failed("lookup of the parent", parent.status());
        if (auto i = Ino(op.path); !i.ok()) return Failed("lookup " + op.path, i.status());
        Status s = fs_->Unlink(*parent, NameOf(op.path));
        if (!s.ok()) return Failed("unlink", s);
        std::shared_ptr<FileModel> stays;
        if (node->kind == Kind::kFile) {
          FileModel& f = *node->file;
          // Never uploaded, the file has nothing on the server: another client's object of its
          // name, put since (ContestedPut), stays (README).
          if (f.dirty && !f.in_store) stays = f.theirs_in_store;
          f.unlinked = true;
          f.due.reset();
        }
        nodes_.erase(op.path);
        crash_[op.path] = {Snap{}};
        if (stays != nullptr) {
          nodes_[op.path] = FileNode(stays);
          Durable(op.path);
        }
        return "";
      }
      case Op::kMkdir: {
        if (node != nullptr || !IsDir(ParentOf(op.path))) return "";
        *applied = true;
        auto parent = Ino(ParentOf(op.path));
        if (!parent.ok()) return Failed("lookup of the parent", parent.status());
        auto e = fs_->MkDir(*parent, NameOf(op.path), op.value);
        if (!e.ok()) return Failed("mkdir", e.status());
        lookups_.push_back(e->attr.ino);
        Node n;
        n.kind = Kind::kDir;
        n.perms = op.value;
        nodes_[op.path] = n;
        return "";
      }
      case Op::kRmdir: {
        if (node == nullptr || node->kind != Kind::kDir) return "";
        *applied = true;
        auto parent = Ino(ParentOf(op.path));
        if (!parent.ok()) return Failed("lookup of the parent", parent.status());
        if (auto i = Ino(op.path); !i.ok()) return Failed("lookup " + op.path, i.status());
        Status s = fs_->RmDir(*parent, NameOf(op.path));
        bool not_empty = false;
        for (const auto& [p, n] : nodes_) not_empty |= Under(p, op.path);
        if (not_empty) {
          if (s.code() != StatusCode::kNotEmpty) {
            return "rmdir of a non-empty directory gave " + s.ToString() + ", not ENOTEMPTY";
          }
          return "";
        }
        if (!s.ok()) return Failed("rmdir", s);
        nodes_.erase(op.path);
        return "";
      }
      case Op::kSymlink: {
        if (node != nullptr || !IsDir(ParentOf(op.path))) return "";
        *applied = true;
        auto parent = Ino(ParentOf(op.path));
        if (!parent.ok()) return Failed("lookup of the parent", parent.status());
        auto e = fs_->Symlink(op.path2, *parent, NameOf(op.path));
        if (!e.ok()) return Failed("symlink", e.status());
        lookups_.push_back(e->attr.ino);
        Node n;
        n.kind = Kind::kLink;
        n.target = op.path2;
        nodes_[op.path] = n;
        Durable(op.path);
        return "";
      }
      case Op::kExternalPut:
      case Op::kExternalDelete: {
        if (!IsDir(ParentOf(op.path)) || IsDir(op.path)) return "";
        if (op.kind == Op::kExternalDelete && node == nullptr) return "";
        const bool busy = !Quiescent(op.path);
        // A put over a file with something pending here (flag 2): see ContestedPut. Not over a
        // held metadata change (its size and the object's part ways until it is applied).
        if (busy && (op.kind != Op::kExternalPut || (op.flags & 2) == 0 || node->file->meta_held)) {
          return "";
        }
        // Nor over data a write-back window uploads after its close: that upload goes only over
        // the version the data replaced, so another client's put since wins and the data is set
        // aside (README; tested in filesystem_test and the mount suite), which this model does not
        // follow.
        if (busy && config_.writeback > 0 && node->file->dirty) return "";
        // Nor over the unsaved data of an edit or of a file created here without O_TRUNC: that
        // is stored only over what the name held, so its close fails with EIO and the data is
        // set aside (README; FilesystemTest.AnEditWhoseStoredFileChangedIsSetAsideNotRetried,
        // AnEmptyFileCreatedHereWhoseNameWasTakenIsNotRetried), which this model does not
        // follow either.
        if (busy && node->file->dirty && (node->file->created_here || node->file->onto_base)) {
          return "";
        }
        *applied = true;
        if (busy) {
          // A file staged from the stored object is sparse: the bytes nobody read or wrote
          // since it was opened exist only in that object, and another client's put takes
          // them (README: the edit's close then fails with EIO). ContestedPut's rule is for
          // files whose bytes are all here: the put comes after a reader's read of the file,
          // as the checks that read busy files have it (Op::unread).
          if (std::string e = ReadBack(op.path); !e.empty()) return e;
          return ContestedPut(op, t0);
        }
        if (op.kind == Op::kExternalPut) {
          std::string error;
          auto f = PutTheirs(op, t0, &error);
          if (f == nullptr) return error;
          if (node != nullptr && node->kind == Kind::kFile) node->file->unlinked = true;
          nodes_[op.path] = FileNode(f);
          Durable(op.path);
        } else {
          Status s = memory_->remove(op.path);
          if (!s.ok()) return Failed("the other client's delete", s);
          if (node->kind == Kind::kFile) node->file->unlinked = true;
          nodes_.erase(op.path);
          crash_[op.path] = {Snap{}};
        }
        // The mount sees it once its cached answers expire (attr_timeout, negative_timeout).
        return AdvanceModel(1500);
      }
      case Op::kAdvance:
        *applied = true;
        return AdvanceModel(op.size);
      case Op::kCrash:
        *applied = true;
        return Crash();
    }
    return "";
  }();
  if (fs_ != nullptr) ForgetLookups();
  counted_->EndOp();
  return result;
}

std::shared_ptr<FileModel> ModelRun::PutTheirs(const Op& op, int64_t t0, std::string* error) {
  const std::string data = Pattern(op.value, op.size);
  PutOptions put;
  if (op.flags & 1) {
    put.metadata = {{"mode", std::to_string(S_IFREG | 0600)}, {"mtime", "1700000000"}};
  }
  auto r = memory_->put(op.path, MemorySource(data), put);
  if (!r.ok()) {
    *error = Failed("the other client's put", r.status());
    return nullptr;
  }
  auto f = NewFile();
  f->data = data;
  f->perms = (op.flags & 1) ? 0600 : 0644;
  f->mtime_lo = (op.flags & 1) ? 1700000000 * kNsPerSec : t0;
  f->mtime_hi = (op.flags & 1) ? 1700000000 * kNsPerSec : WallNs();
  f->mtime_from_store = (op.flags & 1) == 0;
  f->in_store = true;
  return f;
}

std::string ModelRun::ContestedPut(const Op& op, int64_t t0) {
  std::string error;
  auto theirs = PutTheirs(op, t0, &error);
  if (theirs == nullptr) return error;
  Snap their_snap;
  their_snap.present = true;
  their_snap.data = theirs->data;
  their_snap.perms = theirs->perms;
  their_snap.uid = kUid;
  their_snap.gid = kGid;
  their_snap.id = theirs->id;
  FileModel& f = *nodes_.at(op.path).file;
  std::vector<Snap> states = {their_snap};
  if (f.dirty) {
    f.theirs_in_store = theirs;
    // Ours wins at its upload; until then only a version a close accepted outlives a crash.
    if (f.accepted) {
      for (const Snap& st : CrashOf(op.path)) {
        if (st.present && st.id == f.id) states.push_back(st);
      }
    }
  } else if (f.staged) {
    f.theirs = theirs;  // shown once the last handle closes
  } else {
    // Nothing of ours to keep: the handles' file is theirs now.
    const uint64_t id = f.id;
    const int handles = f.handles;
    const int writers = f.writers;
    const uint64_t emptied_by = f.emptied_by;
    f = *theirs;
    f.id = id;
    f.handles = handles;
    f.writers = writers;
    f.emptied_by = emptied_by;
    // Their object is what the handles' writes edit now.
    f.onto_base = true;
    f.base_empty = f.data.empty();
    states[0].id = id;
  }
  crash_[op.path] = states;
  return AdvanceModel(1500);
}

bool ModelRun::LeavesStoredMetadata(const Op& op) const {
  if (op.kind != Op::kChmod && op.kind != Op::kChown && op.kind != Op::kUtimens) return false;
  Result<ObjectInfo> head = memory_->head(op.path);
  if (!head.ok()) return false;
  const PosixMetadata stored = ParsePosixMetadata(head->metadata);
  if (!stored.mode || !stored.uid || !stored.gid || !stored.mtime_ns) return false;
  uint32_t mode = *stored.mode;
  uint32_t uid = *stored.uid;
  uint32_t gid = *stored.gid;
  int64_t mtime_ns = *stored.mtime_ns;
  if (op.kind == Op::kChmod) mode = (mode & S_IFMT) | op.value;
  if (op.kind == Op::kChown) uid = gid = op.value;
  if (op.kind == Op::kUtimens) mtime_ns = static_cast<int64_t>(op.value) * kNsPerSec;
  Metadata after = head->metadata;
  SetPosixMetadata(mode, uid, gid, mtime_ns, &after);
  return after == head->metadata;
}

std::string ModelRun::MetadataChange(const Op& op, bool* applied) {
  auto it = nodes_.find(op.path);
  if (it == nodes_.end() || it->second.kind == Kind::kLink) return "";
  Node& node = it->second;
  if (op.kind == Op::kSetXattr && node.kind != Kind::kFile) return "";
  // (Over another client's object shown only after the last close, a held change is left out.)
  if (node.kind == Kind::kFile && node.file->theirs != nullptr && !config_.sftp &&
      config_.metadata_delay > 0) {
    return "";
  }
  *applied = true;
  auto ino = Ino(op.path);
  if (!ino.ok()) return Failed("lookup " + op.path, ino.status());
  const bool changes_nothing = node.kind == Kind::kFile && !node.file->dirty &&
                               !node.file->meta_held && LeavesStoredMetadata(op);
  Status s;
  if (op.kind == Op::kSetXattr) {
    s = fs_->SetXattr(*ino, op.path2, "v" + std::to_string(op.value), 0);
  } else {
    FileAttr attr;
    uint32_t mask = 0;
    if (op.kind == Op::kChmod) {
      mask = kSetMode;
      attr.mode = op.value;
    } else if (op.kind == Op::kChown) {
      mask = kSetUid | kSetGid;
      attr.uid = attr.gid = op.value;
    } else {
      mask = kSetMtime;
      attr.mtime_ns = static_cast<int64_t>(op.value) * kNsPerSec;
    }
    s = fs_->SetAttr(*ino, mask, attr, std::nullopt).status();
  }
  if (!s.ok()) return Failed(KindName(op.kind), s);
  if (node.kind == Kind::kDir) {
    if (op.kind == Op::kChmod) node.perms = op.value;
    if (op.kind == Op::kChown) node.uid = op.value;
    return "";
  }
  FileModel& f = *node.file;
  auto change = [&](FileModel& m) {
    m.mtime_from_store = false;  // the change writes the mtime it shows into the metadata
    switch (op.kind) {
      case Op::kChmod:
        m.perms = op.value;
        break;
      case Op::kChown:
        m.uid = m.gid = op.value;
        break;
      case Op::kUtimens:
        m.mtime_lo = m.mtime_hi = static_cast<int64_t>(op.value) * kNsPerSec;
        m.mtime_by_writes = false;
        break;
      default:
        m.xattrs[op.path2] = "v" + std::to_string(op.value);
        break;
    }
  };
  if (f.theirs != nullptr) {
    // The change goes to the stored object, theirs, and the copy kept for the handles shows
    // its metadata until it goes.
    FileModel& t = *f.theirs;
    change(t);
    f.perms = t.perms;
    f.uid = t.uid;
    f.gid = t.gid;
    f.mtime_lo = t.mtime_lo;
    f.mtime_hi = t.mtime_hi;
    f.xattrs = t.xattrs;
    Snap st;
    st.present = true;
    st.data = t.data;
    st.perms = t.perms;
    st.uid = t.uid;
    st.gid = t.gid;
    st.xattrs = t.xattrs;
    st.id = t.id;
    crash_[op.path] = {st};
    return "";
  }
  change(f);
  if (changes_nothing) return "";  // no request, and nothing held
  if (f.dirty) {
    if (config_.writeback > 0 && f.handles == 0) {
      // A closed file in the write-back window is accepted again with the change.
      if (!f.due) f.due = Now() + static_cast<int64_t>(config_.writeback * kNsPerSec);
      f.accepted = true;
      Durable(op.path);
    } else {
      AddMetadataVariants(op.path);
    }
  } else if (config_.sftp || config_.metadata_delay == 0) {
    Durable(op.path);
  } else {
    AddMetadataVariants(op.path);
    f.meta_held = true;
    const int64_t due = Now() + static_cast<int64_t>(config_.metadata_delay * kNsPerSec);
    f.due = f.due ? std::min(*f.due, due) : due;
  }
  return "";
}

Result<std::string> ModelRun::ReadWhole(uint64_t ino) {
  // A reader's fetches are not the write path's (CountingStore).
  counted_->Pause(true);
  struct Resume {
    CountingStore* store;
    ~Resume() { store->Pause(false); }
  } resume{counted_.get()};
  OBJFS_ASSIGN_OR_RETURN(uint64_t fh, fs_->Open(ino, O_RDONLY));
  std::string out;
  std::string buf(20000, '\0');
  Status failed;
  for (;;) {
    auto n = fs_->Read(fh, out.size(),
                       std::span<std::byte>(reinterpret_cast<std::byte*>(buf.data()), buf.size()));
    if (!n.ok()) {
      failed = n.status();
      break;
    }
    if (*n == 0) break;
    out.append(buf.data(), *n);
  }
  Status flushed = fs_->Flush(fh);
  Status released = fs_->Release(fh);
  if (!failed.ok()) return failed;
  if (!flushed.ok()) return flushed;
  if (!released.ok()) return released;
  return out;
}

// `f` by value: the reader's close may give the name another file (ContestedPut), replacing the
// pointer the caller passed.
std::string ModelRun::CheckFile(
    const std::string& path, uint64_t ino, const Entry& e,
    std::shared_ptr<FileModel> f,  // NOLINT(performance-unnecessary-value-param)
    bool read) {
  std::ostringstream err;
  if ((e.attr.mode & S_IFMT) != S_IFREG)
    err << " not a regular file (mode " << Octal(e.attr.mode) << ")";
  if ((e.attr.mode & 07777) != f->perms) {
    err << " mode " << Octal(e.attr.mode & 07777) << ", model " << Octal(f->perms);
  }
  if (e.attr.size != f->data.size()) {
    err << " size " << e.attr.size << ", model " << f->data.size();
  }
  if (!config_.sftp && (e.attr.uid != f->uid || e.attr.gid != f->gid)) {
    err << " owner " << e.attr.uid << ":" << e.attr.gid << ", model " << f->uid << ":" << f->gid;
  }
  if (e.attr.mtime_ns < f->mtime_lo || e.attr.mtime_ns > f->mtime_hi) {
    err << " mtime " << e.attr.mtime_ns << " outside the model's [" << f->mtime_lo << ", "
        << f->mtime_hi << "]";
  }
  // A reader's open and close, as cat's: the model's rules for close apply.
  if (read) {
    OpenedStored(*f, path);
    f->handles++;
    auto data = ReadWhole(ino);
    CloseModel(*f, false);
    if (!data.ok()) {
      err << " read failed: " << data.status().ToString();
    } else if (*data != f->data) {
      err << " content " << ShowData(*data) << ", model " << ShowData(f->data);
    }
  }
  auto names = fs_->ListXattr(ino);
  if (!names.ok()) {
    err << " listxattr failed: " << names.status().ToString();
  } else {
    std::map<std::string, std::string> seen;
    for (const std::string& name : *names) {
      if (name == "user.etag" || name.starts_with("user.objfs.")) continue;
      auto v = fs_->GetXattr(ino, name);
      seen[name] = v.ok() ? *v : "<" + v.status().ToString() + ">";
    }
    if (seen != f->xattrs) {
      err << " xattrs {";
      for (const auto& [k, v] : seen) err << " " << k << "=" << v;
      err << " }, model {";
      for (const auto& [k, v] : f->xattrs) err << " " << k << "=" << v;
      err << " }";
    }
  }
  return err.str().empty() ? "" : path + ":" + err.str();
}

std::string ModelRun::ReadBack(const std::string& path) {
  auto parent = Ino(ParentOf(path));
  if (!parent.ok()) return Failed("lookup of the parent", parent.status());
  auto e = fs_->Lookup(*parent, NameOf(path));
  if (!e.ok()) return Failed("lookup " + path, e.status());
  lookups_.push_back(e->attr.ino);
  return CheckFile(path, e->attr.ino, *e, nodes_.at(path).file, true);
}

std::string ModelRun::Check(bool unread) {
  std::vector<std::string> dirs = {""};
  for (const auto& [p, n] : nodes_) {
    if (n.kind == Kind::kDir) dirs.push_back(p);
  }
  std::string out;
  for (const std::string& dir : dirs) {
    auto ino = Ino(dir);
    if (!ino.ok()) {
      out += "directory /" + dir + ": lookup failed: " + ino.status().ToString() + "\n";
      continue;
    }
    auto listing = fs_->ReadDir(*ino);
    if (!listing.ok()) {
      out += "directory /" + dir + ": readdir failed: " + listing.status().ToString() + "\n";
      continue;
    }
    std::set<std::string> listed;
    for (const DirEntry& e : *listing) listed.insert(e.name);
    std::set<std::string> expected;
    const std::string prefix = dir.empty() ? "" : dir + "/";
    for (const auto& [p, n] : nodes_) {
      if (ParentOf(p) == dir) expected.insert(NameOf(p));
    }
    if (listed != expected) {
      out += "directory /" + dir + " lists {";
      for (const auto& n : listed) out += " " + n;
      out += " }, the model has {";
      for (const auto& n : expected) out += " " + n;
      out += " }\n";
    }
    for (const std::string& name : expected) {
      const std::string path = prefix + name;
      const Node& node = nodes_.at(path);
      auto e = fs_->Lookup(*ino, name);
      if (!e.ok()) {
        out += path + ": lookup failed: " + e.status().ToString() + "\n";
        continue;
      }
      lookups_.push_back(e->attr.ino);
      const uint32_t type = e->attr.mode & S_IFMT;
      if (node.kind == Kind::kDir) {
        if (type != S_IFDIR) {
          out += path + ": mode " + Octal(e->attr.mode) + ", the model has a directory\n";
        } else if ((e->attr.mode & 07777) != node.perms) {
          out += path + ": directory mode " + Octal(e->attr.mode & 07777) + ", model " +
                 Octal(node.perms) + "\n";
        }
      } else if (node.kind == Kind::kLink) {
        auto target = fs_->ReadLink(e->attr.ino);
        if (type != S_IFLNK) {
          out += path + ": mode " + Octal(e->attr.mode) + ", the model has a link\n";
        } else if (!target.ok() || *target != node.target) {
          out += path + ": link target " + (target.ok() ? *target : target.status().ToString()) +
                 ", model " + node.target + "\n";
        }
      } else {
        const bool busy = node.file->handles > 0 || node.file->dirty;
        std::string bad = CheckFile(path, e->attr.ino, *e, node.file, !(unread && busy));
        if (!bad.empty()) out += bad + "\n";
      }
    }
  }
  ForgetLookups();
  return out;
}

std::string ModelRun::Observe(std::map<std::string, Snap>* out) {
  std::vector<std::string> dirs = {""};
  std::string err;
  for (size_t i = 0; i < dirs.size(); ++i) {
    const std::string dir = dirs[i];
    auto ino = Ino(dir);
    if (!ino.ok()) return "directory /" + dir + ": lookup failed: " + ino.status().ToString();
    auto listing = fs_->ReadDir(*ino);
    if (!listing.ok()) return "/" + dir + ": readdir failed: " + listing.status().ToString();
    for (const DirEntry& d : *listing) {
      const std::string path = dir.empty() ? d.name : dir + "/" + d.name;
      auto e = fs_->Lookup(*ino, d.name);
      if (!e.ok()) return path + ": lookup failed: " + e.status().ToString();
      lookups_.push_back(e->attr.ino);
      Snap s;
      s.present = true;
      s.perms = e->attr.mode & 07777;
      s.uid = e->attr.uid;
      s.gid = e->attr.gid;
      const uint32_t type = e->attr.mode & S_IFMT;
      if (type == S_IFDIR) {
        s.kind = Kind::kDir;
        dirs.push_back(path);
      } else if (type == S_IFLNK) {
        s.kind = Kind::kLink;
        auto t = fs_->ReadLink(e->attr.ino);
        if (!t.ok()) return path + ": readlink failed: " + t.status().ToString();
        s.data = *t;
        s.perms = 0777;
        s.uid = kUid;
        s.gid = kGid;
      } else {
        auto data = ReadWhole(e->attr.ino);
        if (!data.ok()) return path + ": read failed: " + data.status().ToString();
        s.data = *data;
        s.id = static_cast<uint64_t>(e->attr.mtime_ns);  // kept for the model's mtime
        auto names = fs_->ListXattr(e->attr.ino);
        if (!names.ok()) return path + ": listxattr failed: " + names.status().ToString();
        for (const std::string& name : *names) {
          if (name == "user.etag" || name.starts_with("user.objfs.")) continue;
          auto v = fs_->GetXattr(e->attr.ino, name);
          if (!v.ok()) return path + ": getxattr failed: " + v.status().ToString();
          s.xattrs[name] = *v;
        }
      }
      if (config_.sftp && s.kind != Kind::kLink) s.uid = s.gid = 0;  // not compared
      (*out)[path] = s;
    }
  }
  ForgetLookups();
  return err;
}

std::string ModelRun::Crash() {
  // What cache_dir holds at this instant is what the next mount finds.
  const std::string image = root_ + "/cache-" + std::to_string(++crashes_);
  std::error_code ec;
  std::filesystem::copy(options_.cache_dir, image, std::filesystem::copy_options::recursive, ec);
  if (ec) return "copying cache_dir: " + ec.message();
  slots_ = {};
  fs_.reset();
  store_.reset();
  options_.cache_dir = image;
  log_.clear();
  if (std::string failed = Start(); !failed.empty()) return failed;
  Status recovered = fs_->RecoverStaged();
  if (!recovered.ok()) return Failed("RecoverStaged", recovered);

  auto compare = [&](const std::map<std::string, Snap>& seen) -> std::string {
    std::string out;
    for (const auto& [path, node] : nodes_) {
      if (node.kind != Kind::kDir) continue;
      auto it = seen.find(path);
      if (it == seen.end() || it->second.kind != Kind::kDir) {
        out += "directory " + path + " is gone after the crash\n";
      } else if (it->second.perms != node.perms) {
        out += "directory " + path + " has mode " + Octal(it->second.perms) + ", model " +
               Octal(node.perms) + "\n";
      }
    }
    std::set<std::string> names;
    for (const auto& [path, s] : seen) {
      if (s.kind == Kind::kDir) {
        if (!IsDir(path)) out += path + " is a directory after the crash, unknown to the model\n";
        continue;
      }
      names.insert(path);
    }
    for (const auto& [path, states] : crash_) names.insert(path);
    for (const std::string& path : names) {
      if (IsDir(path)) continue;
      auto it = seen.find(path);
      Snap got = it == seen.end() ? Snap{} : it->second;
      if (config_.sftp) got.uid = got.gid = 0;  // the server's
      std::vector<Snap> allowed = CrashOf(path);
      if (config_.sftp) {
        for (Snap& a : allowed) a.uid = a.gid = 0;
      }
      if (std::find(allowed.begin(), allowed.end(), got) != allowed.end()) continue;
      out += path + " after the crash: " + Show(got) + "; allowed:";
      for (const Snap& a : allowed) out += "\n      " + Show(a);
      out += "\n";
    }
    return out;
  };
  std::map<std::string, Snap> served;
  if (std::string e = Observe(&served); !e.empty()) return "after recovery: " + e;
  if (std::string bad = compare(served); !bad.empty()) {
    std::string out = "served after recovery, before the uploads:\n" + bad;
    for (const std::string& line : log_) out += "    log: " + line + "\n";
    return out;
  }
  // The background uploads of what was recovered.
  Status uploaded = fs_->UploadDue();
  if (!uploaded.ok()) return Failed("recovery's uploads", uploaded);
  std::map<std::string, Snap> after;
  if (std::string e = Observe(&after); !e.empty()) return "after recovery's uploads: " + e;
  for (auto& [path, s] : after) s.id = 0;
  for (auto& [path, s] : served) s.id = 0;
  // The store itself: every key is a name the mount shows, with those bytes.
  ListOptions list;
  std::string out;
  std::set<std::string> keys;
  for (;;) {
    auto page = memory_->list(list);
    if (!page.ok()) return Failed("listing the store", page.status());
    for (const ObjectInfo& o : page->objects) keys.insert(o.key);
    if (page->next_token.empty()) break;
    list.continuation_token = page->next_token;
  }
  for (const std::string& key : keys) {
    const bool marker = key.ends_with('/');
    const std::string path = marker ? key.substr(0, key.size() - 1) : key;
    auto it = after.find(path);
    if (it == after.end()) {
      out += "the store has " + key + ", which the mount does not show\n";
    } else if (!marker && it->second.kind == Kind::kFile &&
               memory_->contents(key) != it->second.data) {
      out += "the store has " + ShowData(memory_->contents(key)) + " in " + key +
             ", the mount shows " + ShowData(it->second.data) + "\n";
    }
  }
  for (const auto& [path, s] : after) {
    if (s.kind == Kind::kDir ? keys.count(path + "/") == 0 : keys.count(path) == 0) {
      out += path + " is shown but not in the store after recovery's uploads\n";
    }
  }
  if (!out.empty()) return out;

  // The model starts again from what the new mount shows.
  crash_.clear();
  for (auto& [path, node] : nodes_) {
    if (node.kind != Kind::kDir) continue;
    node.uid = served.at(path).uid;
  }
  std::erase_if(nodes_, [](const auto& kv) { return kv.second.kind != Kind::kDir; });
  std::map<std::string, Snap> fresh;
  if (std::string e = Observe(&fresh); !e.empty()) return e;
  for (const auto& [path, s] : fresh) {
    if (s.kind == Kind::kDir) continue;
    Node n;
    n.kind = s.kind;
    if (s.kind == Kind::kLink) {
      n.target = s.data;
    } else {
      auto f = NewFile();
      f->data = s.data;
      f->perms = s.perms;
      f->uid = s.uid;
      f->gid = s.gid;
      f->xattrs = s.xattrs;
      f->mtime_lo = f->mtime_hi = static_cast<int64_t>(s.id);
      auto head = memory_->head(path);
      f->mtime_from_store = head.ok() && head->metadata.count("mtime") == 0;
      f->in_store = true;
      n.file = f;
    }
    nodes_[path] = n;
    Durable(path);
  }
  return "";
}

// ---- Generation, replay and shrinking ----

const std::vector<std::string> kNames = {"a", "b", "c", "d"};

std::string RandomPath(std::mt19937_64& rng, const ModelRun& run, bool existing) {
  const auto& nodes = run.nodes();
  if (existing && !nodes.empty() && rng() % 5 != 0) {
    auto it = nodes.begin();
    std::advance(it, rng() % nodes.size());
    return it->first;
  }
  std::vector<std::string> dirs = {""};
  for (const auto& [p, n] : nodes) {
    if (n.kind == Kind::kDir && std::count(p.begin(), p.end(), '/') < 1) dirs.push_back(p);
  }
  const std::string& dir = dirs[rng() % dirs.size()];
  const std::string& name = kNames[rng() % kNames.size()];
  return dir.empty() ? name : dir + "/" + name;
}

Op GenerateOne(std::mt19937_64& rng, const ModelRun& run, const std::set<std::string>& skip) {
  struct Weighted {
    Op::Kind kind;
    int weight;
  };
  static const std::vector<Weighted> kWeights = {
      {Op::kCreate, 8},      {Op::kOpen, 8},           {Op::kWrite, 24},    {Op::kClose, 16},
      {Op::kFsync, 3},       {Op::kTruncate, 2},       {Op::kFtruncate, 3}, {Op::kChmod, 3},
      {Op::kChown, 2},       {Op::kUtimens, 3},        {Op::kSetXattr, 2},  {Op::kRename, 6},
      {Op::kUnlink, 3},      {Op::kMkdir, 4},          {Op::kRmdir, 2},     {Op::kSymlink, 2},
      {Op::kExternalPut, 3}, {Op::kExternalDelete, 1}, {Op::kAdvance, 4},   {Op::kCrash, 2},
  };
  auto skipped = [&](Op::Kind k) {
    if (skip.count(KindName(k)) > 0) return true;
    return false;
  };
  int total = 0;
  for (const Weighted& w : kWeights) total += skipped(w.kind) ? 0 : w.weight;
  int pick = static_cast<int>(rng() % total);
  Op op;
  for (const Weighted& w : kWeights) {
    if (skipped(w.kind)) continue;
    if (pick < w.weight) {
      op.kind = w.kind;
      break;
    }
    pick -= w.weight;
  }
  op.slot = static_cast<int>(rng() % kSlots);
  // Ops on a handle pick an open one when there is one.
  if (op.kind == Op::kWrite || op.kind == Op::kClose || op.kind == Op::kFsync ||
      op.kind == Op::kFtruncate) {
    for (int i = 0; i < kSlots; ++i) {
      int s = (op.slot + i) % kSlots;
      if (run.SlotOpen(s) &&
          (op.kind == Op::kClose || op.kind == Op::kFsync || run.SlotWriter(s))) {
        op.slot = s;
        break;
      }
    }
  }
  if (op.kind == Op::kCreate || op.kind == Op::kOpen) {
    for (int i = 0; i < kSlots; ++i) {
      int s = (op.slot + i) % kSlots;
      if (!run.SlotOpen(s)) {
        op.slot = s;
        break;
      }
    }
  }
  const bool existing = op.kind != Op::kCreate && op.kind != Op::kMkdir &&
                        op.kind != Op::kSymlink && op.kind != Op::kExternalPut;
  op.path = RandomPath(rng, run, existing || rng() % 3 == 0);
  // An open goes to a file (half of the time one of a part or more, when there is one: an edit
  // that copies its untouched parts, a second handle on a file streaming, a write after the
  // close of one).
  if (op.kind == Op::kOpen) {
    std::vector<std::string> files;
    std::vector<std::string> big;
    for (const auto& [p, n] : run.nodes()) {
      if (n.kind != Kind::kFile) continue;
      files.push_back(p);
      if (n.file->data.size() >= kPartSize) big.push_back(p);
    }
    const bool pick_big = rng() % 2 == 0 && !big.empty();
    if (pick_big) {
      op.path = big[rng() % big.size()];
    } else if (!files.empty()) {
      op.path = files[rng() % files.size()];
    }
  }
  switch (op.kind) {
    case Op::kCreate:
      op.flags = rng() % 2;
      break;
    case Op::kOpen:
      // Half of them open for writing without O_TRUNC: appends and edits of stored files.
      op.flags = std::vector<int>{0, 1, 1, 2}[rng() % 4];
      break;
    case Op::kWrite: {
      op.value = static_cast<uint32_t>(rng() % 1000);
      // Sizes around the part size (a file grows past a part, and streams, in a few calls),
      // some past the multipart threshold in one call, most small; into a file of two parts
      // or more, mostly small (an edit that leaves parts as they were).
      const uint64_t size = run.SlotSize(op.slot);
      const bool edit = size >= 2 * kPartSize;
      const int r = static_cast<int>(rng() % 100);
      if (r < 3) {
        op.size = kMultipartThreshold + rng() % (2 * kPartSize);
      } else if (r < (edit ? 10 : 25)) {
        op.size = kPartSize / 2 + rng() % (2 * kPartSize);
      } else if (r < (edit ? 20 : 40)) {
        op.size = 1 + rng() % (kPartSize / 4);
      } else {
        op.size = 1 + rng() % 300;
      }
      // At the start; at the end (a sequential writer's next call, crossing part boundaries);
      // into the middle (an edit of a stored file, a write back into a part already sent);
      // or near the start.
      const int o = static_cast<int>(rng() % 10);
      if (o < (edit ? 1 : 3)) {
        op.offset = 0;
      } else if (o < 6 && size < kMaxAppendedSize) {
        op.offset = size;
      } else if (o < 8 && size > 0) {
        op.offset = rng() % size;
      } else {
        op.offset = rng() % 600;
      }
      break;
    }
    case Op::kTruncate:
    case Op::kFtruncate: {
      // Mostly short; else anywhere up to a part past the end (cutting a streaming file
      // back into a part sent, or past a part boundary).
      uint64_t size = 0;
      if (op.kind == Op::kFtruncate) {
        size = run.SlotSize(op.slot);
      } else if (const Node* n = run.Find(op.path); n != nullptr && n->kind == Kind::kFile) {
        size = n->file->data.size();
      }
      op.size = rng() % 3 == 0 ? rng() % (size + kPartSize) : rng() % 400;
      break;
    }
    case Op::kChmod:
      op.value = std::vector<uint32_t>{0600, 0644, 0640, 0755, 0700}[rng() % 5];
      break;
    case Op::kChown:
      op.value = 1000 + static_cast<uint32_t>(rng() % 3);
      break;
    case Op::kUtimens:
      op.value = 1600000000 + static_cast<uint32_t>(rng() % 1000);
      break;
    case Op::kSetXattr:
      op.path2 = "user.k" + std::to_string(rng() % 2);
      op.value = static_cast<uint32_t>(rng() % 10);
      break;
    case Op::kRename:
      op.path2 = RandomPath(rng, run, rng() % 2 == 0);
      op.flags = rng() % 4 == 0 ? 1 : 0;
      break;
    case Op::kMkdir:
      op.value = rng() % 2 ? 0755 : 0700;
      break;
    case Op::kSymlink:
      op.path2 = "target-" + std::to_string(rng() % 5);
      break;
    case Op::kExternalPut:
      // Some of several parts: objects of another client that this mount then edits.
      op.size = rng() % 4 == 0 ? rng() % (4 * kPartSize) : rng() % 200;
      op.value = static_cast<uint32_t>(rng() % 1000);
      op.flags = static_cast<int>(rng() % 4);
      break;
    case Op::kAdvance:
      op.size = std::vector<uint64_t>{300, 1200, 6000}[rng() % 3];
      break;
    default:
      break;
  }
  return op;
}

// Episodes: after some creates and opens for writing, the ops such a writer makes, queued in
// `plan` and interleaved with random ones (one op in three is random while the plan lasts):
// - a sequential writer from the start, in calls of about a part that cross part boundaries
//   (its parts stream), sometimes going back into a part already sent or cutting the file
//   while it streams;
// - an edit of a file of two parts or more: a little into the middle, or an append, once or
//   twice (its close copies the untouched parts, and fetches only the blocks it needs);
// then mostly its close (else the handle stays open for a crash, a rename, another handle).
Op Generate(std::mt19937_64& rng, const ModelRun& run, const std::set<std::string>& skip,
            std::deque<Op>* plan) {
  if (!plan->empty() && rng() % 3 != 0) {
    Op op = plan->front();
    plan->pop_front();
    if (skip.count(KindName(op.kind)) == 0) return op;
  }
  Op op = GenerateOne(rng, run, skip);
  const bool writer = op.kind == Op::kCreate || (op.kind == Op::kOpen && op.flags > 0);
  if (!plan->empty() || !writer) return op;
  const bool keeps = op.kind == Op::kCreate ? (op.flags & 1) == 0 : op.flags == 1;
  const Node* node = run.Find(op.path);
  uint64_t size =
      keeps && node != nullptr && node->kind == Kind::kFile ? node->file->data.size() : 0;
  // (Every writer that keeps a file of two parts or more gets one; half of the others.)
  if (size < 2 * kPartSize && rng() % 2 != 0) return op;
  auto on_slot = [&](Op::Kind kind) {
    Op o;
    o.kind = kind;
    o.slot = op.slot;
    return o;
  };
  auto write = [&](uint64_t offset, uint64_t length) {
    Op w = on_slot(Op::kWrite);
    w.offset = offset;
    w.size = length;
    w.value = static_cast<uint32_t>(rng() % 1000);
    return w;
  };
  if (size >= 2 * kPartSize) {
    for (int n = 1 + static_cast<int>(rng() % 2); n > 0; --n) {
      const uint64_t length = 1 + rng() % 300;
      if (rng() % 2 == 0) {
        plan->push_back(write(rng() % size, length));
      } else {
        plan->push_back(write(size, length));
        size += length;
      }
    }
  } else {
    uint64_t at = 0;
    for (int n = 2 + static_cast<int>(rng() % 4); n > 0; --n) {
      const uint64_t length = kPartSize / 2 + rng() % kPartSize;
      plan->push_back(write(at, length));
      at += length;
    }
    if (rng() % 3 == 0) plan->push_back(write(rng() % at, 1 + rng() % 300));
    if (rng() % 4 == 0) {
      Op cut = on_slot(Op::kFtruncate);
      cut.size = rng() % at;
      plan->push_back(cut);
    }
  }
  if (rng() % 4 != 0) plan->push_back(on_slot(Op::kClose));
  return op;
}

Config ConfigFor(uint64_t seed, bool sftp) {
  Config c;
  c.sftp = sftp;
  c.writeback = seed % 3 == 0 ? 0 : 5;
  c.metadata_delay = sftp || seed % 2 == 0 ? 0 : 1;
  return c;
}

struct Failure {
  size_t index = 0;  // of the op after which it failed
  std::string message;
};

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // On tmpfs when there is one: crash records are fsync()ed, which costs a disk write each.
    const bool shm = std::filesystem::is_directory("/dev/shm");
    std::string tmpl = shm ? "/dev/shm/objfs-model-test-XXXXXX" : "/tmp/objfs-model-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string NewRoot() {
    std::string dir = root_ + "/run-" + std::to_string(++runs_);
    std::filesystem::create_directories(dir);
    return dir;
  }

  // Runs `ops` from a fresh store; the first failure, if any. `executed` (optional) gets the
  // ops actually applied.
  std::optional<Failure> Replay(const Config& config, const std::vector<Op>& ops) {
    const std::string dir = NewRoot();
    std::optional<Failure> failure;
    {
      ModelRun run(config, dir);
      if (std::string e = run.Start(); !e.empty()) return Failure{0, e};
      for (size_t i = 0; i < ops.size() && !failure; ++i) {
        bool applied = false;
        std::string e = run.Apply(ops[i], &applied);
        if (e.empty() && applied) e = run.Check(ops[i].unread);
        if (std::getenv("OBJFS_MODEL_VERBOSE") != nullptr) {
          std::printf("%s%s\n%s", Describe(ops[i]).c_str(), applied ? "" : " (skipped)",
                      run.DumpCrashStates().c_str());
        }
        if (!e.empty()) failure = Failure{i, e};
      }
      if (!failure && !ops.empty()) {
        if (std::string e = run.Check(); !e.empty()) failure = Failure{ops.size() - 1, e};
      }
    }
    std::filesystem::remove_all(dir);
    return failure;
  }

  // Generates and runs one sequence; on failure returns the ops run so far.
  std::optional<Failure> RunSeed(const Config& config, uint64_t seed, size_t count,
                                 const std::set<std::string>& skip, std::vector<Op>* ops) {
    const std::string dir = NewRoot();
    std::optional<Failure> failure;
    {
      std::mt19937_64 rng(seed);
      // Stretches of ops whose checks leave busy files unread (Op::unread), about ten ops
      // long, half of the time: long enough for a write into a stored file to meet its close,
      // a rename or a crash while the staged file is still sparse.
      std::mt19937_64 stretches(seed ^ 0x5eed5eedULL);
      bool unread = false;
      std::deque<Op> plan;
      ModelRun run(config, dir);
      if (std::string e = run.Start(); !e.empty()) return Failure{0, e};
      for (size_t i = 0; i < count && !failure; ++i) {
        Op op = Generate(rng, run, skip, &plan);
        if (stretches() % 10 == 0) unread = !unread;
        op.unread = unread;
        bool applied = false;
        std::string e = run.Apply(op, &applied);
        if (!applied) continue;
        ops->push_back(op);
        ++applied_[Describe(op).substr(0, Describe(op).find(' '))];
        if (e.empty()) e = run.Check(op.unread);
        if (!e.empty()) failure = Failure{ops->size() - 1, e};
      }
      // Whatever the last checks left unread is read now.
      if (!failure && !ops->empty()) {
        if (std::string e = run.Check(); !e.empty()) failure = Failure{ops->size() - 1, e};
      }
      coverage_.Add(run.coverage());
    }
    std::filesystem::remove_all(dir);
    return failure;
  }

  // Delta debugging: drops chunks of ops, then single ops, while the sequence still fails.
  std::vector<Op> Shrink(const Config& config, std::vector<Op> ops, Failure* failure) {
    int budget = 400;
    for (size_t chunk = std::max<size_t>(ops.size() / 2, 1); chunk >= 1 && budget > 0; chunk /= 2) {
      for (size_t start = 0; start < ops.size() && budget > 0;) {
        std::vector<Op> fewer(ops.begin(), ops.begin() + start);
        fewer.insert(fewer.end(), ops.begin() + std::min(ops.size(), start + chunk), ops.end());
        --budget;
        if (auto f = Replay(config, fewer)) {
          ops = std::move(fewer);
          ops.resize(std::min(ops.size(), f->index + 1));
          *failure = *f;
        } else {
          start += chunk;
        }
      }
      if (chunk == 1) break;
    }
    return ops;
  }

  void RunPersonality(bool sftp) {
    const char* runs_env = std::getenv("OBJFS_MODEL_RUNS");
    const char* seed_env = std::getenv("OBJFS_MODEL_SEED");
    const char* ops_env = std::getenv("OBJFS_MODEL_OPS");
    const uint64_t runs = runs_env ? std::strtoull(runs_env, nullptr, 10) : 100;
    const uint64_t first = seed_env ? std::strtoull(seed_env, nullptr, 10) : 1;
    const size_t count = ops_env ? std::strtoull(ops_env, nullptr, 10) : 60;
    const std::set<std::string> skip = SkippedKinds();
    for (uint64_t seed = first; seed < first + runs; ++seed) {
      const Config config = ConfigFor(seed, sftp);
      std::vector<Op> ops;
      auto failure = RunSeed(config, seed, count, skip, &ops);
      if (!failure) continue;
      Failure shrunk_failure = *failure;
      std::vector<Op> shrunk = Shrink(config, ops, &shrunk_failure);
      std::ostringstream report;
      report << "seed " << seed << " (" << config.Describe() << ") fails after op "
             << failure->index + 1 << " of " << ops.size() << "; shrunk to " << shrunk.size()
             << " ops (rerun: OBJFS_MODEL_SEED=" << seed << " OBJFS_MODEL_RUNS=1"
             << (skip.empty() ? "" : " OBJFS_MODEL_SKIP=...") << "):\n";
      for (size_t i = 0; i < shrunk.size(); ++i) {
        report << "  " << (i + 1) << ". " << Describe(shrunk[i]) << "\n";
      }
      report << "=> " << shrunk_failure.message;
      ADD_FAILURE() << report.str();
      return;
    }
    if (std::getenv("OBJFS_MODEL_STATS") != nullptr) {
      std::ostringstream stats;
      for (const auto& [kind, n] : applied_) stats << " " << kind << "=" << n;
      std::printf("ops applied:%s\n", stats.str().c_str());
      std::printf("write path: %s\n", coverage_.ToString().c_str());
    }
    // The write path's ways to the store, each reached over a run set of the default size or
    // more with every op kind: a generator change that loses one fails here, not silently.
    if (runs >= kCoverageRuns && skip.empty()) {
      EXPECT_GT(coverage_.streamed_parts, 0u) << coverage_.ToString();
      EXPECT_GT(coverage_.stream_fallbacks, 0u) << coverage_.ToString();
      EXPECT_GT(coverage_.copied_parts, 0u) << coverage_.ToString();
      EXPECT_GT(coverage_.edits_with_copies, 0u) << coverage_.ToString();
      EXPECT_GT(coverage_.sparse_fetches, 0u) << coverage_.ToString();
    }
  }

  // Run sets at least this long must reach every counter of Coverage.
  static constexpr uint64_t kCoverageRuns = 100;

  std::string root_;
  int runs_ = 0;
  std::map<std::string, uint64_t> applied_;  // ops applied, by their first word
  Coverage coverage_;                        // over the run set
};

TEST_F(ModelTest, S3LikeStore) { RunPersonality(/*sftp=*/false); }

TEST_F(ModelTest, SftpLikeStore) { RunPersonality(/*sftp=*/true); }

}  // namespace
}  // namespace objfs
