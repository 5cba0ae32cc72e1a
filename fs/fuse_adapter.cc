#define FUSE_USE_VERSION 314

#include "fs/fuse_adapter.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/log.h"
#include "backend/mutex.h"
#include "fs/errno_map.h"
#include "fs/xattr.h"

namespace objfs {
namespace {

// An open directory: the listing that readdir/readdirplus serve by offset, one page of it at a
// time. Offset i+1 follows the i-th name, where names 0 and 1 are "." and ".." and name i+2 is
// the listing's i-th, held as entries[i - base].
struct DirHandle {
  uint64_t ino = 0;
  Mutex mu;  // lock 0 of fs/lock_order.h
  DirCursor cursor GUARDED_BY(mu);
  uint64_t base GUARDED_BY(mu) = 0;  // the listing index of entries[0]
  std::vector<DirEntry> entries GUARDED_BY(mu);
  // A readdir has read from `entries` (rewinddir then re-lists).
  bool served GUARDED_BY(mu) = false;
};

// Makes dir->entries hold listing index `index`, or leaves them past the end of the listing
// (dir->cursor.done). A later index reads on; an earlier one than the page held lists again
// from the start (seekdir back, or the kernel re-reading an earlier page).
Status SeekDir(Filesystem& fs, DirHandle* dir, uint64_t index) REQUIRES(dir->mu) {
  if (index < dir->base) {
    dir->cursor = DirCursor{};
    dir->base = 0;
    dir->entries.clear();
  }
  while (index >= dir->base + dir->entries.size() && !dir->cursor.done) {
    Result<std::vector<DirEntry>> page = fs.ReadDirPage(dir->ino, &dir->cursor);
    if (!page.ok()) return page.status();
    dir->base += dir->entries.size();
    dir->entries = std::move(*page);
  }
  return Status::Ok();
}

FuseAdapter& AdapterOf(fuse_req_t req) {
  return *static_cast<FuseAdapter*>(fuse_req_userdata(req));
}

Filesystem& FsOf(fuse_req_t req) { return *AdapterOf(req).filesystem(); }

int ErrnoOf(const Status& status) {
  int err = ErrnoFromStatus(status);
  return err > 0 ? err : EIO;
}

// What the request a thread is serving is about: named in the log line of a failed reply.
struct RequestInfo {
  const char* op;
  fuse_ino_t ino = 0;               // the file, or the directory holding `name`
  const char* name = nullptr;       // the name in directory `ino`, for lookup, create, ...
  const char* attribute = nullptr;  // the extended attribute, for the *xattr operations
};
thread_local const RequestInfo* serving = nullptr;

// The room a size probe of user.objfs.stats leaves for counters that grow meanwhile.
constexpr size_t kStatsRoom = 1024;

std::string Describe(Filesystem& fs, const RequestInfo& info) {
  std::string where;
  Result<std::string> path = fs.PathOf(info.ino);
  if (path.ok()) {
    where = "/" + *path;
    if (info.name != nullptr) {
      if (where.back() != '/') where += "/";
      where += info.name;
    }
  } else {
    where = "inode " + std::to_string(info.ino);
    if (info.name != nullptr) where += std::string(" name ") + info.name;
  }
  if (info.attribute != nullptr) where += std::string(" attribute ") + info.attribute;
  return where;
}

// Answers the request with `err`, counting and logging it (fs/reply_log.h) with `why`. The
// answer goes out whatever happens to the logging (out of memory): never an exception into
// libfuse's C code, never a request left without a reply.
void ReplyError(fuse_req_t req, int err, std::string_view why) noexcept {
  if (serving != nullptr) {
    try {
      const RequestInfo& info = *serving;
      AdapterOf(req).reply_log().Record(
          info.op, err, [&] { return Describe(FsOf(req), info); }, why);
    } catch (...) {
    }
  }
  fuse_reply_err(req, err);
}

void ReplyStatus(fuse_req_t req, const Status& status) {
  if (status.ok()) {
    fuse_reply_err(req, 0);
  } else {
    ReplyError(req, ErrnoOf(status), status.message());
  }
}

timespec ToTimespec(int64_t ns) {
  timespec ts{};
  int64_t sec = ns / 1'000'000'000;
  int64_t rem = ns % 1'000'000'000;
  if (rem < 0) {
    rem += 1'000'000'000;
    --sec;
  }
  ts.tv_sec = static_cast<time_t>(sec);
  ts.tv_nsec = static_cast<long>(rem);
  return ts;
}

int64_t FromTimespec(const timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct stat ToStat(const FileAttr& attr) {
  struct stat st {};
  st.st_ino = attr.ino;
  st.st_mode = attr.mode;
  st.st_nlink = attr.nlink;
  st.st_rdev = static_cast<dev_t>(attr.rdev);
  st.st_uid = attr.uid;
  st.st_gid = attr.gid;
  st.st_size = static_cast<off_t>(attr.size);
  st.st_blksize = 4096;
  st.st_blocks = static_cast<blkcnt_t>((attr.size + 511) / 512);
  st.st_atim = ToTimespec(attr.atime_ns);
  st.st_mtim = ToTimespec(attr.mtime_ns);
  st.st_ctim = ToTimespec(attr.ctime_ns);
  return st;
}

fuse_entry_param ToEntryParam(const Entry& entry) {
  fuse_entry_param param{};
  param.ino = entry.attr.ino;
  param.generation = 0;
  param.attr = ToStat(entry.attr);
  param.attr_timeout = entry.attr_timeout;
  param.entry_timeout = entry.entry_timeout;
  return param;
}

void ReplyEntry(fuse_req_t req, const Result<Entry>& entry) {
  if (!entry.ok()) {
    ReplyStatus(req, entry.status());
    return;
  }
  fuse_entry_param param = ToEntryParam(*entry);
  fuse_reply_entry(req, &param);
}

// Runs `body`, answering the request with EIO when it throws (allocation failure, a bug):
// libfuse's C code must never see an exception.
// Failed replies are logged with `info` (ReplyError).
template <typename Body>
void Guarded(fuse_req_t req, const RequestInfo& info, Body&& body) {
  serving = &info;
  try {
    body();
  } catch (const std::exception& e) {
    ReplyError(req, EIO, e.what());  // nothing that may throw again here
  } catch (...) {
    ReplyError(req, EIO, "unknown exception");
  }
  serving = nullptr;
}

// ---- The operations ----

void OpInit(void* userdata, fuse_conn_info* conn) {
  auto* adapter = static_cast<FuseAdapter*>(userdata);
  const FuseAdapterOptions& options = adapter->options();
  conn->max_write = options.max_write;
  conn->max_read = options.max_read;
  conn->max_readahead = options.max_readahead;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  // Always readdirplus: a listing already carries the attributes, so handing them over saves
  // the kernel a lookup per name.
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  // Writes must reach Filesystem as they happen: it stages and uploads them itself.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Cached pages are dropped by version (an open's keep_cache, Filesystem's page invalidator),
  // not by the kernel on every new mtime: a write through the mount gives the file a new mtime
  // that the kernel's own pages already hold, and dropping them made the next read fetch it all.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
}

void OpDestroy(void* userdata) {
  try {
    static_cast<FuseAdapter*>(userdata)->FlushAllOnDestroy();
  } catch (...) {
    LogError("flushing at unmount failed with an exception");
  }
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guarded(req, {"lookup", parent, name}, [&] {
    Filesystem& fs = FsOf(req);
    Result<Entry> entry = fs.Lookup(parent, name);
    if (!entry.ok() && ErrnoOf(entry.status()) == ENOENT && fs.options().negative_timeout > 0) {
      // A negative entry: the kernel remembers the miss for negative_timeout.
      fuse_entry_param param{};
      param.ino = 0;
      param.entry_timeout = fs.options().negative_timeout;
      fuse_reply_entry(req, &param);
      return;
    }
    ReplyEntry(req, entry);
  });
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  try {
    FsOf(req).Forget(ino, nlookup);
  } catch (...) {
    LogError("forget failed with an exception");
  }
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  try {
    Filesystem& fs = FsOf(req);
    for (size_t i = 0; i < count; ++i) fs.Forget(forgets[i].ino, forgets[i].nlookup);
  } catch (...) {
    LogError("forget failed with an exception");
  }
  fuse_reply_none(req);
}

void OpGetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  Guarded(req, {"getattr", ino}, [&] {
    Result<Entry> entry = FsOf(req).GetAttr(ino);
    if (!entry.ok()) {
      ReplyStatus(req, entry.status());
      return;
    }
    struct stat st = ToStat(entry->attr);
    fuse_reply_attr(req, &st, entry->attr_timeout);
  });
}

void OpSetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  Guarded(req, {"setattr", ino}, [&] {
    uint32_t mask = 0;
    if (to_set & FUSE_SET_ATTR_MODE) mask |= kSetMode;
    if (to_set & FUSE_SET_ATTR_UID) mask |= kSetUid;
    if (to_set & FUSE_SET_ATTR_GID) mask |= kSetGid;
    if (to_set & FUSE_SET_ATTR_SIZE) mask |= kSetSize;
    if (to_set & FUSE_SET_ATTR_ATIME) mask |= kSetAtime;
    if (to_set & FUSE_SET_ATTR_MTIME) mask |= kSetMtime;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) mask |= kSetAtimeNow;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) mask |= kSetMtimeNow;
    if (to_set & FUSE_SET_ATTR_CTIME) mask |= kSetCtime;
    FileAttr wanted;
    wanted.ino = ino;
    wanted.mode = attr->st_mode;
    wanted.uid = attr->st_uid;
    wanted.gid = attr->st_gid;
    wanted.size = attr->st_size < 0 ? 0 : static_cast<uint64_t>(attr->st_size);
    wanted.atime_ns = FromTimespec(attr->st_atim);
    wanted.mtime_ns = FromTimespec(attr->st_mtim);
    wanted.ctime_ns = FromTimespec(attr->st_ctim);
    if ((to_set & FUSE_SET_ATTR_SIZE) && attr->st_size < 0) {
      ReplyError(req, EINVAL, "negative size");
      return;
    }
    std::optional<uint64_t> fh;
    if (fi != nullptr) fh = fi->fh;
    Result<Entry> entry = FsOf(req).SetAttr(ino, mask, wanted, fh);
    if (!entry.ok()) {
      ReplyStatus(req, entry.status());
      return;
    }
    struct stat st = ToStat(entry->attr);
    fuse_reply_attr(req, &st, entry->attr_timeout);
  });
}

