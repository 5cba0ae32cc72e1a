// The POSIX logic of an objfs mount: names, inodes, attributes, reads, staged writes, renames,
// symbolic links and extended attributes over an ObjectStore, with no libfuse types.
//
// The FUSE adapter (fs/fuse_adapter) is a thin translation layer: it turns each low-level
// request into one call here and each non-ok Status into an errno with fs/errno_map. Keeping
// the logic here lets unit tests drive the whole filesystem over the in-memory store without a
// kernel.
//
// Layout in the store (s3fs-compatible, so buckets written by s3fs mount here and back):
// - a file "a/b" is the object "a/b"; its mode, uid, gid and mtime are the user metadata
//   "mode", "uid", "gid", "mtime" (fs/object_metadata.h); missing metadata means the defaults
//   of FilesystemOptions and the object's Last-Modified;
// - a directory "a" exists when the marker object "a/" exists or any key starts with "a/";
//   mkdir writes the marker, which carries the directory's metadata;
// - a symbolic link is an object whose content is the target and whose mode has S_IFLNK;
// - a FIFO, socket or device is a zero-byte object whose mode has its type, and a device's
//   number is the metadata "rdev" (on stores with capabilities().special_files);
// - user extended attributes live in the metadata "xattr" (fs/xattr.h).
//
// Threading: every method may be called concurrently from libfuse's multi-threaded loop.
// Lock order: fs/lock_order.h.
//
// Errors: every method returns a Status (or Result) whose code the adapter maps with
// ErrnoFromStatus() (fs/errno_map.h). Codes used beyond the obvious ones: kNameTooLong for a
// name over 255 bytes, kIsDirectory / kNotDirectory, kNotEmpty for rmdir, kAlreadyExists for
// O_EXCL and RENAME_NOREPLACE, kUnsupported for RENAME_EXCHANGE and non-"user." xattrs,
// NoXattrError() (ENODATA), ReservedXattrError() (EPERM) and UnsupportedXattrError()
// (EOPNOTSUPP) for extended attributes.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/log.h"
#include "backend/metrics.h"
#include "backend/mutex.h"
#include "backend/object_store.h"
#include "backend/status.h"
#include "cache/clock.h"
#include "cache/content_etag_store.h"
#include "cache/meta_cache.h"
#include "cache/prefetcher.h"
#include "cache/staging.h"
#include "fs/dir_listing.h"
#include "fs/file_attr.h"
#include "fs/file_writer.h"
#include "fs/inode_table.h"
#include "fs/key_resolver.h"
#include "fs/object_attrs.h"

