// Filesystem: construction, name resolution, attributes and directory listings.
#include "fs/filesystem.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <set>

#include "backend/log.h"
#include "cache/io_pool.h"
#include "cache/read_budget.h"
#include "fs/errno_map.h"
#include "fs/object_metadata.h"

namespace objfs {

namespace {

constexpr size_t kMaxNameBytes = 255;
// Files uploaded at once by the write-back thread and at unmount.
constexpr size_t kUploadThreads = 4;
std::chrono::nanoseconds Seconds(double s) {
  return std::chrono::nanoseconds(static_cast<int64_t>(s * 1e9));
}

std::string DirPrefix(const std::string& key) { return key.empty() ? "" : key + "/"; }

// Whether `s` is well-formed UTF-8: no stray or missing continuation bytes, no overlong form,
// no surrogate, nothing past U+10FFFF.
bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto byte = [&s](size_t at) { return static_cast<unsigned char>(s[at]); };
    const unsigned char c = byte(i);
    size_t length = 0;
    uint32_t code = 0;
    uint32_t least = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      length = 2, code = c & 0x1F, least = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, code = c & 0x0F, least = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4, code = c & 0x07, least = 0x10000;
    } else {
      return false;
    }
    if (i + length > s.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return false;
      code = (code << 6) | (byte(i + k) & 0x3F);
    }
    if (code < least || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

// `name` quoted for a one-line message: bytes that are not printable ASCII as \xHH.
std::string Printable(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out + "'";
}

}  // namespace

Result<std::unique_ptr<Filesystem>> Filesystem::Create(std::shared_ptr<ObjectStore> store,
                                                       FilesystemOptions options, Metrics* metrics,
                                                       std::shared_ptr<Clock> clock) {
  if (store == nullptr) return InvalidArgumentError("no object store");
  if (metrics == nullptr) return InvalidArgumentError("no metrics");
  if (clock == nullptr) clock = std::make_shared<SteadyClock>();
  if (options.content_etags == nullptr) {
    options.content_etags = dynamic_cast<ContentEtagStore*>(store.get());
  }
  OBJFS_ASSIGN_OR_RETURN(auto staging, StagingArea::Open(options.cache_dir, options.cache_reserve));
  std::unique_ptr<Filesystem> fs(
      new Filesystem(std::move(store), std::move(options), metrics, std::move(clock)));
  fs->staging_ = std::move(staging);
  Filesystem* raw = fs.get();
  FileWriter::Options writer;
  writer.writeback = raw->options_.writeback;
  // A store that changes attributes in place has no self-copies to save.
  writer.hold_metadata = raw->attributes_in_place_ ? 0 : raw->options_.metadata_delay;
  writer.read_buffer = raw->options_.prefetch.read_buffer;
  writer.writeback_thread = raw->options_.writeback_thread;
  writer.clear_abandoned_uploads = raw->options_.clear_abandoned_uploads;
  writer.data_set_aside = [raw](uint64_t ino) {
    raw->InvalidatePages(ino);
    if (Result<std::string> key = raw->KeyOf(ino); key.ok()) raw->InvalidateEntryOf(*key);
  };
  writer.upload_threads = kUploadThreads;
  writer.log = [raw](LogLevel level, const std::string& line) { raw->Log(level, line); };
  fs->writer_ = std::make_unique<FileWriter>(raw->store_.get(), raw->staging_.get(), &raw->inodes_,
                                             &raw->meta_cache_, &raw->attrs_, raw->metrics_,
                                             raw->clock_, std::move(writer));
  return fs;
}

Filesystem::Filesystem(std::shared_ptr<ObjectStore> store, FilesystemOptions options,
                       Metrics* metrics, std::shared_ptr<Clock> clock)
    : store_(std::move(store)),
      native_etags_(store_->capabilities().native_etags),
      native_rename_(store_->capabilities().native_rename),
      stores_owner_(store_->capabilities().stores_owner),
      max_object_size_(store_->capabilities().max_object_size),
      max_key_bytes_(store_->capabilities().max_key_bytes),
      utf8_keys_(store_->capabilities().utf8_keys),
      reserved_prefix_(store_->capabilities().reserved_prefix),
      user_xattrs_(store_->capabilities().user_xattrs),
      special_files_(store_->capabilities().special_files),
      keeps_encryption_(store_->capabilities().keeps_encryption),
      attributes_in_place_(!store_->capabilities().attributes_by_copy ||
                           store_->capabilities().native_rename),
      options_(std::move(options)),
      attrs_(AttrDefaults{options_.uid, options_.gid, options_.umask, options_.file_mode,
                          options_.dir_mode}),
      metrics_(metrics),
      clock_(std::move(clock)),
      meta_cache_(clock_, Seconds(options_.attr_timeout), Seconds(options_.negative_timeout)),
      io_pool_(std::make_unique<IoPool>(
          static_cast<size_t>(options_.io_threads > 0 ? options_.io_threads : 1))),
      read_budget_(std::make_unique<ReadBudget>(options_.prefetch_memory)),
      mount_time_ns_(NowNs()),
      resolver_(store_.get(), &meta_cache_, &attrs_, metrics_, mount_time_ns_) {
  // A store that splits each read into requests of a fixed size (SFTP: the server's max read
  // length, 255 KiB on OpenSSH) gets reads of whole multiples of it: a 1 MiB buffer would end in
  // a 4 KiB request each time, 10% more requests for nothing. Prefetch reads are multiples of
  // read_buffer, so rounding it down to a multiple of the unit is enough.
  options_.prefetch.read_buffer =
      EffectiveReadBuffer(options_.prefetch.read_buffer, store_->capabilities().read_unit);
}

size_t EffectiveReadBuffer(size_t read_buffer, uint64_t unit) {
  if (unit == 0 || read_buffer <= unit) return read_buffer;
  return static_cast<size_t>(read_buffer / unit * unit);
}

void Filesystem::Log(LogLevel level, const std::string& message) const {
  LogTo(options_.log, level, message);
}

Filesystem::~Filesystem() {
  if (writer_ != nullptr) writer_->Stop();  // its work reaches the inode table and the caches
  MutexLock lock(&handles_mu_);
  handles_.clear();  // prefetchers finish with the pool still alive
}

int64_t Filesystem::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Filesystem::EntryChanged(const std::string& key) {
  // A store that keeps directories' own times moves them itself (ParentChanged re-reads them).
  if (store_->capabilities().directory_attributes) return;
  const size_t slash = key.rfind('/');
  std::string dir = slash == std::string::npos ? std::string() : key.substr(0, slash);
  const int64_t now = NowNs();
  MutexLock lock(&dir_times_mu_);
  if (dir_times_.size() >= kMaxDirTimes) dir_times_.clear();
  dir_times_[std::move(dir)] = now;
}

FileAttr Filesystem::WithDirTimes(const std::string& key, FileAttr attr) {
  if (!S_ISDIR(attr.mode)) return attr;
  MutexLock lock(&dir_times_mu_);
  auto it = dir_times_.find(key);
  if (it == dir_times_.end()) return attr;
  attr.mtime_ns = std::max(attr.mtime_ns, it->second);
  attr.ctime_ns = std::max(attr.ctime_ns, it->second);
  return attr;
}

void Filesystem::ForgetDirTimes(const std::string& key) {
  MutexLock lock(&dir_times_mu_);
  dir_times_.erase(key);
}

Owner Filesystem::NewOwner(uint64_t parent, const std::optional<Owner>& caller, bool* setgid) {
  Owner owner = caller && stores_owner_ ? *caller : Owner{options_.uid, options_.gid};
  // The directory as this mount last saw it, within attr_timeout (on a shared mount the kernel's
  // permission check of the create has just asked for it): never a request of its own, which
  // every file of a bulk copy would pay once the directory's record is out of date (on S3 a
  // HEAD and a listing).
  Result<std::string> dir = KeyOf(parent);
  if (!dir.ok()) return owner;
  const MetaCache::Hit hit = meta_cache_.Get(*dir);
  if (hit.state == MetaCache::State::kPositive && (hit.record.mode & S_ISGID) != 0) {
    owner.gid = hit.record.gid;
    if (setgid != nullptr) *setgid = true;
  }
  return owner;
}

void Filesystem::ParentChanged(const std::string& key) {
  if (!store_->capabilities().directory_attributes) return;
  const size_t slash = key.rfind('/');
  meta_cache_.Invalidate(slash == std::string::npos ? std::string() : key.substr(0, slash));
}

Status Filesystem::CheckWritable() const {
  if (options_.read_only) return PermissionDeniedError("the mount is read-only");
  return Status::Ok();
}

Status Filesystem::CheckObjectSize(const std::string& key, uint64_t size) const {
  if (max_object_size_ == 0 || size <= max_object_size_) return Status::Ok();
  return FileTooLargeError(key + ": " + std::to_string(size) + " bytes is more than the " +
                           std::to_string(max_object_size_) + " bytes an object may have");
}

Result<std::string> Filesystem::KeyOf(uint64_t ino) {
  auto key = inodes_.KeyOf(ino);
  if (!key) return NotFoundError("unknown inode " + std::to_string(ino));
  return *key;
}

Result<std::string> Filesystem::ChildKey(uint64_t parent, std::string_view name,
                                         bool for_directory) {
  if (name.size() > kMaxNameBytes) {
    return Status(StatusCode::kNameTooLong,
                  "name of " + std::to_string(name.size()) + " bytes (the limit is 255)");
  }
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos) {
    return InvalidArgumentError("invalid file name '" + std::string(name) + "'");
  }
  OBJFS_ASSIGN_OR_RETURN(std::string parent_key, KeyOf(parent));
  std::string key = parent_key.empty() ? std::string(name) : parent_key + "/" + std::string(name);
  const size_t stored = key.size() + (for_directory ? 1 : 0);  // a directory's marker is "key/"
  if (max_key_bytes_ != 0 && stored > max_key_bytes_) {
    return Status(StatusCode::kNameTooLong, key + ": its key would be " + std::to_string(stored) +
                                                " bytes; the store takes at most " +
                                                std::to_string(max_key_bytes_));
  }
  return key;
}