void OpReadLink(fuse_req_t req, fuse_ino_t ino) {
  Guarded(req, {"readlink", ino}, [&] {
    Result<std::string> target = FsOf(req).ReadLink(ino);
    if (!target.ok()) {
      ReplyStatus(req, target.status());
      return;
    }
    fuse_reply_readlink(req, target->c_str());
  });
}

// The uid and gid of the process behind a request: the owner of what it creates. Its
// supplementary groups are read when a check asks (Owner::in_group), while the request is
// answered; where they cannot be read (no /proc), it has none, and a check may refuse what the
// kernel would allow, never the other way round.
Owner CallerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx == nullptr) return Owner{};
  Owner owner{ctx->uid, ctx->gid};
  owner.in_group = [req](uint32_t gid) {
    std::vector<gid_t> groups(32);
    for (int attempt = 0; attempt < 3; ++attempt) {
      const int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
      if (n < 0) return false;
      if (static_cast<size_t>(n) <= groups.size()) {
        return std::find(groups.begin(), groups.begin() + n, gid) != groups.begin() + n;
      }
      groups.resize(static_cast<size_t>(n));  // more than asked for: again, with room for all
    }
    return false;
  };
  return owner;
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Guarded(req, {"mknod", parent, name}, [&] {
    Filesystem& fs = FsOf(req);
    if (!S_ISREG(mode)) {
      // A FIFO, socket (bind) or device.
      ReplyEntry(req, fs.MkNod(parent, name, mode, rdev, CallerOf(req)));
      return;
    }
    Result<CreatedFile> created =
        fs.Create(parent, name, mode, O_WRONLY | O_CREAT | O_EXCL, CallerOf(req));
    if (!created.ok()) {
      ReplyStatus(req, created.status());
      return;
    }
    Status released = fs.Release(created->fh);
    if (!released.ok()) {
      fs.Forget(created->entry.attr.ino, 1);
      ReplyStatus(req, released);
      return;
    }
    fuse_entry_param param = ToEntryParam(created->entry);
    fuse_reply_entry(req, &param);
  });
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Guarded(req, {"mkdir", parent, name},
          [&] { ReplyEntry(req, FsOf(req).MkDir(parent, name, mode, CallerOf(req))); });
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guarded(req, {"unlink", parent, name}, [&] { ReplyStatus(req, FsOf(req).Unlink(parent, name)); });
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guarded(req, {"rmdir", parent, name}, [&] { ReplyStatus(req, FsOf(req).RmDir(parent, name)); });
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  Guarded(req, {"symlink", parent, name},
          [&] { ReplyEntry(req, FsOf(req).Symlink(link, parent, name, CallerOf(req))); });
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
              const char* new_name, unsigned int flags) {
  Guarded(req, {"rename", parent, name}, [&] {
    uint32_t rename_flags = 0;
    if (flags & RENAME_NOREPLACE) rename_flags |= kRenameNoReplace;
    if (flags & RENAME_EXCHANGE) rename_flags |= kRenameExchange;
    if (flags & ~static_cast<unsigned int>(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
      ReplyError(req, EINVAL, "unknown rename flags");
      return;
    }
    ReplyStatus(req, FsOf(req).Rename(parent, name, new_parent, new_name, rename_flags));
  });
}

// An open that truncates drops the file's set-user-ID bit (and its set-group-ID bit where group
// execute is set), as truncate(2) and a write do, unless the caller may keep them (CAP_FSETID:
// root, here). The kernel leaves this to a file system that takes O_TRUNC with the open
// (FUSE_CAP_ATOMIC_O_TRUNC).
void DropSetIdBits(fuse_req_t req, fuse_ino_t ino, uint64_t fh) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx == nullptr || ctx->uid == 0) return;
  Result<Entry> entry = FsOf(req).GetAttr(ino);
  if (!entry.ok()) return;
  const uint32_t drop = S_ISUID | ((entry->attr.mode & S_IXGRP) != 0 ? S_ISGID : 0);
  if ((entry->attr.mode & drop) == 0) return;
  FileAttr attr = entry->attr;
  attr.mode &= ~drop;
  (void)FsOf(req).SetAttr(ino, kSetMode, attr, fh);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, {"open", ino}, [&] {
    bool keep_cache = false;
    Result<uint64_t> fh = FsOf(req).Open(ino, fi->flags, &keep_cache);
    if (!fh.ok()) {
      ReplyStatus(req, fh.status());
      return;
    }
    if ((fi->flags & O_TRUNC) != 0) DropSetIdBits(req, ino, *fh);
    fi->fh = *fh;
    // The kernel's pages of the file hold its current version: reads are served from them.
    fi->keep_cache = keep_cache ? 1 : 0;
    fi->direct_io = AdapterOf(req).options().direct_io ? 1 : 0;
    if (fuse_reply_open(req, fi) != 0) {
      // The opener is gone (interrupted): nobody will release this handle.
      Status ignored = FsOf(req).Release(*fh);
      (void)ignored;
      // Nor did the kernel drop the old version's pages, which the file's record says it did.
      if (!keep_cache) AdapterOf(req).InvalidatePages(ino);
    }
  });
}

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  Guarded(req, {"read", ino}, [&] {
    if (off < 0) {
      ReplyError(req, EINVAL, "negative offset");
      return;
    }
    // The reply goes out from the read-ahead buffers themselves (writev), never copied into a
    // reply buffer first.
    std::vector<ReadSegment> segments;
    Result<size_t> n = FsOf(req).ReadSegments(fi->fh, static_cast<uint64_t>(off), size, &segments);
    if (!n.ok()) {
      ReplyStatus(req, n.status());
      return;
    }
    if (segments.empty()) {
      fuse_reply_buf(req, nullptr, 0);
      return;
    }
    std::vector<iovec> iov(segments.size());
    for (size_t i = 0; i < segments.size(); ++i) {
      iov[i].iov_base = const_cast<std::byte*>(segments[i].data);
      iov[i].iov_len = segments[i].size;
    }
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
  });
}