namespace objfs {

// UINT_MAX rounded down to this kernel's page size.
inline uint64_t KernelMaxCopyCall() {
  const long page = ::sysconf(_SC_PAGESIZE);
  const uint64_t mask = page > 0 ? ~(static_cast<uint64_t>(page) - 1) : ~uint64_t{4095};
  return uint64_t{0xffffffff} & mask;
}

struct FilesystemOptions {
  uint32_t uid = 0;  // owner of objects without "uid" metadata, and of new objects
  uint32_t gid = 0;
  uint32_t umask = 0022;      // applied to file_mode and dir_mode
  uint32_t file_mode = 0644;  // permissions of files without "mode" metadata
  uint32_t dir_mode = 0755;   // permissions of directories without a marker or "mode"
  // The longest copy_file_range the kernel passes on in one call (UINT_MAX & PAGE_MASK: a FUSE
  // reply counts 32 bits; 0xfffff000 with 4 KiB pages, 0xffff0000 with 64 KiB). A call of this
  // length at offset 0 is the start of a whole copy (the kernel shortens every other to the
  // source's end), made on the server.
  uint64_t max_copy_call = KernelMaxCopyCall();
  double attr_timeout = 1.0;      // seconds; also the metadata cache's TTL
  double entry_timeout = 1.0;     // seconds
  double negative_timeout = 1.0;  // seconds a "no such name" answer is cached
  std::string cache_dir;          // where staging files live (created if missing); required
  // Staging leaves this many bytes free on cache_dir's file system beyond the blocks it keeps
  // for root (cache/disk_reserve.h); a write that would take them fails with ENOSPC.
  uint64_t cache_reserve = 0;
  PrefetchOptions prefetch;  // read_buffer and max_readahead of every open file
  int io_threads = 8;        // threads of the backend I/O pool used by prefetching
  // ReadDir fetches the metadata of the files of a listing page in parallel while the
  // directory's listing has not passed this many such files (0: never); the later ones are left
  // to lookups.
  size_t readdir_heads = 10000;
  // Keys per page of a directory listing (S3 returns at most 1000). ReadDirPage holds one page.
  int list_page_keys = 1000;
  // ReadDir gives listed files the listing's size and date and the mount's default mode and
  // owner, to be cached by the kernel like exact ones, and HEADs none of them: a lookup after
  // the attribute timeout reads their headers (goofys's and mountpoint-s3's trade-off, for
  // buckets that s3fs and objfs did not write).
  bool listing_attrs = false;
  size_t prefetch_memory = 256u << 20;  // bytes of prefetched data across all open files
  size_t max_rename_objects = 10000;    // a directory rename moving more objects is refused
  bool read_only = false;               // every modifying call fails with PermissionDenied
  // Write-back window, in seconds. 0 (the default): a closed file is uploaded by close(2), which
  // reports a failed upload. Above 0: close(2) only records the staged file (it survives a crash
  // of the daemon: the next mount uploads it), and the upload happens this long after the close
  // that left it unsaved (later closes do not postpone it; a file open again then is uploaded
  // after its last close), so that what programs like rsync do next (utimens, chmod, rename of a
  // temporary file) changes only the pending upload: one PUT per file instead of a PUT, self-copies
  // and a copy plus delete. fsync(2), reading user.etag, and unmount upload at once; a failed
  // upload is logged and retried, and its data stays staged.
  double writeback = 0;
  // Seconds a metadata change (chmod, chown, utimens, setxattr) of a closed file may wait
  // before it reaches an object store that applies it with a self-copy. The mount shows it at
  // once; a crash record in cache_dir applies it at the next mount should the daemon die first;
  // a rename within the delay carries it in its copy, and an upload in its PUT, so that rsync's
  // utimens + chmod + rename of each file is one copy instead of three. fsync(2), reading
  // user.etag, a directory rename, opening an object with a multipart ETag (the self-copy may
  // change that ETag) and unmount apply it at once. Like a local file system's, the
  // change is durable once fsync returns. 0 (the default here): each change is its own
  // self-copy before the call returns. Stores that change attributes in place (SFTP) never wait.
  double metadata_delay = 0;
  // The most user metadata (fs/object_metadata.h MetadataSize: names and values, mode, owner,
  // mtime and user extended attributes together) a change may give an object; 0: no limit.
  // A setxattr whose attribute alone would not fit fails with E2BIG, one that fits alone but
  // not with the object's other attributes with ENOSPC, as does a chmod, chown or touch that
  // would take the metadata over the limit. Changes that do not grow it are never refused.
  // S3 mounts: AWS's 2048 unless -o max_metadata says otherwise.
  size_t max_metadata = 0;
  // Where problems found in the background (a failed write-back upload) are reported, one line
  // each; null: stderr.
  LogFunction log;
  // Called once a file the background uploaded is on the server, a sign that the server answers
  // again: clears the uploads whose abort failed while it did not (the mount's UploadRecords
  // ClearAbandoned), so that they do not wait for the unmount. Null: nothing.
  std::function<void()> clear_abandoned_uploads;
  // Runs the thread that uploads files whose write-back window has passed (and the files
  // RecoverStaged takes over, window or not). Tests that drive UploadDue() themselves turn it
  // off.
  bool writeback_thread = true;
  // For a store without native ETags (SFTP): where "user.etag" comes from, computed on first
  // request and recorded. Usually the ContentEtagStore in the store's stack; not owned, must
  // outlive the Filesystem. Left null, Create uses the store itself when it is a
  // ContentEtagStore; otherwise such a store's files show user.etag only when an upload or copy
  // of this mount gave their content MD5. Unused for stores with native ETags.
  ContentEtagStore* content_etags = nullptr;
  // The kernel caches the pages of files read through the mount (false with direct_io): an
  // open keeps them while the object's version (ETag; size and mtime on SFTP) is the one they
  // were read at, and lookup and getattr drop them (set_page_invalidator) when it changed.
  bool kernel_page_cache = true;
};

// One name of a directory listing, with the attributes readdirplus returns.
struct DirEntry {
  std::string name;
  Entry entry;
  // The attributes are the file's from before server work on it that was under way when the
  // listing was made (Inode::server_work): readdirplus, which may send them after the work
  // ended, gives the kernel the name only, and it looks the file up when it wants them.
  bool name_only = false;
};

// What statfs reports.
// The read buffer the filesystem uses over a store that splits reads into requests of `unit`
// bytes (Capabilities::read_unit; 0: no such unit): `read_buffer` rounded down to a whole
// multiple of the unit when it is larger, so no read ends in a short request.
size_t EffectiveReadBuffer(size_t read_buffer, uint64_t unit);

struct FsStats {
  uint64_t block_size = 4096;
  uint64_t fragment_size = 4096;
  uint64_t blocks = 0;
  uint64_t blocks_free = 0;
  uint64_t blocks_available = 0;
  uint64_t files = 0;
  uint64_t files_free = 0;
  uint32_t name_max = 255;
};

// Which fields of SetAttr's `attr` to apply (the FUSE_SET_ATTR_* bits, renamed).
enum SetAttrMask : uint32_t {
  kSetMode = 1 << 0,
  kSetUid = 1 << 1,
  kSetGid = 1 << 2,
  kSetSize = 1 << 3,
  kSetAtime = 1 << 4,
  kSetMtime = 1 << 5,
  kSetAtimeNow = 1 << 7,
  kSetMtimeNow = 1 << 8,
  kSetCtime = 1 << 10,
};

// Flags of Rename (the renameat2 values).
inline constexpr uint32_t kRenameNoReplace = 1;
inline constexpr uint32_t kRenameExchange = 2;

// Flags of SetXattr (the setxattr values).
inline constexpr int kXattrCreate = 1;
inline constexpr int kXattrReplace = 2;

// Who asks for a new file, directory or link (the FUSE request's uid and gid).
struct Owner {
  uint32_t uid = 0;
  uint32_t gid = 0;
  // Whether the caller is in group `gid` by a supplementary group, for a permission check as
  // the kernel's (FUSE reads them from /proc, so they are asked for only where a check needs
  // them). Called only while the request is answered. Unset: no supplementary group.
  std::function<bool(uint32_t gid)> in_group = nullptr;
};

struct CreatedFile {
  Entry entry;
  uint64_t fh = 0;
  bool keep_cache = false;  // as Open's, for an existing file opened by O_CREAT
};

class IoPool;
class ReadBudget;

class Filesystem {
 public:
  // `metrics` must outlive the Filesystem (it is what "user.objfs.stats" reports); `clock`
  // drives the metadata cache (nullptr: the steady clock). Fails when cache_dir cannot be
  // created.
  static Result<std::unique_ptr<Filesystem>> Create(std::shared_ptr<ObjectStore> store,
                                                    FilesystemOptions options, Metrics* metrics,
                                                    std::shared_ptr<Clock> clock = nullptr);
  ~Filesystem();  // releases handles without uploading: call FlushAll() first
  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  // ---- Names and attributes ----