Result<std::string> Filesystem::NewChildKey(uint64_t parent, std::string_view name,
                                            bool for_directory) {
  OBJFS_ASSIGN_OR_RETURN(std::string key, ChildKey(parent, name, for_directory));
  if (utf8_keys_ && !IsUtf8(name)) {
    return InvalidArgumentError("the name " + Printable(name) +
                                " is not UTF-8, which every key of this store must be");
  }
  if (!reserved_prefix_.empty() && name.starts_with(reserved_prefix_)) {
    // (A lookup asks the store, which refuses it the same way; a name cached as absent from a
    // listing would otherwise be made here, and its upload refused at every try.)
    return InvalidArgumentError("the name " + Printable(name) + " begins with " + reserved_prefix_ +
                                ", which this store keeps for its own files");
  }
  return key;
}

std::shared_ptr<Filesystem::Handle> Filesystem::FindHandle(uint64_t fh) {
  MutexLock lock(&handles_mu_);
  auto it = handles_.find(fh);
  return it == handles_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Filesystem::Handle>> Filesystem::HandlesOf(uint64_t ino) {
  std::vector<std::shared_ptr<Handle>> out;
  MutexLock lock(&handles_mu_);
  for (const auto& [fh, handle] : handles_) {
    if (handle->ino == ino) out.push_back(handle);
  }
  return out;
}

void Filesystem::CountOpenLocked(Inode& inode, int flags) {
  inode.open_handles.fetch_add(1);
  if ((flags & O_ACCMODE) != O_RDONLY) inode.open_writers.fetch_add(1);
}

uint64_t Filesystem::AddHandle(std::shared_ptr<Handle> handle) {
  metrics_->open_files.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(&handles_mu_);
  uint64_t fh = next_fh_++;
  handles_.emplace(fh, std::move(handle));
  return fh;
}

Entry Filesystem::MakeEntry(const FileAttr& attr, bool exact) const {
  Entry entry;
  entry.attr = attr;
  entry.attr_timeout = exact ? options_.attr_timeout : 0;
  entry.entry_timeout = exact ? options_.entry_timeout : 0;
  return entry;
}

std::optional<Inode::ServerWork> Filesystem::ServerWorkOf(Inode& inode, uint64_t ino) {
  MutexLock lock(&inode.work_mu);
  std::optional<Inode::ServerWork> work = inode.server_work;
  if (work) work->attr.ino = ino;
  return work;
}

std::optional<FileAttr> Filesystem::LocalAttr(Inode& inode, uint64_t ino) {
  if (std::optional<Inode::ServerWork> work = ServerWorkOf(inode, ino)) {
    return work->local ? std::optional<FileAttr>(work->attr) : std::nullopt;
  }
  MutexLock lock(&inode.mu);
  return LocalAttrLocked(inode, ino);
}

std::optional<FileAttr> Filesystem::LocalAttrLocked(const Inode& inode, uint64_t ino) {
  std::optional<FileAttr> attr = LocalAttrOf(inode);
  if (attr) attr->ino = ino;
  return attr;
}

Result<Entry> Filesystem::Lookup(uint64_t parent, std::string_view name) {
  OBJFS_ASSIGN_OR_RETURN(std::string key, ChildKey(parent, name));
  if (uint64_t known = inodes_.InoOf(key)) {
    if (auto inode = inodes_.Find(known)) {
      // Server work under way answers with the attributes from before it, for no time: the
      // work may change them when it ends.
      if (std::optional<Inode::ServerWork> work = ServerWorkOf(*inode, known)) {
        inodes_.AddLookup(known);
        return MakeEntry(work->attr, false);
      }
      if (auto attr = LocalAttr(*inode, known)) {
        inodes_.AddLookup(known);
        return MakeEntry(*attr, true);
      }
    }
  }
  OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
  uint64_t ino = inodes_.Acquire(key, 1);
  CheckPageVersion(ino, rec);
  return MakeEntry(WithDirTimes(key, AttrFromRecord(ino, rec)), true);
}

void Filesystem::Forget(uint64_t ino, uint64_t nlookup) { inodes_.Forget(ino, nlookup); }

Result<Entry> Filesystem::GetAttr(uint64_t ino) {
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  if (auto inode = inodes_.Find(ino)) {
    if (std::optional<Inode::ServerWork> work = ServerWorkOf(*inode, ino)) {
      return MakeEntry(work->attr, false);  // as in Lookup
    }
    MutexLock lock(&inode->mu);
    if (auto attr = LocalAttrLocked(*inode, ino)) return MakeEntry(*attr, true);
    if (inode->removed()) {
      // Removed while open: its old name may be another file's by now. It keeps the
      // attributes it had when it was removed (and what fchmod and the like changed since).
      FileAttr attr = WithStoredTimes(inode->attr, inode->extra_metadata);
      attr.ino = ino;
      attr.nlink = 0;  // no name leads to it any more
      return MakeEntry(attr, true);
    }
  }
  OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
  CheckPageVersion(ino, rec);
  return MakeEntry(WithDirTimes(key, AttrFromRecord(ino, rec)), true);
}

void Filesystem::CheckPageVersion(uint64_t ino, const MetaRecord& rec) {
  if (!options_.kernel_page_cache || rec.is_dir) return;
  std::shared_ptr<Inode> inode = inodes_.Find(ino);
  if (inode == nullptr) return;  // never opened: the kernel has no pages of it
  {
    MutexLock lock(&inode->mu);
    // Staged here, its pages are what was written; an object without a version cannot tell.
    if (inode->staged || inode->page_version.empty() || rec.etag.empty() ||
        rec.etag == inode->page_version) {
      return;
    }
    inode->page_version = ETag();  // pages of no known version: the next open drops them too
    inode->pages_drop_queued = true;
  }
  InvalidatePages(ino);
}

bool Filesystem::TakeQueuedPageDrop(uint64_t ino) {
  std::shared_ptr<Inode> inode = inodes_.Find(ino);
  if (inode == nullptr) return true;  // forgotten: dropping costs nothing
  MutexLock lock(&inode->mu);
  const bool queued = inode->pages_drop_queued;
  inode->pages_drop_queued = false;
  return queued;
}

void Filesystem::InvalidatePages(uint64_t ino) {
  std::function<void(uint64_t)> invalidate;
  {
    MutexLock lock(&invalidators_mu_);
    invalidate = invalidate_pages_;
  }
  if (!invalidate) return;
  Bump(metrics_->page_cache_invalidations);
  invalidate(ino);
}

Result<std::vector<DirEntry>> Filesystem::ReadDir(uint64_t ino) {
  DirCursor cursor;
  std::vector<DirEntry> out;
  while (!cursor.done) {
    OBJFS_ASSIGN_OR_RETURN(std::vector<DirEntry> page, ReadDirPage(ino, &cursor));
    for (DirEntry& entry : page) out.push_back(std::move(entry));
  }
  return out;
}

Result<std::vector<DirEntry>> Filesystem::ReadDirPage(uint64_t ino, DirCursor* cursor) {
  if (cursor->done) return std::vector<DirEntry>{};
  if (!cursor->started) {
    OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
    if (!key.empty()) {
      MetaCache::Hit hit = meta_cache_.Get(key);
      if (hit.state == MetaCache::State::kPositive && !hit.record.is_dir) {
        return Status(StatusCode::kNotDirectory, key + " is not a directory");
      }
    }
    *cursor = DirCursor{};
    cursor->started = true;
    cursor->key = key;
    cursor->heads_left = options_.readdir_heads;
    cursor->listing_ticket = meta_cache_.ListingTicket();
    // Files created here and not uploaded yet: given after the listing unless it has them.
    const std::string prefix = DirPrefix(key);
    for (const auto& [child_ino, inode] : inodes_.WithLocalData(key)) {
      auto child_key = inodes_.KeyOf(child_ino);
      if (!child_key || child_key->size() <= prefix.size() ||
          inodes_.InoOf(*child_key) != child_ino) {
        continue;
      }
      std::string name = child_key->substr(prefix.size());
      if (name.find('/') == std::string::npos) cursor->local_names.insert(std::move(name));
    }
  }
  const std::string& key = cursor->key;
  const std::string prefix = DirPrefix(key);
  std::vector<DirEntry> out;
  // Files whose listing lacks their metadata (mode, owner, times): out's index, key, inode.
  struct Incomplete {
    size_t index;
    std::string key;
    uint64_t ino;
  };
  std::vector<Incomplete> incomplete;

  ListOptions list;
  list.prefix = prefix;
  list.delimiter = "/";
  list.max_keys = options_.list_page_keys > 0 ? options_.list_page_keys : 1000;
  list.continuation_token = cursor->token;
  list.want_metadata = true;
  OBJFS_ASSIGN_OR_RETURN(Listing page, store_->list(list));
  uint64_t skipped = 0;
  // What each new name becomes: its inode, and the attributes the cache or the listing gives.
  for (const ListedName& named :
       NamesOfPage(page, prefix, attrs_, mount_time_ns_, cursor, &skipped)) {
    std::string child = prefix + named.name;
    MetaRecord rec = named.listed;
    MetaCache::Hit hit = meta_cache_.Get(child);
    if (hit.state == MetaCache::State::kPositive && hit.record.complete &&
        hit.record.is_dir == named.listed.is_dir) {
      rec = hit.record;
    } else {
      meta_cache_.Put(child, named.listed);
    }
    uint64_t child_ino = inodes_.Acquire(child, 0);
    FileAttr attr = WithDirTimes(child, AttrFromRecord(child_ino, rec));
    bool exact = rec.complete;
    if (auto inode = inodes_.Find(child_ino)) {
      if (std::optional<Inode::ServerWork> work = ServerWorkOf(*inode, child_ino)) {
        out.push_back(DirEntry{named.name, MakeEntry(work->attr, false), /*name_only=*/true});
        continue;
      }
      if (auto local = LocalAttr(*inode, child_ino)) {
        attr = *local;
        exact = true;
      }
    }
    if (!exact && !rec.is_dir) {
      // A listing without metadata leaves the LastModified as the record's mtime.
      incomplete.push_back({out.size(), child, child_ino});
    }
    out.push_back(DirEntry{named.name, MakeEntry(attr, exact)});
  }
  skipped_names_.fetch_add(skipped);
  if (Status looped = NoteListingToken(prefix, page.next_token, &cursor->tokens); !looped.ok()) {
    Log(LogLevel::kError, looped.message());
    return looped;
  }
  cursor->token = page.next_token;
  const bool last_page = page.next_token.empty();
  page = Listing{};

  // With listing_attrs, what the listing gave (and the mount's defaults for the rest) goes out
  // to be cached by the kernel; a lookup after the attribute timeout reads the headers.
  if (options_.listing_attrs) {
    for (const Incomplete& file : incomplete) {
      out[file.index].entry.attr_timeout = options_.attr_timeout;
      out[file.index].entry.entry_timeout = options_.entry_timeout;
    }
    incomplete.clear();
  }
  // A listing has sizes and times but not the metadata objfs keeps in headers. Without it the
  // entries go out with no attribute timeout and `ls -l` makes the kernel look up each name, one
  // HEAD after another; fetching them here, in parallel on the I/O pool, makes that one round of
  // concurrent HEADs per page. Past readdir_heads files, a very large directory is left to lazy
  // lookups (which keep what they find too: Resolve).
  if (!incomplete.empty() && incomplete.size() <= cursor->heads_left) {
    cursor->heads_left -= incomplete.size();
    std::vector<std::future<Result<ObjectInfo>>> heads;
    heads.reserve(incomplete.size());
    for (const Incomplete& file : incomplete) {
      heads.push_back(io_pool_->Async([store = store_, k = file.key] { return store->head(k); }));
    }
    for (size_t i = 0; i < incomplete.size(); ++i) {
      Result<ObjectInfo> head = heads[i].get();
      if (!head.ok()) continue;  // gone or failing: the kernel's lookup will tell
      MetaRecord rec = RecordFromInfo(*head, false);
      rec.complete = true;
      meta_cache_.Put(incomplete[i].key, rec);
      DirEntry& entry = out[incomplete[i].index];
      entry.entry = MakeEntry(AttrFromRecord(incomplete[i].ino, rec), true);
    }
  } else if (!incomplete.empty()) {
    cursor->heads_left = 0;
  }
  if (!last_page) return out;

  if (cursor->names_overflow) {
    meta_cache_.PutListing(key, {}, false, cursor->listing_ticket);
  } else {
    meta_cache_.PutListing(key, std::move(cursor->names), true, cursor->listing_ticket);
  }
  cursor->names = {};
  // Files created here and not uploaded yet.
  for (const std::string& name : cursor->local_names) {
    std::string child_key = prefix + name;
    uint64_t child_ino = inodes_.InoOf(child_key);
    if (child_ino == 0) continue;
    auto inode = inodes_.Find(child_ino);
    if (inode == nullptr) continue;
    if (std::optional<Inode::ServerWork> work = ServerWorkOf(*inode, child_ino)) {
      if (work->local) out.push_back(DirEntry{name, MakeEntry(work->attr, false), true});
    } else if (auto attr = LocalAttr(*inode, child_ino)) {
      out.push_back(DirEntry{name, MakeEntry(*attr, true)});
    }
  }
  cursor->local_names.clear();
  cursor->recent_files.clear();
  cursor->done = true;
  return out;
}

std::optional<std::string> Filesystem::ListingPrefix(uint64_t dir) {
  std::optional<std::string> key = inodes_.KeyOf(dir);
  if (!key) return std::nullopt;
  return DirPrefix(*key);
}

DirEntry Filesystem::Refreshed(const std::string& prefix, const DirEntry& built) {
  const uint64_t ino = built.entry.attr.ino;
  if (S_ISDIR(built.entry.attr.mode)) return built;
  DirEntry entry = built;
  const std::string key = prefix + entry.name;
  auto name_only = [&](const FileAttr& attr) {
    entry.entry = MakeEntry(attr, false);
    entry.name_only = true;
    return entry;
  };
  // Renamed or removed since: the name is no longer this file's.
  if (inodes_.InoOf(key) != ino) return name_only(entry.entry.attr);
  std::shared_ptr<Inode> inode = inodes_.Find(ino);
  if (inode == nullptr) return built;  // never opened nor changed here: the listing is as new
  if (std::optional<Inode::ServerWork> work = ServerWorkOf(*inode, ino)) {
    return name_only(work->attr);
  }
  if (!inode->mu.TryLock()) return name_only(entry.entry.attr);
  std::optional<FileAttr> local = LocalAttrLocked(*inode, ino);
  inode->mu.Unlock();
  if (local) {
    if (local->nlink == 0) return name_only(*local);
    entry.entry = MakeEntry(*local, true);
    entry.name_only = false;
    return entry;
  }
  // What an upload or change of this mount's left, when it is newer than the page.
  MetaCache::Hit hit = meta_cache_.Get(key);
  if (hit.state == MetaCache::State::kPositive && hit.record.complete && !hit.record.is_dir) {
    entry.entry = MakeEntry(AttrFromRecord(ino, hit.record), true);
    entry.name_only = false;
  }
  return entry;
}

DirEntry Filesystem::EntryForKernel(const std::optional<std::string>& prefix,
                                    const DirEntry& built) {
  DirEntry entry = prefix ? Refreshed(*prefix, built) : built;
  if (!entry.name_only && !inodes_.AddLookup(entry.entry.attr.ino)) {
    entry.entry = MakeEntry(entry.entry.attr, false);
    entry.name_only = true;
  }
  return entry;
}

Result<FsStats> Filesystem::StatFs() const {
  FsStats stats;
  Result<StoreSpace> space = store_->space();
  if (space.ok()) {
    stats.block_size = stats.fragment_size = space->block_size;
    stats.blocks = space->blocks;
    stats.blocks_free = space->blocks_free;
    stats.blocks_available = space->blocks_available;
    stats.files = space->files;
    stats.files_free = space->files_free;
    stats.name_max = static_cast<uint32_t>(std::min<uint64_t>(space->name_max, kMaxNameBytes));
    return stats;
  }
  if (space.status().code() != StatusCode::kUnsupported) return space.status();
  stats.block_size = 4096;
  stats.fragment_size = 4096;
  // Object stores have no meaningful capacity; like s3fs, report a very large free space
  // (2^50 blocks of 4 KiB: 4 EiB, which keeps blocks * block size within 64 bits).
  stats.blocks = stats.blocks_free = stats.blocks_available = uint64_t{1} << 50;
  stats.files = stats.files_free = uint64_t{1} << 32;
  stats.name_max = kMaxNameBytes;
  return stats;
}

}  // namespace objfs