void OpWrite(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off,
             fuse_file_info* fi) {
  Guarded(req, {"write", ino}, [&] {
    if (off < 0) {
      ReplyError(req, EINVAL, "negative offset");
      return;
    }
    Result<size_t> n =
        FsOf(req).Write(fi->fh, static_cast<uint64_t>(off),
                        std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size));
    if (!n.ok()) {
      ReplyStatus(req, n.status());
      return;
    }
    fuse_reply_write(req, *n);
  });
}

void OpFlush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, {"flush", ino}, [&] { ReplyStatus(req, FsOf(req).Flush(fi->fh)); });
}

void OpRelease(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, {"release", ino}, [&] { ReplyStatus(req, FsOf(req).Release(fi->fh)); });
}

void OpFsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
  Guarded(req, {"fsync", ino}, [&] { ReplyStatus(req, FsOf(req).Fsync(fi->fh, datasync != 0)); });
}

void OpOpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, {"opendir", ino}, [&] {
    auto dir = std::make_unique<DirHandle>();
    dir->ino = ino;
    // The first page now, so that a listing that fails fails opendir.
    Status listed;
    {
      DirHandle* handle = dir.get();
      MutexLock lock(&handle->mu);  // not shared yet: for the analysis
      listed = SeekDir(FsOf(req), handle, 0);
    }
    if (!listed.ok()) {
      ReplyStatus(req, listed);
      return;
    }
    fi->fh = reinterpret_cast<uint64_t>(dir.get());
    fi->keep_cache = 0;
    fi->cache_readdir = 0;
    // The kernel has the handle now: releasedir deletes it.
    if (fuse_reply_open(req, fi) == 0) static_cast<void>(dir.release());
  });
}