  // Resolves `name` in directory `parent`. On success the inode's lookup count grows by one
  // (the kernel will Forget it). The answer comes from the metadata cache when fresh; a name
  // known only from a listing costs one HEAD, so that mode, owner and mtime are exact. A miss
  // is cached for negative_timeout. NotFound, NameTooLong (> 255 bytes).
  Result<Entry> Lookup(uint64_t parent, std::string_view name);

  // Drops `nlookup` references the kernel held on `ino`. The inode number stays valid while it
  // has references, open handles or unsaved data.
  void Forget(uint64_t ino, uint64_t nlookup);

  // The attributes of `ino` (attr_timeout in the reply). NotFound once the object is gone.
  Result<Entry> GetAttr(uint64_t ino);

  // chmod, chown, utimens and truncate. `to_set` is a SetAttrMask. On a file with unsaved
  // data, mode/owner/times only change the metadata of the pending upload; otherwise they are
  // one server-side self-copy that replaces the metadata (never a re-upload), made at once or,
  // with options.metadata_delay, within that delay. A size change is
  // staged and uploaded at Flush/Release; without any open handle it is uploaded at once.
  // `fh` is the handle of ftruncate/futimens, when the kernel gives one.
  Result<Entry> SetAttr(uint64_t ino, uint32_t to_set, const FileAttr& attr,
                        std::optional<uint64_t> fh);

  // ---- Directories ----

  // Every name in directory `ino` (without "." and ".."), from all pages of a delimited
  // listing (ReadDirPage until done). A listing lacks the metadata objfs keeps in object
  // headers, so the files without exact attributes in the metadata cache (or in the listing:
  // cache/listing_attr_store.h) are HEADed in parallel on the I/O pool, page by page, until
  // options.readdir_heads of them were; entries still without exact attributes (HEAD
  // failed, or too many) carry the listing's (size, Last-Modified as mtime, default mode and
  // owner) with timeouts of 0 so that the kernel asks Lookup/GetAttr before using them. Inode
  // numbers are assigned but not referenced (EntryForKernel). Names that cannot be file names
  // (empty, ".", "..", from keys like "a//b") are skipped.
  Result<std::vector<DirEntry>> ReadDir(uint64_t ino);

  // ReadDir one listing page at a time, for directories of any size: the next names of
  // directory `ino` after `cursor` (a fresh cursor starts the listing), with their attributes as
  // ReadDir gives them. Only this page's entries are held; the files it HEADs count against
  // options.readdir_heads for the whole listing. May return no entries before the end (a page of
  // skipped names); cursor->done is set with the last page.
  Result<std::vector<DirEntry>> ReadDirPage(uint64_t ino, DirCursor* cursor);
  // Readdirplus sends a page of a listing when the kernel asks, which may be long after it was
  // built (at opendir): a file that this mount wrote, uploaded, copied or changed since has its
  // entry made anew from what the mount knows now (its local state, the server work under way
  // on it, the record its upload left), so that the kernel never takes an older size for
  // attr_timeout (a listing opened before a write and read after it: the file's reads gave 0
  // bytes). Another client's change is only seen by a new listing, as before. Never waits: a
  // file whose lock is held (a write fetching its blocks) goes as its name only, as does one
  // whose name no longer leads to it. `prefix`: ListingPrefix of the directory.
  DirEntry Refreshed(const std::string& prefix, const DirEntry& entry);
  // The prefix of the keys of directory `dir`'s files ("" for the root), or nullopt when `dir`
  // is unknown.
  std::optional<std::string> ListingPrefix(uint64_t dir);
  // The entry of a built page's `built` that a readdirplus reply hands to the kernel now:
  // Refreshed when `prefix` is given, and, unless it goes as its name only, with the lookup
  // reference the kernel takes on it counted: the caller asks only for an entry its reply has
  // room for. An inode number forgotten since the page was built (the
  // kernel's forget of an earlier reference) goes as the name only: the kernel would hold a
  // number this mount no longer knows, and every call on the name would fail until it forgot it.
  DirEntry EntryForKernel(const std::optional<std::string>& prefix, const DirEntry& built);

  // Writes the marker "name/" with the directory's metadata. AlreadyExists if the name exists.
  // `owner`: who creates it (on a store that keeps owners); nullopt or a store that does not:
  // options.uid/gid.
  Result<Entry> MkDir(uint64_t parent, std::string_view name, uint32_t mode,
                      const std::optional<Owner>& owner = std::nullopt);

  // Removes an empty directory's marker. NotEmpty when any other key is under it,
  // NotDirectory when the name is a file.
  Status RmDir(uint64_t parent, std::string_view name);

  // Removes a file or symbolic link. IsDirectory for a directory. Data of open handles of the
  // removed file is discarded when they are released.
  Status Unlink(uint64_t parent, std::string_view name);

  // rename / renameat2. A file is a server-side copy then a delete (unsaved data is uploaded
  // first); a directory copies every object under it and then deletes the old ones, and is
  // refused with InvalidArgument when it holds more than max_rename_objects objects. Open
  // handles and known inodes follow the rename. `flags`: kRenameNoReplace (AlreadyExists if the
  // target exists); kRenameExchange is Unsupported.
  Status Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                std::string_view new_name, uint32_t flags);

  // mknod of a FIFO, socket or character or block device (`mode` has its type; `rdev` is the
  // device's number): a zero-byte object whose "mode" metadata has the type and whose "rdev"
  // has a device's number, as s3fs stores them. The kernel serves opens of such files itself,
  // locally. NotPermitted (EPERM) on a store without capabilities().special_files, and for any
  // other type; AlreadyExists if the name exists. Owned by `owner` as MkDir's is.
  Result<Entry> MkNod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
                      const std::optional<Owner>& owner = std::nullopt);

  // ---- Symbolic links ----

  // Creates `name` in `parent` pointing to `target` (an object holding the target, mode
  // S_IFLNK|0777).
  Result<Entry> Symlink(std::string_view target, uint64_t parent, std::string_view name,
                        const std::optional<Owner>& owner = std::nullopt);
  Result<std::string> ReadLink(uint64_t ino);

  // ---- Files ----

  // Opens `ino` with open(2) `flags` and returns a handle. Reads go through a Prefetcher over
  // the object as it was at open (its ETag guards against replacement: PreconditionFailed). With
  // O_TRUNC on a writable open the file becomes empty and unsaved. IsDirectory for a directory.
  // `keep_cache` (with options.kernel_page_cache) says whether the kernel's cached pages of the
  // file may stay: they hold the version the object has now, or the data staged here.
  Result<uint64_t> Open(uint64_t ino, int flags, bool* keep_cache = nullptr);

  // Creates and opens `name` in `parent` (open with O_CREAT). The new file is empty and
  // unsaved: its object appears at Flush/Release (so `touch` creates it). AlreadyExists with
  // O_EXCL when the name exists; otherwise an existing file is opened with `flags`. The
  // entry's lookup count grows by one.
  // A new file is owned by `owner` as MkDir's is.
  Result<CreatedFile> Create(uint64_t parent, std::string_view name, uint32_t mode, int flags,
                             const std::optional<Owner>& owner = std::nullopt);

  // Reads up to buf.size() bytes at `offset`; fewer only at the end of the file. Unsaved data
  // is read from its staging file.
  Result<size_t> Read(uint64_t fh, uint64_t offset, std::span<std::byte> buf);

  // Read without a copy into a caller's buffer: the pieces holding the bytes, straight from the
  // read-ahead buffers (or one buffer read from the staging file). For FUSE replies.
  Result<size_t> ReadSegments(uint64_t fh, uint64_t offset, size_t size,
                              std::vector<ReadSegment>* out);

  // Writes `data` at `offset` into the inode's staging file (fetching the object's content
  // into it first, in read_buffer-sized reads, unless the file is empty). Returns data.size().
  // A write that fails after the file has unsaved data leaves it unfinished until later writes
  // cover those bytes or one through `fh` succeeds (FileWriter::WriteFailed; `note_failure`
  // false: the caller reports a short count instead, so nothing is missed).
  Result<size_t> Write(uint64_t fh, uint64_t offset, std::span<const std::byte> data,
                       bool note_failure = true);

  // Uploads the inode's unsaved data and metadata, if any, with one put. On failure the data
  // stays staged and unsaved, and a later Flush/Fsync/Release/FlushAll retries the upload.
  // With a write-back window, Flush schedules the upload instead; Fsync always uploads.
  // An unfinished file (a write failed) is never uploaded: fsync and every writer's close fail
  // with that write's error, and the release of its last writer sets its data aside
  // (FileWriter::SetAsideUnfinished).
  Status Flush(uint64_t fh);
  Status Fsync(uint64_t fh, bool datasync);

  // Uploads unsaved data like Flush, then closes the handle. The handle is closed even when the
  // upload fails (the data stays staged for FlushAll or a later Flush of the same inode).
  // With a write-back window the upload is scheduled instead (see options.writeback).
  Status Release(uint64_t fh);

  // copy_file_range(2). When the whole source is copied onto an empty destination from offset
  // 0 (what cp does), this is one server-side copy of the source object: no byte passes through
  // this machine, the destination's ETag is the server's, and the kernel's follow-up calls for
  // the rest of the range are answered without a backend call. Anything else is copied here in
  // read_buffer-sized pieces. Returns the number of bytes copied.
  Result<uint64_t> CopyFileRange(uint64_t fh_in, uint64_t off_in, uint64_t fh_out, uint64_t off_out,
                                 uint64_t len, int flags);

  // ---- Extended attributes ----

  // "user.etag": the ETag of the stored object (NoXattrError if it was never uploaded); on a
  // store without native ETags, the MD5 of its content from options().content_etags (hashed in
  // bulk reads on first request, then recorded), never the store's opaque version;
  // "user.objfs.etag_kind": plain-md5 / multipart / opaque; "user.objfs.stats" on the root:
  // the mount's counters; other "user." names: values set with SetXattr. Other namespaces
  // (security., system., trusted.) have no attributes: NoXattrError, without a backend call.
  Result<std::string> GetXattr(uint64_t ino, std::string_view name);

  // Stores a "user." attribute in the object's metadata (a self-copy; staged for a file with
  // unsaved data). `flags`: kXattrCreate (AlreadyExists if set), kXattrReplace (NoXattrError if
  // unset). ReservedXattrError for "user.etag" and "user.objfs.*"; Unsupported for other
  // namespaces.
  Status SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags);

  // The attribute names of `ino`: user.etag when the object exists (for every file of a store
  // without native ETags when content_etags is set: its value is computed at GetXattr), user
  // attributes, and user.objfs.stats on the root.
  Result<std::vector<std::string>> ListXattr(uint64_t ino);

  Status RemoveXattr(uint64_t ino, std::string_view name);

  // ---- The mount as a whole ----

  // The capacity of the store's file system where it has one (SFTP's statvfs@openssh.com);
  // else constant, very large numbers (object stores have no capacity to report): 2^50 free
  // blocks of 4096 bytes, 2^32 free inodes, names of up to 255 bytes.
  Result<FsStats> StatFs() const;

  // Uploads the unsaved data of every inode (at unmount or SIGTERM). Returns the first error;
  // inodes that failed keep their staged data.
  Status FlushAll() { return writer_->FlushAll(); }

  // The key of inode `ino` ("" for the root): the path a log line names.
  Result<std::string> PathOf(uint64_t ino) { return KeyOf(ino); }

  // Uploads the files whose write-back window has passed (clock() time), in parallel; the
  // write-back thread calls it. Returns the first failure (such files stay staged and are
  // retried later). A no-op without a write-back window.
  Status UploadDue() { return writer_->UploadDue(); }

  // Files closed and waiting for their write-back upload.
  size_t pending_uploads() { return writer_->pending_uploads(); }

  // Takes over what a process that did not exit cleanly left in cache_dir. Each file a close,
  // fsync or write-back window had accepted becomes a closed file whose upload is pending: it
  // is served from its staging file at once (lookups, listings, reads) and uploaded in the
  // background on the write-back thread, with or without a write-back window (a failed upload
  // is retried, unmount uploads what is left; the log says when all are in the store). Data no
  // close vouched for is set aside, unrecorded copies are removed, and the held metadata
  // changes (metadata_delay) are applied to the objects they were made to before this returns.
  // Call once after Create, before serving requests; each mount needs a cache_dir of its own.
  // Returns the first failure (its records stay for the next try).
  Status RecoverStaged() { return writer_->RecoverStaged(); }

  // Files taken over by RecoverStaged whose upload has not finished yet.
  size_t recovering_files() { return writer_->recovering_files(); }

  // Names skipped by ReadDir because they cannot be file names (see ReadDir).
  uint64_t skipped_names() const { return skipped_names_.load(); }

  const FilesystemOptions& options() const { return options_; }

  // Where lookup, getattr and rename send an inode whose cached pages in the kernel no longer
  // hold the file (a new version on the server, a file replaced by a rename); it must not block
  // on the kernel (fs/page_invalidator.h). Set before requests are served, cleared after.
  void set_page_invalidator(std::function<void(uint64_t ino)> invalidate)
      EXCLUDES(invalidators_mu_) {
    MutexLock lock(&invalidators_mu_);
    invalidate_pages_ = std::move(invalidate);
  }
  // Where a name the kernel may still have cached goes when its file is gone without an unlink
  // (a new file set aside because its writer did not finish): the kernel would otherwise
  // answer an open(O_CREAT) of that name with the gone file, ENOENT, until entry_timeout.
  // Likewise set before requests are served, cleared after; must not block on the kernel.
  void set_entry_invalidator(std::function<void(uint64_t parent, const std::string& name)> f)
      EXCLUDES(invalidators_mu_) {
    MutexLock lock(&invalidators_mu_);
    invalidate_entry_ = std::move(f);
  }
  // Asked by the page invalidator just before it sends a queued drop of `ino`'s pages: false
  // when an open has dropped them since (and its reads may have filled them with the new
  // version, which must stay). Clears the queued mark.
  bool TakeQueuedPageDrop(uint64_t ino);

 private:
  // An open file.
  struct Handle {
    Handle(uint64_t ino, int flags, std::shared_ptr<Inode> inode, std::string read_key)
        : ino(ino), flags(flags), inode(std::move(inode)), read_key(std::move(read_key)) {}
    uint64_t ino = 0;
    int flags = 0;
    std::shared_ptr<Inode> inode;
    Mutex mu;                             // lock 2 of fs/lock_order.h
    std::string read_key GUARDED_BY(mu);  // the key `prefetcher` reads
    ObjectInfo read_info GUARDED_BY(mu);  // the object as seen at open (or after a rename)
    // inode->retag_serial when read_info was learnt: the retags it follows come after.
    uint64_t retags_seen GUARDED_BY(mu) = 0;
    std::shared_ptr<Prefetcher> prefetcher GUARDED_BY(mu);
    // Set when CopyFileRange made this handle's file a server-side copy of another.
    uint64_t copied_from_fh GUARDED_BY(mu) = 0;
    uint64_t copied_size GUARDED_BY(mu) = 0;
    uint64_t copied_reported GUARDED_BY(mu) = 0;
    // The copy's version: the follow-up calls are answered from the bookkeeping above only
    // while the file is still that version, neither written nor truncated since.
    ETag copied_etag GUARDED_BY(mu);
    // TrimUnaskedCopy began cutting the copy back (and, having failed, tries again).
    bool trim_started GUARDED_BY(mu) = false;
  };

  Filesystem(std::shared_ptr<ObjectStore> store, FilesystemOptions options, Metrics* metrics,
             std::shared_ptr<Clock> clock);

  // filesystem.cc: resolution and attributes.
  // The key of `name` in directory `parent`: NameTooLong for a name over 255 bytes, or whose
  // key is longer than the store takes (max_key_bytes; a directory's, `for_directory`, with
  // its marker's "/"), so that creating it fails at once and looking it up costs no request.
  Result<std::string> ChildKey(uint64_t parent, std::string_view name, bool for_directory = false);
  // ChildKey for a name to be made (create, mkdir, mknod, symlink, a rename's new name): also
  // InvalidArgument (EINVAL) for a name the store cannot keep (not UTF-8 where it wants that),
  // rather than a file that can never be uploaded.
  Result<std::string> NewChildKey(uint64_t parent, std::string_view name,
                                  bool for_directory = false);
  Result<std::string> KeyOf(uint64_t ino);
  // The metadata of `key` (file, symlink or directory), from the cache when fresh and complete
  // (fs/key_resolver.h).
  Result<MetaRecord> Resolve(const std::string& key) { return resolver_.Resolve(key); }
  MetaRecord RootRecord() const { return resolver_.Root(); }
  // A directory that exists only as a prefix of other keys.
  MetaRecord ImplicitDirRecord(int64_t mtime_ns) const { return attrs_.ImplicitDir(mtime_ns); }
  static FileAttr AttrFromRecord(uint64_t ino, const MetaRecord& rec) {
    return ObjectAttrs::ToAttr(ino, rec);
  }
  Entry MakeEntry(const FileAttr& attr, bool exact) const;
  // The kernel's pages of `ino` came from another version than `rec` (a file) says the object
  // has now: has them dropped (invalidate_pages_), so that a file replaced on the server is not
  // read from the cache beyond attr_timeout.
  void CheckPageVersion(uint64_t ino, const MetaRecord& rec);
  // Has the kernel drop its cached pages of `ino`, counted.
  void InvalidatePages(uint64_t ino) EXCLUDES(invalidators_mu_);
  // A read of `ino` found the version it asked for gone from the server (ESTALE): the cached
  // attributes, this mount's and the kernel's (with the pages), are dropped, so that the next
  // open and stat learn the version there now rather than fail the same way until attr_timeout.
  void ForgetStaleVersion(uint64_t ino);
  // A read through a handle of `version` refills the kernel's pages with it: when that is not
  // the version they are said to hold, the next open must drop them.
  static void NoteReadVersion(Inode& inode, const ETag& version) REQUIRES(inode.mu);
  // A handle opened before this mount's own metadata change gave its version's bytes a new
  // ETag reads on at that one (Inode::retagged). Returns the version it reads now.
  static ETag FollowRetagLocked(Inode& inode, Handle& handle) REQUIRES(inode.mu);
  // The same, for a read at `version` that the store refused as stale (kPreconditionFailed):
  // true when the handle reads another version now (moved by this call or another read's),
  // and the read may be made again.
  static bool FollowRetag(Handle& handle, const ETag& version);
  // What server work on inode `ino` that is under way left for stat and listings
  // (Inode::server_work), or nullopt when none is.
  static std::optional<Inode::ServerWork> ServerWorkOf(Inode& inode, uint64_t ino);
  // Attributes of an inode with local (staged) state, or nullopt. Never waits for server work
  // on it (ServerWorkOf).
  std::optional<FileAttr> LocalAttr(Inode& inode, uint64_t ino);
  // The same, for a caller holding inode.mu.
  static std::optional<FileAttr> LocalAttrLocked(const Inode& inode, uint64_t ino)
      REQUIRES(inode.mu);
  MetaRecord RecordFromInfo(const ObjectInfo& info, bool is_dir) const {
    return attrs_.FromInfo(info, is_dir);
  }
  Status CheckWritable() const;
  // EFBIG (FileTooLargeError) when `size` bytes exceed what the store can keep in one object:
  // refused at the write that goes past it, not at the upload after the last byte.
  Status CheckObjectSize(const std::string& key, uint64_t size) const;
  // `key` is bound to an inode with staged data (e.g. created and not uploaded yet).
  bool HasLocalFile(const std::string& key);
  std::shared_ptr<Handle> FindHandle(uint64_t fh);
  // The open handles of inode `ino`.
  std::vector<std::shared_ptr<Handle>> HandlesOf(uint64_t ino);
  // At close of a handle whose file is still a server-side copy of which fewer bytes were
  // asked for than the copy holds (a copy_file_range cut at max_copy_call from a larger source,
  // and not followed up to its end): truncates the file to what was asked, keeping its mtime.
  // Checked and cut under one hold of the inode's lock, so that no follow-up call or write
  // slips in between.
  Status TrimUnaskedCopy(Handle& handle);
  // Truncates `inode`'s file (named `key`) to `size`: staged first where it is not (from the
  // stored object), then marked for upload. `new_mtime`: the mtime (and ctime) become now.
  Status TruncateLocked(Inode& inode, const std::string& key, uint64_t size, bool new_mtime)
      REQUIRES(inode.mu);
  // Write's work under the inode's lock; `*offset` becomes where the data went (O_APPEND).
  Result<size_t> WriteLocked(const Handle& handle, Inode& inode, uint64_t* offset,
                             std::span<const std::byte> data) REQUIRES(inode.mu);
  // The release of the last writer of an unfinished file (FileWriter::Unfinished): sets its
  // data aside and has the kernel drop the pages it wrote. Returns the write's error.
  Status CloseUnfinished(uint64_t ino, Inode& inode) REQUIRES(inode.mu);
  // Has the kernel forget its entry of `key` (when its parent is known), or of `name` in
  // directory `parent`, so that it looks the name up again.
  void InvalidateEntryOf(const std::string& key) EXCLUDES(invalidators_mu_);
  void InvalidateEntry(uint64_t parent, const std::string& name) EXCLUDES(invalidators_mu_);
  int64_t NowNs() const;

  // filesystem_io.cc
  // What close(2) or fsync(2) (`call`) returns for the failure `failed` of an upload or a held
  // metadata change: EIO whatever the server said (ENOSPC for a full disk or quota), since
  // errno cannot carry the reason; the reason goes to the log. `kept`: the data stays for a
  // retry; otherwise it is unfinished (FileWriter::LoseBase), set aside at the last release.
  Status ReportedAtClose(std::string_view call, uint64_t ino, Status failed, bool kept = true);
  void Log(LogLevel level, const std::string& message) const;
  // Rename of a file whose data is pending upload: the staged file takes the new name.
  // nullopt when the file is not (or no longer) pending: the caller renames it in the store.
  std::optional<Status> RenameLocalFile(const std::string& from, const std::string& to,
                                        const std::shared_ptr<Inode>& inode, uint32_t flags);
  Result<size_t> ReadFromStore(Handle& handle, uint64_t offset, std::span<std::byte> buf);
  // The part [offset, offset+size) of the staged file of `inode` (`ino`) that a read returns
  // holds the file's bytes (a sparse file fetches it).
  Status FetchStagedRange(uint64_t ino, Inode& inode, uint64_t offset, size_t size)
      REQUIRES(inode.mu);
  // A read of the staged file of `inode`: fetched first (FetchStagedRange), or, where cache_dir
  // has no room for the bytes it lacks, with them read from the server (a read never fails for
  // a full cache disk).
  Result<size_t> ReadStaged(uint64_t ino, Inode& inode, uint64_t offset, std::span<std::byte> buf)
      REQUIRES(inode.mu);
  // The handle's prefetcher, made (or remade after a rename) for its current key.
  Result<std::shared_ptr<Prefetcher>> PrefetcherOf(Handle& handle);

  // filesystem_attr.cc: metadata changes.
  // Applies `change` to the metadata of `ino` (pending metadata of unsaved data, or a
  // self-copy / marker write) and returns the new record.
  // `change` edits the attributes and the metadata other than mode/uid/gid/mtime; it may
  // refuse with a non-ok Status. So does a change taking the metadata over max_metadata.
  Result<FileAttr> MutateMetadata(uint64_t ino,
                                  const std::function<Status(FileAttr&, Metadata&)>& change);
  // The user metadata other than mode/uid/gid/mtime of `ino` as it would be uploaded now.
  Result<Metadata> ExtraMetadata(uint64_t ino);
  // Counts a handle of `inode` opened with `flags` as open (and writing), under inode.mu in the
  // same critical section that prepared it: a reader's release in between must not take a
  // writer's O_TRUNC for finished data. REQUIRES: inode.mu held.
  static void CountOpenLocked(Inode& inode, int flags) REQUIRES(inode.mu);
  // Registers a handle counted with CountOpenLocked; returns its number.
  uint64_t AddHandle(std::shared_ptr<Handle> handle);

  // filesystem_dirs.cc: Unlink of `key`, bound to `ino` (0: none) whose state `inode` (null:
  // none) the caller has locked.
  // (`inode` may be null: its lock, held when it is not, is one the analysis cannot follow.)
  Status UnlinkLocked(const std::string& key, uint64_t ino, Inode* inode) NO_THREAD_SAFETY_ANALYSIS;

  // filesystem_rename.cc
  // Holds the source's lock, when it has an inode, across the copy (OptionalInodeLock: outside
  // the analysis).
  // Before a rename removes the stored object of `inode`'s unsaved file: learns that object's
  // encryption (a HEAD) where the store keeps encryption and it is unknown (a record from a
  // listing), so that the upload under the new name keeps it. NotFound: none to keep.
  Status LearnStoredEncryption(Inode& inode, const std::string& key) REQUIRES(inode.mu);
  // filesystem_dirs.cc: removes `key` from the store for the unsaved file `inode`, by `op` (rm,
  // mv). An edit not uploaded yet removes only the version it was made to, as its upload would
  // have replaced only that one (FileWriter::KeptBase): another client's version stored since
  // stays, as though it came after the removal.
  Status RemoveEdited(Inode& inode, const std::string& key, std::string_view op) REQUIRES(inode.mu);
  Status RenameFile(const std::string& from, const std::string& to,
                    const MetaRecord& src) NO_THREAD_SAFETY_ANALYSIS;
  Status RenameDirectory(const std::string& from, const std::string& to, const MetaRecord& src);

  // The ETag "user.etag" shows for the object `key` described by `rec` (a file): the store's
  // ETag, or on a store without native ETags its content MD5. Empty when there is none to show.
  Result<ETag> UserETag(const std::string& key, const MetaRecord& rec);

  std::shared_ptr<ObjectStore> store_;
  bool native_etags_;            // the store's capabilities().native_etags
  bool native_rename_;           // the store's capabilities().native_rename
  bool stores_owner_;            // the store's capabilities().stores_owner
  uint64_t max_object_size_;     // the store's capabilities().max_object_size (0: no limit)
  uint64_t max_key_bytes_;       // the store's capabilities().max_key_bytes (0: no limit)
  bool utf8_keys_;               // the store's capabilities().utf8_keys
  std::string reserved_prefix_;  // the store's capabilities().reserved_prefix
  bool user_xattrs_;             // the store's capabilities().user_xattrs
  bool special_files_;           // the store's capabilities().special_files
  bool keeps_encryption_;        // the store's capabilities().keeps_encryption
  // The store's set_attributes() is no copy (!capabilities().attributes_by_copy), or it has
  // native_rename (either: no self-copies to save).
  bool attributes_in_place_;
  // The owner of a new object in directory `parent` asked for by `caller`. In a set-group-ID
  // directory (as its fresh cached record has it; no request) it takes the directory's group,
  // and `*setgid` (a new directory's) is set: it takes the bit too, as on a local disk (a
  // group's shared directory stays the group's).
  Owner NewOwner(uint64_t parent, const std::optional<Owner>& caller, bool* setgid = nullptr);
  // After an entry of the directory holding `key` came or went, on a store whose directories
  // have attributes of their own (capabilities().directory_attributes: the server moved that
  // directory's mtime): drops the directory's cached record, so that the next stat reads it.
  // The kernel drops its own copy on these operations.
  void ParentChanged(const std::string& key);
  FilesystemOptions options_;
  ObjectAttrs attrs_;  // the records and attributes of objects, with options_'s defaults
  Metrics* metrics_;
  std::shared_ptr<Clock> clock_;
  MetaCache meta_cache_;
  InodeTable inodes_;
  std::unique_ptr<StagingArea> staging_;
  std::unique_ptr<IoPool> io_pool_;
  std::unique_ptr<ReadBudget> read_budget_;

  Mutex handles_mu_;  // lock 3 of fs/lock_order.h
  std::unordered_map<uint64_t, std::shared_ptr<Handle>> handles_ GUARDED_BY(handles_mu_);
  uint64_t next_fh_ GUARDED_BY(handles_mu_) = 1;
  std::atomic<uint64_t> skipped_names_{0};
  // The write-back thread uses them (a file set aside by its upload) while the adapter may set
  // or clear them: lock 33 of fs/lock_order.h, a leaf (each is copied out, then called).
  Mutex invalidators_mu_;
  std::function<void(uint64_t)> invalidate_pages_ GUARDED_BY(invalidators_mu_);
  std::function<void(uint64_t, const std::string&)> invalidate_entry_ GUARDED_BY(invalidators_mu_);
  int64_t mount_time_ns_;  // the root's mtime
  KeyResolver resolver_;   // what a key is, through meta_cache_

  // Directory times: creating or removing an entry moves its directory's mtime and ctime. An S3
  // directory's marker would need a copy for each, so they are kept here, for the mount's
  // lifetime (a chmod, chown or touch of the directory writes the mtime into its marker, and
  // then its own wins). A bounded map: past kMaxDirTimes directories it starts again.
  static constexpr size_t kMaxDirTimes = 1 << 16;
  Mutex dir_times_mu_;  // lock 27 of fs/lock_order.h: a leaf
  std::unordered_map<std::string, int64_t> dir_times_ GUARDED_BY(dir_times_mu_);
  // An entry of `key`'s directory was created or removed now.
  void EntryChanged(const std::string& key);
  // `attr` of `key` with the times this mount gave the directory, if it is one.
  FileAttr WithDirTimes(const std::string& key, FileAttr attr);
  // The directory `key` got times of its own (or is gone): what was kept of it goes.
  void ForgetDirTimes(const std::string& key);

  // Staging, uploads, held metadata changes and the write-back queue (fs/file_writer.h). Last:
  // destroyed (its thread stopped) before what its work reaches.
  std::unique_ptr<FileWriter> writer_;
};

}  // namespace objfs