// Serves readdir (plus = false) and readdirplus from the handle's listing.
void ServeDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
              bool plus) {
  Filesystem& fs = FsOf(req);
  auto* dir = reinterpret_cast<DirHandle*>(fi->fh);
  // Every reply is sent after the handle's lock is released: once the kernel has its answer it
  // may send releasedir, which deletes the handle (and its mutex) on another thread.
  MutexLock lock(&dir->mu);
  if (off < 0) {
    lock.Unlock();
    ReplyError(req, EINVAL, "negative offset");
    return;
  }
  if (off == 0 && dir->served) {
    // rewinddir(): list again so that the directory's current names are seen.
    dir->cursor = DirCursor{};
    dir->base = 0;
    dir->entries.clear();
  }
  const uint64_t first = static_cast<uint64_t>(off);
  Status seek = SeekDir(fs, dir, first < 2 ? 0 : first - 2);
  if (!seek.ok()) {
    lock.Unlock();
    ReplyStatus(req, seek);
    return;
  }
  dir->served = true;
  // Each file's entry is made anew as it is sent (Filesystem::Refreshed).
  const std::optional<std::string> prefix = plus ? fs.ListingPrefix(ino) : std::nullopt;
  std::vector<char> buf(size);
  size_t used = 0;
  // This reply ends with the page held; the next readdir reads on from there.
  const uint64_t total = dir->base + dir->entries.size() + 2;
  for (uint64_t index = first; index < total; ++index) {
    const off_t next = static_cast<off_t>(index + 1);
    char* dest = buf.data() + used;
    size_t room = size - used;
    size_t needed = 0;
    if (index < 2) {
      const char* name = index == 0 ? "." : "..";
      struct stat st {};
      st.st_mode = S_IFDIR;
      st.st_ino = index == 0 ? ino : FUSE_ROOT_ID;
      if (plus) {
        fuse_entry_param param{};
        param.attr = st;  // ino 0: the kernel takes no reference on "." and ".."
        needed = fuse_add_direntry_plus(req, dest, room, name, &param, next);
      } else {
        needed = fuse_add_direntry(req, dest, room, name, &st, next);
      }
      if (needed > room) break;
    } else {
      const DirEntry& built = dir->entries[index - 2 - dir->base];
      if (plus) {
        // (A null buffer: only the size, which the name alone decides.)
        const fuse_entry_param sizing{};
        needed = fuse_add_direntry_plus(req, nullptr, 0, built.name.c_str(), &sizing, next);
        if (needed > room) break;
        const DirEntry entry = fs.EntryForKernel(prefix, built);  // the reference counted
        fuse_entry_param param{};
        if (entry.name_only) {
          param.attr.st_ino = entry.entry.attr.ino;
          param.attr.st_mode = entry.entry.attr.mode;
          // ino 0: the kernel takes neither attributes nor a reference, only the name
        } else {
          param = ToEntryParam(entry.entry);
        }
        needed = fuse_add_direntry_plus(req, dest, room, entry.name.c_str(), &param, next);
      } else {
        struct stat st {};
        st.st_ino = built.entry.attr.ino;
        st.st_mode = built.entry.attr.mode;
        needed = fuse_add_direntry(req, dest, room, built.name.c_str(), &st, next);
        if (needed > room) break;
      }
    }
    used += needed;
  }
  lock.Unlock();
  fuse_reply_buf(req, buf.data(), used);
}

void OpReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  Guarded(req, {"readdir", ino}, [&] { ServeDir(req, ino, size, off, fi, /*plus=*/false); });
}

void OpReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  Guarded(req, {"readdirplus", ino}, [&] { ServeDir(req, ino, size, off, fi, /*plus=*/true); });
}

void OpReleaseDir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  delete reinterpret_cast<DirHandle*>(fi->fh);
  fuse_reply_err(req, 0);
}

void OpFsyncDir(fuse_req_t req, fuse_ino_t /*ino*/, int /*datasync*/, fuse_file_info* /*fi*/) {
  // A directory has nothing unsaved: mkdir, rmdir and renames are done when they return.
  fuse_reply_err(req, 0);
}

void OpStatFs(fuse_req_t req, fuse_ino_t ino) {
  Guarded(req, {"statfs", ino}, [&] {
    Result<FsStats> result = FsOf(req).StatFs();
    if (!result.ok()) {
      ReplyStatus(req, result.status());
      return;
    }
    const FsStats& stats = *result;
    struct statvfs st {};
    st.f_bsize = stats.block_size;
    st.f_frsize = stats.fragment_size;
    st.f_blocks = stats.blocks;
    st.f_bfree = stats.blocks_free;
    st.f_bavail = stats.blocks_available;
    st.f_files = stats.files;
    st.f_ffree = stats.files_free;
    st.f_favail = stats.files_free;
    st.f_namemax = stats.name_max;
    fuse_reply_statfs(req, &st);
  });
}

void OpSetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags) {
  Guarded(req, {"setxattr", ino, nullptr, name}, [&] {
    int xattr_flags = 0;
    if (flags & XATTR_CREATE) xattr_flags |= kXattrCreate;
    if (flags & XATTR_REPLACE) xattr_flags |= kXattrReplace;
    ReplyStatus(req, FsOf(req).SetXattr(ino, name, std::string_view(value, size), xattr_flags));
  });
}

// The size protocol of getxattr/listxattr: size 0 asks for the length, a smaller buffer than
// the value is ERANGE.
void ReplyXattrValue(fuse_req_t req, const std::string& value, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (value.size() > size) {
    ReplyError(req, ERANGE, "the buffer is too small");
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

void OpGetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Guarded(req, {"getxattr", ino, nullptr, name}, [&] {
    Result<std::string> value = FsOf(req).GetXattr(ino, name);
    if (!value.ok()) {
      ReplyStatus(req, value.status());
      return;
    }
    // The mount's counters come with the failed replies counted here.
    if (ino == FUSE_ROOT_ID && std::string_view(name) == kStatsXattr) {
      *value += AdapterOf(req).reply_log().ToText();
      // Counters grow between getfattr's size probe and its read: the probe leaves room for
      // that (the read returns the value's own length), or the read would fail with ERANGE.
      if (size == 0) {
        fuse_reply_xattr(req, value->size() + kStatsRoom);
        return;
      }
    }
    ReplyXattrValue(req, *value, size);
  });
}

void OpListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Guarded(req, {"listxattr", ino}, [&] {
    Result<std::vector<std::string>> names = FsOf(req).ListXattr(ino);
    if (!names.ok()) {
      ReplyStatus(req, names.status());
      return;
    }
    std::string list;
    for (const std::string& name : *names) {
      list += name;
      list.push_back('\0');
    }
    ReplyXattrValue(req, list, size);
  });
}

void OpRemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Guarded(req, {"removexattr", ino, nullptr, name},
          [&] { ReplyStatus(req, FsOf(req).RemoveXattr(ino, name)); });
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  Guarded(req, {"create", parent, name}, [&] {
    Filesystem& fs = FsOf(req);
    Result<CreatedFile> created = fs.Create(parent, name, mode, fi->flags, CallerOf(req));
    if (!created.ok()) {
      ReplyStatus(req, created.status());
      return;
    }
    fi->fh = created->fh;
    fi->keep_cache = created->keep_cache ? 1 : 0;
    fi->direct_io = AdapterOf(req).options().direct_io ? 1 : 0;
    fuse_entry_param param = ToEntryParam(created->entry);
    if (fuse_reply_create(req, &param, fi) != 0) {
      // The creator is gone: the kernel holds neither the handle nor the reference.
      Status ignored = fs.Release(created->fh);
      (void)ignored;
      if (!created->keep_cache) AdapterOf(req).InvalidatePages(created->entry.attr.ino);
      fs.Forget(created->entry.attr.ino, 1);
    }
  });
}

void OpCopyFileRange(fuse_req_t req, fuse_ino_t /*ino_in*/, off_t off_in, fuse_file_info* fi_in,
                     fuse_ino_t ino_out, off_t off_out, fuse_file_info* fi_out, size_t len,
                     int flags) {
  Guarded(req, {"copy_file_range", ino_out}, [&] {
    if (off_in < 0 || off_out < 0) {
      ReplyError(req, EINVAL, "negative offset");
      return;
    }
    Result<uint64_t> copied =
        FsOf(req).CopyFileRange(fi_in->fh, static_cast<uint64_t>(off_in), fi_out->fh,
                                static_cast<uint64_t>(off_out), len, flags);
    if (!copied.ok()) {
      ReplyStatus(req, copied.status());
      return;
    }
    // The protocol's reply holds 32 bits; the kernel asks again for the rest.
    uint64_t reported = std::min<uint64_t>(*copied, std::numeric_limits<uint32_t>::max());
    fuse_reply_write(req, static_cast<size_t>(reported));
  });
}

void OpFallocate(fuse_req_t req, fuse_ino_t ino, int /*mode*/, off_t /*offset*/, off_t /*length*/,
                 fuse_file_info* /*fi*/) {
  Guarded(req, {"fallocate", ino}, [&] { ReplyError(req, EOPNOTSUPP, "not supported"); });
}

fuse_lowlevel_ops MakeOperations() {
  fuse_lowlevel_ops ops{};
  ops.init = OpInit;
  ops.destroy = OpDestroy;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetAttr;
  ops.setattr = OpSetAttr;
  ops.readlink = OpReadLink;
  ops.mknod = OpMknod;
  ops.mkdir = OpMkdir;
  ops.unlink = OpUnlink;
  ops.rmdir = OpRmdir;
  ops.symlink = OpSymlink;
  ops.rename = OpRename;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.write = OpWrite;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.fsync = OpFsync;
  ops.opendir = OpOpenDir;
  ops.readdir = OpReadDir;
  ops.readdirplus = OpReadDirPlus;
  ops.releasedir = OpReleaseDir;
  ops.fsyncdir = OpFsyncDir;
  ops.statfs = OpStatFs;
  ops.setxattr = OpSetXattr;
  ops.getxattr = OpGetXattr;
  ops.listxattr = OpListXattr;
  ops.removexattr = OpRemoveXattr;
  ops.create = OpCreate;
  ops.copy_file_range = OpCopyFileRange;
  ops.fallocate = OpFallocate;
  return ops;
}

const fuse_lowlevel_ops kOperations = MakeOperations();

}  // namespace

FuseAdapter::FuseAdapter(FuseAdapterOptions options)
    : options_(std::move(options)), reply_log_([log = options_.log](const std::string& message) {
        // A reply other than the ones files and names give in the normal course (ENOENT,
        // EEXIST...): a caller was refused, or saw EIO.
        LogTo(log, LogLevel::kError, message);
      }) {}

fuse_session* FuseAdapter::NewSession(fuse_args* args) {
  return fuse_session_new(args, &kOperations, sizeof(kOperations), this);
}

int FuseAdapter::Run(fuse_session* session) {
  fuse_loop_config* config = fuse_loop_cfg_create();
  if (config == nullptr) return -ENOMEM;
  fuse_loop_cfg_set_max_threads(config, static_cast<unsigned int>(options_.max_threads));
  fuse_loop_cfg_set_clone_fd(config, 0);
  {
    MutexLock lock(&mu_);
    Filesystem* fs = fs_;
    invalidator_ = std::make_shared<PageInvalidator>(
        [session, fs](uint64_t ino) {
          if (fs != nullptr && !fs->TakeQueuedPageDrop(ino)) return 0;
          return fuse_lowlevel_notify_inval_inode(session, static_cast<fuse_ino_t>(ino), 0, 0);
        },
        [session](uint64_t parent, const std::string& name) {
          return fuse_lowlevel_notify_inval_entry(session, static_cast<fuse_ino_t>(parent),
                                                  name.c_str(), name.size());
        });
  }
  if (fs_ != nullptr) {
    fs_->set_page_invalidator([this](uint64_t ino) { InvalidatePages(ino); });
    fs_->set_entry_invalidator(
        [this](uint64_t parent, const std::string& name) { InvalidateEntry(parent, name); });
  }
  int result = fuse_session_loop_mt(session, config);
  fuse_loop_cfg_destroy(config);
  if (fs_ != nullptr) {
    fs_->set_page_invalidator(nullptr);
    fs_->set_entry_invalidator(nullptr);
  }
  std::shared_ptr<PageInvalidator> invalidator;
  {
    MutexLock lock(&mu_);
    invalidator = std::move(invalidator_);
  }
  // Before the session goes. A notification the kernel holds up is given up after a few seconds
  // (PageInvalidator::Stop): the unmount must not wait for it. Its thread still uses the
  // session: SessionReleased says when that ends.
  if (!invalidator->Stop()) {
    MutexLock lock(&mu_);
    unfinished_ = std::move(invalidator);
  }
  return result;
}

bool FuseAdapter::SessionReleased(std::chrono::milliseconds timeout) {
  std::shared_ptr<PageInvalidator> unfinished;
  {
    MutexLock lock(&mu_);
    unfinished = unfinished_;
  }
  if (unfinished == nullptr) return true;
  if (!unfinished->Stop(timeout)) return false;
  MutexLock lock(&mu_);
  unfinished_.reset();
  return true;
}

void FuseAdapter::InvalidatePages(uint64_t ino) {
  std::shared_ptr<PageInvalidator> invalidator;
  {
    MutexLock lock(&mu_);
    invalidator = invalidator_;
  }
  if (invalidator != nullptr) invalidator->Post(ino);
}

void FuseAdapter::InvalidateEntry(uint64_t parent, const std::string& name) {
  std::shared_ptr<PageInvalidator> invalidator;
  {
    MutexLock lock(&mu_);
    invalidator = invalidator_;
  }
  if (invalidator != nullptr) invalidator->PostEntry(parent, name);
}

Status FuseAdapter::destroy_status() const {
  MutexLock lock(&mu_);
  return destroy_status_;
}

void FuseAdapter::FlushAllOnDestroy() {
  if (fs_ == nullptr) return;
  Status status = fs_->FlushAll();
  MutexLock lock(&mu_);
  if (!status.ok() && destroy_status_.ok()) destroy_status_ = status;
}

}  // namespace objfs
