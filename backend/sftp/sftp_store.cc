#include "backend/sftp/sftp_store.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "backend/md5.h"
#include "backend/object_version.h"
#include "backend/retry.h"
#include "backend/upload_ranges.h"

namespace objfs::sftp {
namespace {

// This machine's boot and this process's PID namespace, as a commit lock's token names them
// (see CommitLockToken): empty where /proc does not tell.
std::string ReadBootAndPidNamespace() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (!(boot >> boot_id) || boot_id.size() != 36 ||
      boot_id.find_first_not_of("0123456789abcdef-") != std::string::npos) {
    return {};
  }
  std::array<char, 64> ns{};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns.data(), ns.size() - 1);
  if (n <= 0) return {};
  std::string pid_ns(ns.data(), static_cast<size_t>(n));  // "pid:[4026531836]"
  const size_t open = pid_ns.find('['), close = pid_ns.find(']');
  if (open == std::string::npos || close == std::string::npos || close <= open + 1) return {};
  pid_ns = pid_ns.substr(open + 1, close - open - 1);
  if (pid_ns.find_first_not_of("0123456789") != std::string::npos) return {};
  return boot_id + "." + pid_ns;
}

const std::string& ThisBootAndPidNamespace() {
  static const std::string kHere = ReadBootAndPidNamespace();
  return kHere;
}

// A commit lock token's random part: 128 bits, so that no other client's is the same.
std::string NewCommitLockId() {
  std::array<uint8_t, 16> bytes{};
  if (RAND_bytes(bytes.data(), bytes.size()) != 1) {
    std::random_device random;
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(random());
  }
  return "objfs-commit-lock-" + HexMd5(bytes);  // (any 16 bytes in hex)
}

std::string CommitLockTokenOf(std::string_view id, pid_t pid) {
  std::string token(id);
  const std::string& here = ThisBootAndPidNamespace();
  if (!here.empty()) token += "." + here + "." + std::to_string(pid);
  return token;
}

// Whether the server refused a request as such (sftp-server -P, or a server without it).
bool RefusedRequest(const Status& failed) {
  return failed.code() == StatusCode::kPermissionDenied ||
         failed.code() == StatusCode::kUnsupported;
}

constexpr std::string_view kReservedPrefix = ".objfs-";
constexpr std::string_view kMarkerFile = ".objfs-dir";
constexpr size_t kMaxNameBytes = 255;

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool IsMarker(std::string_view key) { return !key.empty() && key.back() == '/'; }

Status InvalidKey(std::string_view key) {
  return InvalidArgumentError("key '" + std::string(key) +
                              "' is not a valid file name on an SFTP server");
}

// Every '/'-separated component of `key` (without a marker's final '/') must be a file name.
Status ValidateKey(std::string_view key) {
  std::string_view path = IsMarker(key) ? key.substr(0, key.size() - 1) : key;
  if (path.empty() || path.find('\0') != std::string_view::npos) return InvalidKey(key);
  while (true) {
    size_t slash = path.find('/');
    std::string_view name = path.substr(0, slash);
    if (name.empty() || name == "." || name == ".." || StartsWith(name, kReservedPrefix)) {
      return InvalidKey(key);
    }
    if (name.size() > kMaxNameBytes) {
      return Status(StatusCode::kNameTooLong, "key '" + std::string(key) + "' has a component of " +
                                                  std::to_string(name.size()) +
                                                  " bytes; the SFTP server allows 255");
    }
    if (slash == std::string_view::npos) return Status::Ok();
    path.remove_prefix(slash + 1);
  }
}

// The status of the last libssh sftp call that failed on `c`; a lost connection marks it broken.
Status LibsshStatus(SftpConnection& c, const std::string& what) {
  ssh_session ssh = c.sftp()->session;
  if (ssh_is_connected(ssh) == 0 || ssh_get_error_code(ssh) == SSH_FATAL) {
    c.MarkBroken();
    return TransientError(what + ": connection lost: " + ssh_get_error(ssh));
  }
  int code = sftp_get_error(c.sftp());
  if (code == SSH_FX_OK) {
    c.MarkBroken();
    return TransientError(what + ": " + ssh_get_error(ssh));
  }
  if (code == SSH_FX_CONNECTION_LOST || code == SSH_FX_NO_CONNECTION) c.MarkBroken();
  return StatusFromSftpCode(static_cast<uint32_t>(code), "", what);
}

struct AttributesDeleter {
  void operator()(sftp_attributes a) const { sftp_attributes_free(a); }
};
using Attributes = std::unique_ptr<sftp_attributes_struct, AttributesDeleter>;

int64_t MtimeSeconds(const sftp_attributes_struct& a) { return a.mtime; }

// The version of a file: its size and whole-second mtime (all SFTP v3 gives).
ETag VersionOf(uint64_t size, int64_t mtime_s) { return VersionTag(size, mtime_s * 1000000000); }
ETag VersionOf(const sftp_attributes_struct& a) { return VersionOf(a.size, MtimeSeconds(a)); }

bool IsDirectory(const sftp_attributes_struct& a) {
  return a.type == SSH_FILEXFER_TYPE_DIRECTORY ||
         ((a.flags & SSH_FILEXFER_ATTR_PERMISSIONS) && S_ISDIR(a.permissions));
}

// s3fs-style metadata from SFTP attributes.
Metadata MetadataFromAttributes(const sftp_attributes_struct& a) {
  Metadata m;
  if (a.flags & SSH_FILEXFER_ATTR_PERMISSIONS) m["mode"] = std::to_string(a.permissions);
  if (a.flags & SSH_FILEXFER_ATTR_UIDGID) {
    m["uid"] = std::to_string(a.uid);
    m["gid"] = std::to_string(a.gid);
  }
  if (a.flags & SSH_FILEXFER_ATTR_ACMODTIME) {
    m["mtime"] = std::to_string(a.mtime);
    m["atime"] = std::to_string(a.atime);
  }
  return m;
}

// What head() and list() report for a file: its size, mtime and attributes, and its version as
// the ETag.
ObjectInfo InfoFromAttributes(std::string_view key, const sftp_attributes_struct& a) {
  ObjectInfo info;
  info.key = std::string(key);
  info.size = a.size;
  info.mtime_ns = MtimeSeconds(a) * 1000000000;
  info.etag = VersionOf(a);
  info.metadata = MetadataFromAttributes(a);
  info.has_metadata = true;
  return info;
}

// The metadata `name` ("uid", "gid", "mode") as the decimal number it must be, or none.
std::optional<uint32_t> ParseId(const Metadata& metadata, const std::string& name) {
  auto it = metadata.find(name);
  if (it == metadata.end()) return std::nullopt;
  uint32_t id = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), id);
  if (ec != std::errc() || end != it->second.data() + it->second.size()) return std::nullopt;
  return id;
}

std::optional<uint32_t> ParseMode(const Metadata& metadata) { return ParseId(metadata, "mode"); }

// Whether attributes with `flags` and `permissions` show a file of another type than a regular
// one. Some servers send the permission bits without the type (S_IFMT): a type not shown is
// taken as a regular file's, as ObjectAttrs does.
bool ShownNotRegular(uint32_t flags, uint32_t permissions) {
  return (flags & SSH_FILEXFER_ATTR_PERMISSIONS) != 0 && (permissions & S_IFMT) != 0 &&
         !S_ISREG(permissions);
}

// Whether `opened` (an FSTAT) has the mode and owner given (those not given, or not reported,
// match any; the type only when both show one).
bool AlikeModeAndOwner(const SftpWire::FileAttrs& opened, std::optional<uint32_t> mode,
                       std::optional<uint32_t> uid, std::optional<uint32_t> gid) {
  const bool typed = (opened.permissions & S_IFMT) != 0 && mode && (*mode & S_IFMT) != 0;
  const uint32_t bits = typed ? ~0u : 07777u;
  return ((opened.flags & SSH_FILEXFER_ATTR_PERMISSIONS) == 0 || !mode ||
          (*mode & bits) == (opened.permissions & bits)) &&
         ((opened.flags & SSH_FILEXFER_ATTR_UIDGID) == 0 ||
          ((!uid || *uid == opened.uid) && (!gid || *gid == opened.gid)));
}

Status NotTheNamedFile(std::string_view what) {
  return PermissionDeniedError(std::string(what) +
                               ": the file opened is not the one its name showed (a link or "
                               "another file was put in its place): nothing is read from it");
}

// How many times a read checks the file it opened against its name (CheckOpenedIsTheName)
// while they differ only in mode or owner.
constexpr int kNameChecks = 4;

// Whether the file a handle opened for reading by name is the one the name itself shows
// (`named`, an LSTAT sent with the FSTAT that gave `opened`): both regular files (a link or any
// other kind of file is refused, PermissionDenied), of the same mode and owner. A regular file of
// another mode or owner is the name replaced or changed between the OPEN and the LSTAT, as a rename
// or chmod by anyone may do: PreconditionFailed, which the caller meets as any file changed under
// it.
Status CheckOpenedIsTheName(const SftpWire::FileAttrs& opened, const SftpWire::FileAttrs& named,
                            std::string_view what) {
  if (ShownNotRegular(named.flags, named.permissions) ||
      ShownNotRegular(opened.flags, opened.permissions)) {
    return NotTheNamedFile(what);
  }
  const bool has_mode = (named.flags & SSH_FILEXFER_ATTR_PERMISSIONS) != 0;
  const bool has_owner = (named.flags & SSH_FILEXFER_ATTR_UIDGID) != 0;
  if (!AlikeModeAndOwner(opened, has_mode ? std::optional(named.permissions) : std::nullopt,
                         has_owner ? std::optional(named.uid) : std::nullopt,
                         has_owner ? std::optional(named.gid) : std::nullopt)) {
    return PreconditionFailedError(std::string(what) +
                                   ": the file opened and its name show another mode or owner "
                                   "(changed or replaced meanwhile): nothing is read from it");
  }
  return Status::Ok();
}

// A copy's source, as HeadOn found its name: a regular file, or PermissionDenied.
Status CheckRegular(const ObjectInfo& named, std::string_view what) {
  const std::optional<uint32_t> mode = ParseMode(named.metadata);
  if (!mode || S_ISREG(*mode)) return Status::Ok();
  return PermissionDeniedError(std::string(what) + ": " + named.key +
                               " is no regular file (a link or another kind of file is in its "
                               "place): nothing is read from it");
}

// Whether the file a handle opened by name (an open follows links) is the one an LSTAT of
// that name found just before (`named`, from HeadOn): a regular file of the same version, mode
// and owner. SFTP has no O_NOFOLLOW nor inode numbers: a link that another account who may
// write the directory put in the file's place in between leads to another file, which fails
// this unless it is as alike as a file of that account's own could be.
Status CheckOpenedIsNamed(const SftpWire::FileAttrs& opened, const ObjectInfo& named,
                          std::string_view what) {
  if (ShownNotRegular(opened.flags, opened.permissions) ||
      !AlikeModeAndOwner(opened, ParseMode(named.metadata), ParseId(named.metadata, "uid"),
                         ParseId(named.metadata, "gid"))) {
    return NotTheNamedFile(what);
  }
  // The same file, written to in between: as any change of the source.
  if (VersionOf(opened.size, opened.mtime_s) != named.etag) {
    return PreconditionFailedError(std::string(what) + ": the source changed (version " +
                                   VersionOf(opened.size, opened.mtime_s).value() + ", expected " +
                                   named.etag.value() + ")");
  }
  return Status::Ok();
}

// s3fs writes mtime (and atime) as whole or fractional seconds. SFTP's times are unsigned
// 32-bit seconds: one outside them becomes the nearest it can hold (1970-01-01 or 2106-02-07),
// as Linux clamps a time to its file system's range, rather than none (which the callers take
// as now).
std::optional<int64_t> ParseMtime(const Metadata& metadata, const std::string& name = "mtime") {
  auto it = metadata.find(name);
  if (it == metadata.end()) return std::nullopt;
  char* end = nullptr;
  double seconds = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || std::isnan(seconds)) return std::nullopt;
  return static_cast<int64_t>(std::floor(std::clamp(seconds, 0.0, 4294967295.0)));
}

std::string ParentOf(const std::string& path) { return path.substr(0, path.rfind('/')); }

Status StatusOfResult(const Status& status) { return status; }
template <typename T>
Status StatusOfResult(const Result<T>& result) {
  return result.status();
}

// The size of each READ request: the server's max read length, within sane bounds.
uint32_t ReadChunk(const SftpLimits& limits) {
  return static_cast<uint32_t>(std::clamp<uint64_t>(limits.max_read, 4096, 4u << 20));
}

}  // namespace

Result<std::unique_ptr<SftpStore>> SftpStore::Create(SftpStoreOptions options) {
  if (options.host.empty()) return InvalidArgumentError("SFTP store needs a host");
  if (options.root.empty() || options.root[0] != '/') {
    return InvalidArgumentError("SFTP root '" + options.root + "' is not an absolute path");
  }
  while (options.root.size() > 1 && options.root.back() == '/') options.root.pop_back();
  std::unique_ptr<SftpStore> store(new SftpStore(std::move(options)));
  // Whatever fails here is the caller's one error to report: not logged as well.
  store->log_timeouts_ = false;
  OBJFS_RETURN_IF_ERROR(store->CheckRoot());
  store->log_timeouts_ = true;
  return store;
}

SftpStore::SftpStore(SftpStoreOptions options)
    : options_(std::move(options)),
      pool_(SftpConnectOptions{.host = options_.host,
                               .port = options_.port,
                               .user = options_.user,
                               .identity_files = options_.identity_files,
                               .known_hosts = options_.known_hosts,
                               .global_known_hosts = options_.global_known_hosts,
                               .accept_new_host_key = options_.accept_new_host_key,
                               .connect_timeout = options_.connect_timeout,
                               .proxy_command = options_.proxy_command,
                               .config = options_.config,
                               .password = options_.password,
                               .ciphers = options_.ciphers,
                               .request_timeout = options_.request_timeout,
                               .log = options_.log},
            options_.sessions),
      lock_id_(NewCommitLockId()) {
  const int slots = std::clamp(options_.sessions / 2, 0, static_cast<int>(Md5Slots::max()));
  if (slots > 0) md5_slots_ = std::make_unique<Md5Slots>(slots);
}

std::string CommitLockToken(pid_t pid) { return CommitLockTokenOf(NewCommitLockId(), pid); }

std::string SftpStore::lock_token() const {
  // The PID asked each time: objfs makes its store before it goes to the background, and the
  // process that made it is gone by the time the mount stores anything.
  return CommitLockTokenOf(lock_id_, ::getpid());
}

bool CommitLockHolderGone(std::string_view token) {
  const std::string& here = ThisBootAndPidNamespace();
  const size_t random_end = token.find('.');
  if (here.empty() || random_end == std::string_view::npos) return false;
  const std::string_view rest = token.substr(random_end + 1);
  if (rest.size() <= here.size() + 1 || rest.substr(0, here.size()) != here ||
      rest[here.size()] != '.') {
    return false;  // another machine's, or another boot's or PID namespace's: not for us to tell
  }
  const std::string_view pid_text = rest.substr(here.size() + 1);
  pid_t pid = 0;
  auto [end, error] = std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
  if (error != std::errc() || end != pid_text.data() + pid_text.size() || pid <= 1) return false;
  // ESRCH only: a process of that PID (another user's: EPERM; or the PID used again) may be
  // the holder, and its lock is left to stale_commit_lock.
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

Status SftpStore::CheckRoot() {
  return WithRetry([&](SftpConnection& c) -> Status {
    {
      MutexLock lock(&server_mu_);
      if (!server_known_) {
        copy_data_ = options_.use_copy_data && c.wire().HasExtension("copy-data", "1");
        limits_ = c.wire().limits();
        cipher_ = c.cipher();
        server_known_ = true;
      }
    }
    if (options_.root == "/~" || StartsWith(options_.root, "/~/")) {
      // sftp://host/~/data: under the home directory, which the server names (its
      // canonical form of ".", where a session starts).
      char* home = sftp_canonicalize_path(c.sftp(), ".");
      if (home == nullptr) return LibsshStatus(c, "the home directory on " + options_.host);
      std::string resolved(home);
      ssh_string_free_char(home);
      if (resolved.empty() || resolved[0] != '/') {
        return InternalError("the server named the home directory '" + resolved + "'");
      }
      if (resolved.size() > 1 && resolved.back() == '/') resolved.pop_back();
      std::string rest = options_.root.substr(2);
      options_.root = resolved == "/" && !rest.empty() ? rest : resolved + rest;
    }
    Attributes a(sftp_stat(c.sftp(), options_.root.c_str()));
    if (a == nullptr) return LibsshStatus(c, "SFTP root " + describe());
    if (!IsDirectory(*a)) {
      return Status(StatusCode::kNotDirectory, "SFTP root " + describe() + " is not a directory");
    }
    return Status::Ok();
  });
}

template <typename Fn>
auto SftpStore::WithRetry(Fn&& fn) -> decltype(fn(std::declval<SftpConnection&>())) {
  RetryPolicy budget;
  budget.budget = options_.operation_timeout;
  const DeadlineClock::time_point start = DeadlineClock::now();
  const std::optional<DeadlineClock::time_point> deadline = CallDeadline(budget, start);
  auto timed_out = [&](int attempts, const Status& last) {
    Status status = TimedOutAfter(DeadlineClock::now() - start, attempts, last)
                        .WithContext("SFTP call on " + describe());
    if (options_.log) options_.log(LogLevel::kError, status.message());
    return status;
  };
  // The first try, and then fresh connections: a broken one may have had idle siblings that
  // died with it (sshd restarted), so those are dropped before the retry.
  constexpr int kMaxAttempts = 3;
  for (int attempt = 0;; ++attempt) {
    Result<SftpSessionPool::Lease> lease = pool_.Acquire(deadline);
    if (!lease.ok()) {
      if (attempt > 0 && lease.status().code() == StatusCode::kTransient && deadline &&
          DeadlineClock::now() >= *deadline) {
        return timed_out(attempt + 1, lease.status());
      }
      if (lease.status().code() == StatusCode::kTimedOut && options_.log && log_timeouts_) {
        options_.log(LogLevel::kError, lease.status().message());
      }
      return lease.status();
    }
    auto result = fn(**lease);
    if (result.ok() || StatusOfResult(result).code() != StatusCode::kTransient ||
        (*lease)->healthy()) {
      return result;
    }
    if (deadline && DeadlineClock::now() >= *deadline) {
      return timed_out(attempt + 1, StatusOfResult(result));
    }
    if (attempt + 1 >= kMaxAttempts) return result;
    pool_.DropIdle();
  }
}

Result<SftpStore::KeyPaths> SftpStore::PathsOf(std::string_view key) const {
  KeyPaths p;
  if (key == "/") {
    // The marker of the mount's root: the directory itself (head, set_attributes).
    p.dir = options_.root;
    p.data = options_.root;
    return p;
  }
  OBJFS_RETURN_IF_ERROR(ValidateKey(key));
  std::string full = options_.root + "/" + std::string(key);
  // A server path is at most PATH_MAX (4096) bytes with its NUL: OpenSSH's sftp-server answers
  // a longer one with a bad message, which reads as a failure of the server. That, and room
  // beside the file for the temporary name its upload goes to (".objfs-tmp-" and 16 digits).
  constexpr size_t kMaxPath = 4095;
  constexpr size_t kTempName = 1 + kReservedPrefix.size() + 4 + 16;
  const size_t parent = full.rfind('/');
  if (full.size() > kMaxPath || parent + kTempName > kMaxPath) {
    return Status(StatusCode::kNameTooLong,
                  "the server path of key '" + std::string(key.substr(0, 64)) + "...' is " +
                      std::to_string(full.size()) + " bytes; a path on the server may have " +
                      std::to_string(kMaxPath - kTempName) + " before its last name");
  }
  if (IsMarker(key)) {
    // The marker "x/" is the directory "x" itself.
    full.pop_back();
    p.dir = full;
    p.data = full;
    return p;
  }
  size_t slash = full.rfind('/');
  p.dir = full.substr(0, slash);
  p.name = full.substr(slash + 1);
  p.data = full;
  return p;
}

Mutex& SftpStore::KeyLock(std::string_view key) {
  return key_locks_[std::hash<std::string_view>()(key) % key_locks_.size()];
}

std::string SftpStore::TempName(const std::string& dir) {
  static std::atomic<uint64_t> counter{std::random_device()()};
  static const uint64_t salt = (uint64_t{std::random_device()()} << 32) | std::random_device()();
  uint64_t n = counter.fetch_add(1) * 0x9e3779b97f4a7c15ull ^ salt;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(n));
  return dir + "/" + std::string(kReservedPrefix) + "tmp-" + hex;
}

Result<SftpStore::StagedIdentity> SftpStore::MarkStaged(SftpWire& wire,
                                                        const SftpWire::Handle& handle) {
  OBJFS_ASSIGN_OR_RETURN(SftpWire::FileAttrs made, wire.Fstat(handle));
  // A second of the next four years, past the first day: no file has it, and reading the file
  // leaves it (relatime, the default, and noatime move an atime only once it is behind the
  // mtime or a day old). Until 2033 it is one that file systems without times past 2038 keep.
  uint32_t random = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&random), sizeof random) != 1) {
    random = std::random_device()();
  }
  const auto now = static_cast<uint64_t>(std::time(nullptr));
  SftpWire::NewAttrs attrs;
  attrs.mtime_s = static_cast<uint32_t>(made.mtime_s);
  attrs.atime_s = static_cast<uint32_t>(
      std::min<uint64_t>(now + 86400 + random % (uint64_t{1} << 27), UINT32_MAX));
  StagedIdentity identity;
  identity.uid = made.uid;
  identity.made_s = made.mtime_s;
  Result<SftpWire::FileAttrs> set = wire.SetAttrs(handle, attrs);
  if (!set.ok() && set.status().code() == StatusCode::kTransient) return set.status();
  // A server that refuses FSETSTAT, or keeps another atime: the owner is what is checked.
  if (set.ok() && set->atime_s == *attrs.atime_s) identity.atime_s = *attrs.atime_s;
  return identity;
}

Result<SftpWire::Handle> SftpStore::OpenStaged(SftpWire& wire, const std::string& path,
                                               const StagedIdentity& identity,
                                               std::optional<uint64_t> size) {
  OBJFS_ASSIGN_OR_RETURN(SftpWire::Handle handle, wire.OpenFile(path, kOpenRead | kOpenWrite, 0));
  Result<SftpWire::FileAttrs> a = wire.Fstat(handle);
  if (!a.ok()) {
    (void)wire.Close(handle);
    return a.status();
  }
  const bool regular =
      (a->flags & SSH_FILEXFER_ATTR_PERMISSIONS) == 0 || (a->permissions & S_IFMT) == S_IFREG;
  if (!regular || a->uid != identity.uid || a->mtime_s < identity.made_s ||
      (identity.atime_s && a->atime_s != *identity.atime_s) || (size && a->size != *size)) {
    (void)wire.Close(handle);
    return Status(StatusCode::kPermissionDenied,
                  path +
                      " is no longer the file this upload made (a link or another file took its "
                      "name, or its atime was changed): nothing is written through it");
  }
  return handle;
}

Status SftpStore::NoteTemporary(const std::string& path, std::string_view what) {
  if (options_.journal == nullptr) return Status::Ok();
  return options_.journal->Opened(path, "").WithContext(std::string(what));
}

void SftpStore::DropTemporary(SftpConnection& c, const std::string& path) {
  // Not removed now (the connection broke, as when a server-side copy into it was cut): marked
  // abandoned, for the mount to remove once the server answers again (after an upload, and at
  // the unmount), rather than left to a next mount that may never come. Only objfs writes it:
  // a copy-data the server may still be running writes through its handle, not the name.
  auto abandon = [&] {
    if (options_.journal != nullptr) options_.journal->Abandoned(path, "");
  };
  if (!c.healthy()) return abandon();
  if (sftp_unlink(c.sftp(), path.c_str()) != 0 &&
      LibsshStatus(c, "remove " + path).code() != StatusCode::kNotFound) {
    return abandon();
  }
  if (options_.journal != nullptr) options_.journal->Closed(path, "");
}

Status SftpStore::RemoveTemporary(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string_view name =
      std::string_view(path).substr(slash == std::string::npos ? 0 : slash + 1);
  if (!name.starts_with(std::string(kReservedPrefix) + "tmp-")) {
    return InvalidArgumentError("remove " + path + ": not the name of a temporary file");
  }
  Status removed = WithRetry([&](SftpConnection& c) -> Status {
    if (sftp_unlink(c.sftp(), path.c_str()) == 0) return Status::Ok();
    Status status = LibsshStatus(c, "remove " + path);
    return status.code() == StatusCode::kNotFound ? Status::Ok() : status;
  });
  if (!removed.ok() && options_.journal != nullptr) options_.journal->Abandoned(path, "");
  return removed;
}

Result<ObjectInfo> SftpStore::HeadOn(SftpConnection& c, std::string_view key) {
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  // A file key names the link itself, as READDIR reports it; a directory key what it leads to.
  Attributes a(IsMarker(key) ? sftp_stat(c.sftp(), paths.data.c_str())
                             : sftp_lstat(c.sftp(), paths.data.c_str()));
  if (a == nullptr) return LibsshStatus(c, "stat " + std::string(key));
  if (IsMarker(key)) {
    // The marker "x/" is the directory "x" itself: nothing else is written to the server.
    if (!IsDirectory(*a)) return NotFoundError("no object " + std::string(key));
    ObjectInfo info;
    info.key = std::string(key);
    info.mtime_ns = MtimeSeconds(*a) * 1000000000;
    info.metadata = MetadataFromAttributes(*a);
    info.has_metadata = true;
    return info;
  }
  if (IsDirectory(*a)) return NotFoundError("no object " + std::string(key) + " (a directory)");
  return InfoFromAttributes(key, *a);
}

Result<ObjectInfo> SftpStore::head(std::string_view key) {
  return WithRetry([&](SftpConnection& c) { return HeadOn(c, key); });
}

Result<size_t> SftpStore::read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                               const ETag* if_match) {
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  if (IsMarker(key)) {
    // A directory marker has no bytes.
    OBJFS_RETURN_IF_ERROR(head(key).status());
    return size_t{0};
  }
  // Through the connection's own SFTP channel, which reads each reply's data straight into
  // `buf`; libssh's sftp_async_read copies it once more on the way.
  return WithRetry([&](SftpConnection& c) -> Result<size_t> {
    const std::string what = "read " + std::string(key);
    SftpWire& wire = c.wire();
    // Whatever the name leads to is opened, a link's target included; an FSTAT of the handle
    // and an LSTAT of the name, answered one right after the other, refuse any but the regular
    // file the name itself is (a chmod by anyone rarely falls between the two, where it would
    // between an LSTAT sent with the OPEN and the FSTAT a round trip later). With a version,
    // the open and the check are under the key's lock, so no commit of ours falls between.
    const bool versioned = if_match != nullptr && !if_match->empty();
    auto open_checked = [&]() -> Result<SftpWire::Handle> {
      Result<SftpWire::Handle> handle = wire.OpenFile(paths.data, kOpenRead, 0);
      if (!handle.ok()) return handle.status().WithContext(what);
      Status checked = [&]() -> Status {
        // A mode or owner that differs between the two is a chmod or chown in between, or the
        // name replaced: asked again, up to kNameChecks times in all, so that another client's
        // chmod does not fail a read; a file that is not the name's differs every time.
        Result<SftpWire::OpenedAndNamed> both = InternalError("unreachable");
        Status same;
        for (int check = 0; check < kNameChecks; ++check) {
          both = wire.FstatAndLStat(*handle, paths.data);
          if (!both.ok()) return both.status().WithContext(what);
          same = CheckOpenedIsTheName(both->opened, both->named, what);
          if (same.code() != StatusCode::kPreconditionFailed) break;
        }
        const bool named_is_it =
            versioned && VersionOf(both->named.size, both->named.mtime_s) == *if_match;
        // Only a mode or owner kept changing between the two looks (chmods racing them): the
        // version is there, and it is asked for again, never taken as gone.
        if (versioned && same.code() == StatusCode::kPreconditionFailed && named_is_it &&
            VersionOf(both->opened.size, both->opened.mtime_s) == *if_match) {
          return TransientError(same.message());
        }
        // The version asked for is not there when the name is no regular file any more (a
        // directory or a link put in its place): as for a file of other bytes, never a refusal
        // that a retry might get past. (A link whose own version was asked for is refused.)
        if (versioned && same.code() == StatusCode::kPermissionDenied && !named_is_it) {
          return PreconditionFailedError(same.message() + " (not version " + if_match->value() +
                                         ")");
        }
        OBJFS_RETURN_IF_ERROR(same);
        const SftpWire::FileAttrs& a = both->opened;
        // The version of the file this handle reads, whatever is renamed over its name later.
        if (ETag current = VersionOf(a.size, a.mtime_s); versioned && current != *if_match) {
          return PreconditionFailedError(what + ": the object changed (version " + current.value() +
                                         ", expected " + if_match->value() + ")");
        }
        return Status::Ok();
      }();
      if (!checked.ok()) {
        if (wire.healthy()) (void)wire.Close(*handle);
        return checked;
      }
      return handle;
    };
    Result<SftpWire::Handle> opened = InternalError("unreachable");
    if (versioned) {
      MutexLock lock(&KeyLock(key));
      opened = open_checked();
    } else {
      opened = open_checked();
    }
    if (!opened.ok()) return opened.status();
    const SftpWire::Handle& handle = *opened;
    const uint32_t chunk = ReadChunk(wire.limits());
    Result<size_t> n =
        wire.Read(handle, offset, buf, chunk, options_.requests_in_flight,
                  options_.metrics != nullptr ? &options_.metrics->sftp_read_requests : nullptr);
    if (wire.healthy()) (void)wire.Close(handle);
    if (!n.ok()) return n.status().WithContext(what);
    return n;
  });
}

namespace {

struct DirEntry {
  std::string key;  // object key, or the common prefix (ending in '/') of a directory
  bool is_dir = false;
  std::string name;
  uint64_t size = 0;
  int64_t mtime_s = 0;
  Metadata metadata;  // a regular file's mode, owner and mtime from the READDIR reply
};

// The entries of directory `path` whose names start with `name_prefix`, as keys under `base`
// (which ends in '/' or is empty), sorted by key bytes. NotFound gives no entries.
Result<std::vector<DirEntry>> ReadDirSorted(SftpConnection& c, const std::string& path,
                                            const std::string& base, std::string_view name_prefix) {
  std::vector<DirEntry> entries;
  sftp_dir dir = sftp_opendir(c.sftp(), path.c_str());
  if (dir == nullptr) {
    Status status = LibsshStatus(c, "list " + path);
    if (status.code() == StatusCode::kNotFound || status.code() == StatusCode::kIoError) {
      return entries;  // no such directory, or a file: nothing under this prefix
    }
    return status;
  }
  bool empty = true;  // no name but reserved ones
  while (Attributes a{sftp_readdir(c.sftp(), dir)}) {
    std::string_view name = a->name != nullptr ? a->name : "";
    if (name.empty() || name == "." || name == "..") continue;
    if (StartsWith(name, kReservedPrefix)) continue;
    empty = false;
    if (!StartsWith(name, name_prefix)) continue;
    DirEntry e;
    e.name = std::string(name);
    e.is_dir = IsDirectory(*a);
    e.key = base + e.name + (e.is_dir ? "/" : "");
    e.size = a->size;
    e.mtime_s = MtimeSeconds(*a);
    // READDIR reports what an lstat would, as head() does: a file's or a link's attributes.
    if ((a->flags & SSH_FILEXFER_ATTR_PERMISSIONS) &&
        (S_ISREG(a->permissions) || S_ISLNK(a->permissions))) {
      e.metadata = MetadataFromAttributes(*a);
    }
    entries.push_back(std::move(e));
  }
  bool complete = sftp_dir_eof(dir) != 0;
  sftp_closedir(dir);
  if (!complete) return LibsshStatus(c, "list " + path);
  // An empty directory is listed as its marker "x/", as a bucket lists the marker of an empty
  // directory; a directory with content is known by its keys.
  if (empty && !base.empty() && name_prefix.empty()) entries.push_back({base, false, "", 0, 0, {}});
  std::sort(entries.begin(), entries.end(),
            [](const DirEntry& x, const DirEntry& y) { return x.key < y.key; });
  return entries;
}

// Appends the keys under directory `path` (keys starting with `base`) greater than `marker` to
// `out`, in order, until it holds more than `limit`.
Status Walk(SftpConnection& c, const std::string& path, const std::string& base,
            std::string_view name_prefix, const std::string& marker, size_t limit,
            std::vector<DirEntry>& out) {
  OBJFS_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, ReadDirSorted(c, path, base, name_prefix));
  for (DirEntry& e : entries) {
    if (out.size() > limit) return Status::Ok();
    if (e.is_dir) {
      if (e.key <= marker && !StartsWith(marker, e.key)) continue;
      OBJFS_RETURN_IF_ERROR(Walk(c, path + "/" + e.name, e.key, "", marker, limit, out));
    } else if (e.key > marker) {
      out.push_back(std::move(e));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Listing> SftpStore::list(const ListOptions& options) {
  if (!options.delimiter.empty() && options.delimiter != "/") {
    return UnsupportedError("SFTP listings support only the delimiter '/'");
  }
  const size_t max_keys = options.max_keys > 0 ? static_cast<size_t>(options.max_keys) : 1000;
  const std::string marker = std::max(options.start_after, options.continuation_token);
  const size_t slash = options.prefix.rfind('/');
  const std::string base =
      slash == std::string::npos ? std::string() : options.prefix.substr(0, slash + 1);
  const std::string name_prefix = options.prefix.substr(base.size());
  if (!base.empty() && !ValidateKey(base).ok()) return Listing{};
  const std::string dir_path =
      base.empty() ? options_.root : options_.root + "/" + base.substr(0, base.size() - 1);

  return WithRetry([&](SftpConnection& c) -> Result<Listing> {
    std::vector<DirEntry> entries;
    if (options.delimiter.empty()) {
      OBJFS_RETURN_IF_ERROR(Walk(c, dir_path, base, name_prefix, marker, max_keys, entries));
    } else {
      OBJFS_ASSIGN_OR_RETURN(std::vector<DirEntry> all,
                             ReadDirSorted(c, dir_path, base, name_prefix));
      for (DirEntry& e : all) {
        if (e.key <= marker) continue;
        entries.push_back(std::move(e));
        if (entries.size() > max_keys) break;
      }
    }
    Listing listing;
    if (entries.size() > max_keys) {
      entries.resize(max_keys);
      listing.next_token = entries.back().key;
    }
    for (DirEntry& e : entries) {
      if (e.is_dir && !options.delimiter.empty()) {
        listing.common_prefixes.push_back(std::move(e.key));
        continue;
      }
      if (!ValidateKey(e.key).ok()) continue;  // a name objfs cannot address
      ObjectInfo info;
      info.size = e.size;
      info.mtime_ns = e.mtime_s * 1000000000;
      info.etag = VersionOf(e.size, e.mtime_s);
      info.key = std::move(e.key);
      // READDIR replies carry the attributes a stat would: no request per entry for them.
      if (!e.metadata.empty()) {
        info.metadata = std::move(e.metadata);
        info.has_metadata = true;
      }
      listing.objects.push_back(std::move(info));
    }
    return listing;
  });
}

Status SftpStore::MakeDirs(SftpConnection& c, const std::string& dir) {
  if (dir.size() <= options_.root.size()) return Status::Ok();
  Attributes a(sftp_stat(c.sftp(), dir.c_str()));
  if (a != nullptr) {
    if (IsDirectory(*a)) return Status::Ok();
    return Status(StatusCode::kNotDirectory, dir + " is a file, not a directory");
  }
  Status missing = LibsshStatus(c, "stat " + dir);
  if (missing.code() != StatusCode::kNotFound) return missing;
  OBJFS_RETURN_IF_ERROR(MakeDirs(c, ParentOf(dir)));
  if (sftp_mkdir(c.sftp(), dir.c_str(), 0755) != 0) {
    Status status = LibsshStatus(c, "mkdir " + dir);
    // Another writer may have created it meanwhile.
    Attributes again(sftp_stat(c.sftp(), dir.c_str()));
    if (again == nullptr || !IsDirectory(*again)) return status;
  }
  return Status::Ok();
}

namespace {

// The attributes objfs sets from a file's metadata: its mtime (now, if none), its atime (the
// one asked for or the one the server reported, which the metadata carries back; the mtime if
// none) and its mode. The owner only when `before` (what the server reported) names another
// one: a chown. A new file's owner is the account logged in, unless KeepOwner says otherwise.
SftpWire::NewAttrs NewAttrsOf(const Metadata& metadata, const Metadata* before = nullptr) {
  SftpWire::NewAttrs attrs;
  attrs.mtime_s = static_cast<uint32_t>(
      ParseMtime(metadata).value_or(static_cast<int64_t>(std::time(nullptr))));
  if (std::optional<int64_t> atime = ParseMtime(metadata, "atime")) {
    attrs.atime_s = static_cast<uint32_t>(*atime);
  }
  if (std::optional<uint32_t> mode = ParseMode(metadata)) attrs.permissions = *mode & 07777;
  if (before != nullptr) {
    std::optional<uint32_t> uid = ParseId(metadata, "uid"), gid = ParseId(metadata, "gid");
    std::optional<uint32_t> old_uid = ParseId(*before, "uid"), old_gid = ParseId(*before, "gid");
    if (uid && gid && old_uid && old_gid && (*uid != *old_uid || *gid != *old_gid)) {
      attrs.owner = std::make_pair(*uid, *gid);
    }
  }
  return attrs;
}

bool IsLink(const Metadata& metadata) {
  std::optional<uint32_t> mode = ParseMode(metadata);
  return mode && S_ISLNK(*mode);
}

// The wire's ATTRS as libssh's, for the helpers above.
sftp_attributes_struct LibsshAttributes(const SftpWire::FileAttrs& w) {
  sftp_attributes_struct a{};
  a.flags = w.flags;
  a.size = w.size;
  a.uid = w.uid;
  a.gid = w.gid;
  a.permissions = w.permissions;
  a.atime = static_cast<uint32_t>(w.atime_s);
  a.mtime = static_cast<uint32_t>(w.mtime_s);
  if (w.flags & SSH_FILEXFER_ATTR_PERMISSIONS) {
    a.type = S_ISDIR(w.permissions)   ? SSH_FILEXFER_TYPE_DIRECTORY
             : S_ISLNK(w.permissions) ? SSH_FILEXFER_TYPE_SYMLINK
             : S_ISREG(w.permissions) ? SSH_FILEXFER_TYPE_REGULAR
                                      : SSH_FILEXFER_TYPE_SPECIAL;
  } else {
    a.type = SSH_FILEXFER_TYPE_UNKNOWN;
  }
  return a;
}

}  // namespace

namespace {

// A failed SETSTAT carrying an owner that says the server will not chown (EPERM, EINVAL of an
// unmapped id as SSH_FX_BAD_MESSAGE, OP_UNSUPPORTED, FAILURE), not that the connection broke.
bool OwnerRefusal(const Status& st) {
  return st.code() != StatusCode::kTransient && st.code() != StatusCode::kTimedOut &&
         st.code() != StatusCode::kCancelled;
}

// chown clears set-user-ID and set-group-ID (OpenSSH's sftp-server chowns after it chmods):
// whether a mode with them must be set again after an owner was.
bool KeepsSetIdBits(const SftpWire::NewAttrs& attrs) {
  return attrs.owner && attrs.permissions && (*attrs.permissions & 06000) != 0;
}

}  // namespace

void SftpStore::KeepOwner(const Metadata& metadata, SftpWire::NewAttrs* attrs) const {
  if ((!options_.mount_owner && !options_.owner_from_caller) ||
      owner_refused_.load(std::memory_order_relaxed)) {
    return;
  }
  const std::optional<uint32_t> uid = ParseId(metadata, "uid");
  const std::optional<uint32_t> gid = ParseId(metadata, "gid");
  if (!uid || !gid) return;
  if (options_.owner_from_caller) {
    attrs->owner = std::make_pair(*uid, *gid);
    return;
  }
  // The mount's own uid= and gid= are local ids, not the server's: a half that is the mount's
  // stays what the account gave the new file ((uint32_t)-1, which chown leaves unchanged).
  constexpr uint32_t kUnchanged = 0xFFFFFFFFu;
  const uint32_t new_uid = *uid == options_.mount_owner->first ? kUnchanged : *uid;
  const uint32_t new_gid = *gid == options_.mount_owner->second ? kUnchanged : *gid;
  if (new_uid == kUnchanged && new_gid == kUnchanged) return;
  attrs->owner = std::make_pair(new_uid, new_gid);
}

void SftpStore::OwnerRefused(const std::string& key, const Status& why) {
  if (owner_refused_.exchange(true)) return;
  if (options_.log) {
    options_.log(
        LogLevel::kWarn,
        "new and replaced files of this mount belong to the SFTP account: the server refused "
        "to give " +
            key + " the owner it should have (" + why.message() +
            "); not tried again until the next mount");
  }
}

Result<SftpWire::FileAttrs> SftpStore::SetStatOfTheFile(SftpConnection& c, std::string_view key,
                                                        const std::string& path,
                                                        const SftpWire::NewAttrs& attrs,
                                                        uint32_t kind) {
  // SETSTAT follows a link: one that another account put in the file's place since the caller
  // looked (where it may write the directory) would have its target, any file on the server,
  // take the new mode, owner and times. lsetstat sets them on what the name is now, a link
  // included (which takes no mode: refused), and its LSTAT says what that was.
  auto replaced = [&] {
    return PermissionDeniedError("set attributes of " + std::string(key) +
                                 ": it is no longer the file it was (a link or another kind of "
                                 "file is in its place): nothing was changed through it");
  };
  auto same_kind = [kind](const SftpWire::FileAttrs& now) {
    return (now.flags & SSH_FILEXFER_ATTR_PERMISSIONS) == 0 || (now.permissions & S_IFMT) == kind;
  };
  if (!attrs.permissions || !lsetstat_mode_refused_.load()) {
    Result<SftpWire::FileAttrs> set = c.wire().LSetStat(path, attrs);
    if (set.ok()) return same_kind(*set) ? set : replaced();
    // A server whose fchmodat cannot set a mode without following links (glibc before 2.32,
    // or a chroot without /proc) answers a mode this way, and only so: any other refusal (a
    // file of another owner, an immutable one) is the answer.
    const std::string code = set.status().server_code();  // (status() is a copy)
    if (!attrs.permissions || (code != "SSH_FX_FAILURE" && code != "SSH_FX_OP_UNSUPPORTED")) {
      return set.status();
    }
    // Where the name is still what it was, the mode goes by name, as before lsetstat; if that
    // is taken, so from then on in this mount.
    OBJFS_ASSIGN_OR_RETURN(SftpWire::FileAttrs now, c.wire().LStat(path));
    if (!same_kind(now) || S_ISLNK(now.permissions)) return replaced();
    Result<SftpWire::FileAttrs> by_name = c.wire().SetStat(path, attrs);
    if (!by_name.ok()) return set.status();
    if (!lsetstat_mode_refused_.exchange(true) && options_.log) {
      options_.log(LogLevel::kInfo,
                   describe() + ": the server cannot set a mode without following links (" +
                       set.status().message() +
                       "): modes go by name, which a link put in a file's place between objfs's "
                       "check and the change would follow");
    }
    return by_name;
  }
  // Only the mode needs the name followed: what a link in the file's place would carry to its
  // target, a look just before rules out all but a swap in that moment.
  OBJFS_ASSIGN_OR_RETURN(SftpWire::FileAttrs now, c.wire().LStat(path));
  if (!same_kind(now) || S_ISLNK(now.permissions)) return replaced();
  return c.wire().SetStat(path, attrs);
}

Result<ObjectInfo> SftpStore::ApplyAttributes(SftpConnection& c, std::string_view key,
                                              const std::string& path, const Metadata& metadata,
                                              const Metadata* before) {
  SftpWire::NewAttrs attrs = NewAttrsOf(metadata, before);
  if (before == nullptr) KeepOwner(metadata, &attrs);
  if (attrs.owner && before != nullptr) {
    // A chown names the uid, the gid or both; the other stays what the server has (the
    // caller's view of it may be this mount's default, not the server's).
    Attributes now(IsMarker(key) ? sftp_stat(c.sftp(), path.c_str())
                                 : sftp_lstat(c.sftp(), path.c_str()));
    if (now == nullptr) return LibsshStatus(c, "stat " + std::string(key));
    if ((now->flags & SSH_FILEXFER_ATTR_UIDGID) != 0) {
      if (ParseId(metadata, "uid") == ParseId(*before, "uid")) attrs.owner->first = now->uid;
      if (ParseId(metadata, "gid") == ParseId(*before, "gid")) attrs.owner->second = now->gid;
    }
  }
  Result<SftpWire::FileAttrs> a = InternalError("unreachable");
  if (before != nullptr && IsLink(*before)) {
    // A link's own times and owner (touch -h, rsync's lutimes), never its target's. A link has
    // no mode of its own to set.
    if (!c.wire().HasExtension("lsetstat@openssh.com", "1")) {
      return UnsupportedError("set attributes of the link " + std::string(key) +
                              ": the server has no lsetstat@openssh.com");
    }
    attrs.permissions.reset();
    a = c.wire().LSetStat(path, attrs);
  } else if (before != nullptr && !IsMarker(key) &&
             c.wire().HasExtension("lsetstat@openssh.com", "1")) {
    const std::optional<uint32_t> before_mode = ParseMode(*before);
    a = SetStatOfTheFile(
        c, key, path, attrs,
        before_mode && (*before_mode & S_IFMT) != 0 ? *before_mode & S_IFMT : S_IFREG);
  } else {
    // With what the server made of it: exactly what head() will report once the file is in
    // place.
    a = c.wire().SetStat(path, attrs);
    if (!a.ok() && before == nullptr && attrs.owner && OwnerRefusal(a.status())) {
      // The account may not chown: the rest still goes.
      OwnerRefused(std::string(key), a.status());
      attrs.owner.reset();
      a = c.wire().SetStat(path, attrs);
    } else if (a.ok() && before == nullptr && KeepsSetIdBits(attrs)) {
      attrs.owner.reset();
      a = c.wire().SetStat(path, attrs);
    }
  }
  if (!a.ok()) return a.status();
  return InfoFromAttributes(key, LibsshAttributes(*a));
}

Result<ObjectInfo> SftpStore::FinishStaged(SftpConnection& c, const SftpWire::Handle& handle,
                                           std::string_view key, const std::string& path,
                                           const Metadata& metadata, uint64_t size,
                                           const std::string& replacing,
                                           const std::optional<ReplacedFile>& replaced) {
  SftpWire& wire = c.wire();
  bool attributes_refused = false;
  // The fsync may take the server long for a large file, with nothing to say meanwhile.
  SftpSessionPool::SilenceAllowance flushing(pool_, c,
                                             ServerWorkSilence(options_.request_timeout, size));
  SftpWire::NewAttrs attrs = NewAttrsOf(metadata);
  KeepOwner(metadata, &attrs);
  // The file it replaces as it is now, asked last (after the fsync): the name's mode as late as
  // this round trip can see it.
  const bool ask = replaced && attrs.permissions &&
                   *attrs.permissions == (replaced->permissions & 07777) && !replacing.empty();
  Result<SftpWire::FileAttrs> now = NotFoundError("not asked");
  Result<SftpWire::FileAttrs> finished =
      wire.Finish(handle, attrs, wire.HasExtension("fsync@openssh.com", "1"), &attributes_refused,
                  ask ? replacing : std::string_view(), &now);
  Result<ObjectInfo> info =
      finished.ok() ? Result<ObjectInfo>(InfoFromAttributes(key, LibsshAttributes(*finished)))
                    : Result<ObjectInfo>(finished.status());
  // Another client changed the mode of the file this one replaces since its writer opened it
  // (the same file: its size and mtime are as the writer saw them; a file put in its place is
  // not looked at), and this put keeps the mode it had then: theirs stands, as it would on a
  // file written in place (a chmod 600 during a rewrite is not widened back). A set-ID bit
  // stands only where it was before too, as a write clears them. A change of the owner needs
  // root on the server, and is not looked at.
  std::optional<uint32_t> theirs;
  constexpr uint32_t kNeeded =
      SSH_FILEXFER_ATTR_PERMISSIONS | SSH_FILEXFER_ATTR_SIZE | SSH_FILEXFER_ATTR_ACMODTIME;
  // (Only another owner, or root, may chmod a file: one of another owner is another file.)
  const bool same_owner = now.ok() && replaced && replaced->owner &&
                          (now->flags & SSH_FILEXFER_ATTR_UIDGID) != 0 &&
                          now->uid == replaced->owner->first && now->gid == replaced->owner->second;
  if (ask && now.ok() && (now->flags & kNeeded) == kNeeded && same_owner &&
      !ShownNotRegular(now->flags, now->permissions) && now->size == replaced->size &&
      now->mtime_s == replaced->mtime_ns / 1000000000) {
    const uint32_t seen = replaced->permissions & 07777;
    const uint32_t mode = (now->permissions & 01777) | (now->permissions & seen & 06000);
    if (mode != seen) theirs = mode;
  }
  if (attributes_refused) {
    // A server that refuses FSETSTAT (sftp-server -P fsetstat) may still take a SETSTAT.
    Metadata applied = metadata;
    if (theirs) applied["mode"] = std::to_string(S_IFREG | *theirs);
    info = ApplyAttributes(c, key, path, applied);
  } else if (theirs && info.ok()) {
    attrs.owner.reset();  // the FSETSTAT set it
    attrs.permissions = *theirs;
    // Never through a link put in the temporary file's place, where the server can tell.
    Result<SftpWire::FileAttrs> again = wire.HasExtension("lsetstat@openssh.com", "1")
                                            ? wire.LSetStat(path, attrs)
                                            : wire.SetStat(path, attrs);
    if (again.ok()) {
      info = InfoFromAttributes(key, LibsshAttributes(*again));
    } else if (options_.log) {
      // The file is whole, with the mode its writer saw: it goes in all the same.
      options_.log(LogLevel::kWarn, "put " + std::string(key) +
                                        ": keeping the mode another client gave it failed (" +
                                        again.status().ToString() + ")");
    }
  } else if (info.ok() && KeepsSetIdBits(attrs)) {
    // The owner's chown cleared them: the mode once more.
    attrs.owner.reset();
    Result<SftpWire::FileAttrs> again = wire.SetStat(path, attrs);
    info = again.ok() ? Result<ObjectInfo>(InfoFromAttributes(key, LibsshAttributes(*again)))
                      : Result<ObjectInfo>(again.status());
  }
  if (info.ok() && info->size != size) {
    return IoError(std::to_string(info->size) + " bytes arrived of " + std::to_string(size));
  }
  return info;
}

Status SftpStore::Rename(SftpConnection& c, const std::string& from, const std::string& to) {
  if (options_.use_posix_rename && c.wire().HasExtension("posix-rename@openssh.com", "1")) {
    return c.wire().PosixRename(from, to);
  }
  // Plain SFTP v3 RENAME fails when the target exists. The target is moved aside first and
  // removed only once the new file is in place (put back if that fails), so that a failure in
  // between never loses it; a reader may briefly find no file, but never a partial one.
  if (sftp_rename(c.sftp(), from.c_str(), to.c_str()) == 0) return Status::Ok();
  const size_t slash = to.rfind('/');
  const std::string aside = TempName(slash == std::string::npos ? "." : to.substr(0, slash));
  if (sftp_rename(c.sftp(), to.c_str(), aside.c_str()) != 0) {
    return LibsshStatus(c, "rename " + from + " to " + to);
  }
  if (sftp_rename(c.sftp(), from.c_str(), to.c_str()) != 0) {
    Status failed = LibsshStatus(c, "rename " + from + " to " + to);
    sftp_rename(c.sftp(), aside.c_str(), to.c_str());
    return failed;
  }
  sftp_unlink(c.sftp(), aside.c_str());
  return Status::Ok();
}

std::string SftpStore::CommitLockName(const KeyPaths& paths) {
  // Of a fixed length whatever the name's, and the same in every objfs client: a reserved
  // temporary name (hidden from listings) from the name's MD5.
  return paths.dir + "/" + std::string(kReservedPrefix) + "tmp-lock-" +
         HexMd5(Md5Of(paths.name)).substr(0, 20);
}

Result<SftpStore::LockHolder> SftpStore::LockHolderOf(SftpConnection& c, const std::string& path) {
  OBJFS_ASSIGN_OR_RETURN(SftpWire::FileAttrs found, c.wire().LStat(path));
  LockHolder holder;
  holder.mtime_s = found.mtime_s;
  if ((found.flags & SSH_FILEXFER_ATTR_PERMISSIONS) == 0 ||
      (found.permissions & S_IFMT) != S_IFLNK) {
    return holder;  // a file (an older objfs's lock) or a directory in the way
  }
  std::unique_ptr<char, decltype(&std::free)> target(sftp_readlink(c.sftp(), path.c_str()),
                                                     &std::free);
  if (target == nullptr) {
    Status failed = LibsshStatus(c, "read " + path);
    if (!RefusedRequest(failed)) return failed;
    // No link tells whose it is here: another client's, for all this store can tell.
    UseLockFiles("it does not read links back (" + failed.message() + ")");
    return holder;
  }
  holder.token = target.get();
  return holder;
}

void SftpStore::UseLockFiles(const std::string& why) {
  if (lock_files_.exchange(true) || !options_.log) return;
  options_.log(LogLevel::kInfo, describe() + ": commit locks are files made with O_EXCL, as " +
                                    why +
                                    "; one that a broken connection of this mount left is "
                                    "taken over after stale_commit_lock");
}

Status SftpStore::MakeLockFile(SftpConnection& c, const std::string& lock) {
  OBJFS_ASSIGN_OR_RETURN(SftpWire::Handle made,
                         c.wire().OpenFile(lock, kOpenWrite | kOpenCreate | kOpenExclusive, 0600));
  return c.wire().Close(made);
}

Status SftpStore::MakeCommitLock(SftpConnection& c, const std::string& lock) {
  if (lock_files_.load()) return MakeLockFile(c, lock);
  // libssh orders SYMLINK's two paths as OpenSSH, which swapped them, expects.
  const std::string token = lock_token();
  if (sftp_symlink(c.sftp(), token.c_str(), lock.c_str()) != 0) {
    return LibsshStatus(c, "make " + lock);
  }
  if (links_checked_.load()) return Status::Ok();
  // Once: the link is at the lock's name. A server that is not OpenSSH yet takes the two paths
  // the other way round, as OpenSSH does, made it at the token's name in the login directory.
  Result<SftpWire::FileAttrs> made = c.wire().LStat(lock);
  if (made.ok()) {
    links_checked_.store(true);
    return Status::Ok();
  }
  if (made.status().code() != StatusCode::kNotFound) return made.status();
  if (!c.wire().LStat(token).ok()) {
    return TransientError("make " + lock + ": the link made went away at once");
  }
  (void)sftp_unlink(c.sftp(), token.c_str());
  UseLockFiles("it takes SYMLINK's paths the other way round");
  return MakeLockFile(c, lock);
}

Result<std::string> SftpStore::TakeCommitLock(SftpConnection& c, const KeyPaths& paths,
                                              std::string_view key, std::string_view op,
                                              bool* ours_left) {
  *ours_left = false;
  const std::string what = std::string(op) + " " + std::string(key);
  SftpWire& wire = c.wire();
  const std::string lock = CommitLockName(paths);
  const auto deadline = std::chrono::steady_clock::now() + options_.commit_lock_wait;
  auto pause = std::chrono::milliseconds(2);
  int missing = 0;
  for (;;) {
    Status made = MakeCommitLock(c, lock);
    if (made.ok()) {
      MutexLock seen(&commit_locks_mu_);
      seen_locks_.erase(lock);
      return lock;
    }
    if (made.code() == StatusCode::kTransient) return made.WithContext(what);
    Result<LockHolder> held = LockHolderOf(c, lock);
    if (held.ok() && held->token == lock_token()) {
      // This store's own: a commit of the key whose connection broke before it removed the
      // lock (or lost the reply to its making), and none runs now but this one.
      if (options_.log) {
        options_.log(LogLevel::kInfo, std::string(what).append(": ") + lock +
                                          " was left by this mount's own commit, whose "
                                          "connection broke: taken again");
      }
      *ours_left = true;
      return lock;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      if (!held.ok() && held.status().code() == StatusCode::kNotFound) {
        return TransientError(std::string(what).append(": ") + made.message());
      }
      return TransientError(std::string(what).append(": another client is storing it (") + lock +
                            " held for " + std::to_string(options_.commit_lock_wait.count()) +
                            " ms)");
    }
    if (!held.ok()) {
      if (held.status().code() != StatusCode::kNotFound) {
        return held.status().WithContext(what);
      }
      // Not made, yet not there. A link the server refuses: made as a file. Another client's
      // lock released in between (SSH_FX_FAILURE, as for EEXIST; or a full disk): made again
      // at once, until commit_lock_wait is over. Otherwise (the directory removed, or not
      // writable) that is the failure.
      if (RefusedRequest(made) && !lock_files_.load()) {
        Status file = MakeLockFile(c, lock);
        if (file.ok()) {
          UseLockFiles("it refused the link (" + made.message() + ")");
          MutexLock seen(&commit_locks_mu_);
          seen_locks_.erase(lock);
          return lock;
        }
      }
      if (made.code() != StatusCode::kIoError && ++missing >= 2) {
        return made.WithContext(what);
      }
      continue;
    }
    missing = 0;
    const bool holder_gone = CommitLockHolderGone(held->token);
    if (holder_gone || LockLeftBehind(lock, *held)) {
      // Left by a client that died between its lock and its rename: one of this machine whose
      // process is gone, or one whose lock stood for stale_commit_lock. Moved away first, so that
      // of two clients taking it over one does; and put back if what moved was no longer that
      // lock but a live client's new one.
      const std::string away = TempName(paths.dir);
      if (wire.PosixRename(lock, away).ok()) {
        Result<LockHolder> moved = LockHolderOf(c, away);
        if (moved.ok() && *moved != *held) {
          (void)sftp_rename(c.sftp(), away.c_str(), lock.c_str());  // never over a newer one
        }
        // (A directory put there is removed too, when empty.)
        if (sftp_unlink(c.sftp(), away.c_str()) != 0) (void)sftp_rmdir(c.sftp(), away.c_str());
        if (options_.log) {
          options_.log(LogLevel::kWarn,
                       std::string(what).append(": took over ") + lock +
                           (holder_gone ? ", left by a mount of this machine that is no longer "
                                          "running (process " +
                                              held->token.substr(held->token.rfind('.') + 1) + ")"
                                        : ", left by a client that stopped while storing it"));
        }
        continue;
      }
      // Not moved: waited for like a live one, within the same bound.
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

bool SftpStore::LockLeftBehind(const std::string& lock, const LockHolder& holder) {
  const auto now = std::chrono::steady_clock::now();
  MutexLock seen(&commit_locks_mu_);
  auto [it, first] = seen_locks_.try_emplace(lock, holder, now);
  if (!first && it->second.first != holder) it->second = {holder, now};  // taken again since
  return now - it->second.second >= options_.stale_commit_lock;
}

Result<bool> SftpStore::CheckCommitLock(SftpConnection& c, const std::string& lock) {
  Result<LockHolder> holder = LockHolderOf(c, lock);
  if (holder.ok()) return holder->token == lock_token() || lock_files_.load();
  if (holder.status().code() == StatusCode::kNotFound) return false;
  return holder.status();
}

void SftpStore::ReleaseCommitLock(SftpConnection& c, const std::string& lock) {
  if (sftp_unlink(c.sftp(), lock.c_str()) == 0) return;
  Status failed = LibsshStatus(c, "remove " + lock);
  // A broken connection leaves it to this store's next commit of the key, which takes it.
  if (failed.code() == StatusCode::kTransient || !options_.log) return;
  options_.log(LogLevel::kWarn, failed.code() == StatusCode::kNotFound
                                    ? lock + " was taken over by another client after " +
                                          std::to_string(options_.stale_commit_lock.count()) +
                                          " ms while this mount stored through it"
                                    : failed.message());
}

bool SftpStore::RenamedBeforeItsReplyWasLost(std::string_view key, bool ours_left,
                                             const ETag& found,
                                             const std::optional<ETag>& content) {
  MutexLock held(&commit_locks_mu_);
  auto it = lost_renames_.find(key);
  if (it == lost_renames_.end()) return false;
  const bool ours =
      ours_left && found == it->second.version && content && it->second.content &&
      *content == *it->second.content &&
      std::chrono::steady_clock::now() - it->second.locked < options_.stale_commit_lock;
  lost_renames_.erase(it);
  return ours;
}

Status SftpStore::Commit(SftpConnection& c, std::string_view key, const KeyPaths& paths,
                         const std::string& staged_data, const ETag& staged_version,
                         const std::optional<ETag>& content, const PutOptions& preconditions) {
  MutexLock lock(&KeyLock(key));
  if (preconditions.if_none_match) {
    // SFTP v3's RENAME fails onto an existing file, and OpenSSH makes it a link(2) of the new
    // name (then an unlink of the old): of two clients creating one name, exactly one
    // succeeds. The STAT before it alone left them the round trip up to a replacing rename,
    // in which both saw the name free and the later one replaced the earlier one's file; it
    // stays for servers whose RENAME replaces.
    Result<ObjectInfo> current = HeadOn(c, key);
    if (current.ok()) {
      return PreconditionFailedError("put " + std::string(key) + ": the object exists");
    }
    if (current.status().code() != StatusCode::kNotFound) return current.status();
    if (sftp_rename(c.sftp(), staged_data.c_str(), paths.data.c_str()) == 0) return Status::Ok();
    Status failed = LibsshStatus(c, "rename " + staged_data + " to " + paths.data);
    Attributes a(sftp_stat(c.sftp(), paths.data.c_str()));
    if (a == nullptr) return failed;
    if (IsDirectory(*a)) {
      return Status(StatusCode::kIsDirectory,
                    "put " + std::string(key) + ": a directory has that name on the server");
    }
    return PreconditionFailedError("put " + std::string(key) + ": the object exists");
  }
  std::optional<std::string> commit_lock;
  auto locked_at = std::chrono::steady_clock::now();
  if (preconditions.if_match) {
    bool ours_left = false;
    OBJFS_ASSIGN_OR_RETURN(commit_lock, TakeCommitLock(c, paths, key, "put", &ours_left));
    if (!ours_left) locked_at = std::chrono::steady_clock::now();
    Result<ObjectInfo> current = HeadOn(c, key);
    // Still this store's, after the STAT and just before the rename: one another client took
    // over meanwhile (this mount stalled for stale_commit_lock) guards that client's commit
    // now, which this one must not go over, nor this store remove. Not known (the connection
    // broke): left to the retry, which takes it again as its own.
    OBJFS_ASSIGN_OR_RETURN(bool still_ours, CheckCommitLock(c, *commit_lock));
    if (!still_ours) {
      return TransientError("put " + std::string(key) + ": another client took over " +
                            *commit_lock + " after it stood for " +
                            std::to_string(options_.stale_commit_lock.count()) +
                            " ms (this mount stalled while storing it)");
    }
    if (current.ok() && current->etag != *preconditions.if_match &&
        RenamedBeforeItsReplyWasLost(key, ours_left, current->etag, content)) {
      // That commit's file is in place: this one's staged copy of the same bytes goes.
      if (options_.log) {
        options_.log(LogLevel::kInfo, "put " + std::string(key) +
                                          ": stored by the rename before, whose reply was lost");
      }
      (void)sftp_unlink(c.sftp(), staged_data.c_str());
      ReleaseCommitLock(c, *commit_lock);
      return Status::Ok();
    }
    Status matches;
    if (!current.ok()) {
      // As on S3: a missing object does not match.
      matches = current.status().code() != StatusCode::kNotFound
                    ? current.status()
                    : PreconditionFailedError("put " + std::string(key) +
                                              ": the object no longer exists");
    } else if (current->etag != *preconditions.if_match) {
      matches = PreconditionFailedError("put " + std::string(key) +
                                        ": the object changed (version " + current->etag.value() +
                                        ", expected " + preconditions.if_match->value() + ")");
    }
    if (!matches.ok()) {
      ReleaseCommitLock(c, *commit_lock);
      return matches;
    }
  }
  Status renamed = Rename(c, staged_data, paths.data);
  if (commit_lock) {
    {
      MutexLock held(&commit_locks_mu_);
      if (renamed.code() == StatusCode::kTransient && !c.healthy()) {
        // It may have gone in: the retry, which finds this lock left, tells.
        lost_renames_[std::string(key)] = LostRename{staged_version, content, locked_at};
      } else {
        lost_renames_.erase(std::string(key));
      }
    }
    ReleaseCommitLock(c, *commit_lock);
  }
  if (!renamed.ok()) {
    Attributes a(sftp_stat(c.sftp(), paths.data.c_str()));
    if (a != nullptr && IsDirectory(*a)) {
      return Status(StatusCode::kIsDirectory,
                    "put " + std::string(key) + ": a directory has that name on the server");
    }
    return renamed;
  }
  return Status::Ok();
}

Result<ObjectInfo> SftpStore::PutDirectory(std::string_view key, const KeyPaths& paths,
                                           uint64_t size, const Metadata& metadata,
                                           const PutOptions& options, const Metadata* before) {
  if (size != 0) {
    return InvalidArgumentError("put " + std::string(key) +
                                ": an SFTP directory cannot hold data (the key names a directory)");
  }
  return WithRetry([&](SftpConnection& c) -> Result<ObjectInfo> {
    MutexLock lock(&KeyLock(key));
    Result<ObjectInfo> current = HeadOn(c, key);
    if (!current.ok() && current.status().code() != StatusCode::kNotFound) {
      return current.status();
    }
    if (options.if_none_match && current.ok()) {
      return PreconditionFailedError("put " + std::string(key) + ": the directory exists");
    }
    if (options.if_match && !current.ok()) {
      return PreconditionFailedError("put " + std::string(key) +
                                     ": the directory no longer exists");
    }
    OBJFS_RETURN_IF_ERROR(MakeDirs(c, paths.data));
    Metadata attributes = metadata;
    if (!ParseMode(attributes)) attributes["mode"] = std::to_string(S_IFDIR | 0755);
    OBJFS_ASSIGN_OR_RETURN(ObjectInfo info,
                           ApplyAttributes(c, key, paths.data, attributes, before));
    info.key = std::string(key);
    info.size = 0;
    info.etag = ETag::FromMd5(Md5Of(std::span<const std::byte>()));  // a marker holds nothing
    return info;
  });
}

Result<ObjectInfo> SftpStore::put(std::string_view key, const ByteSource& source,
                                  const PutOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  if (IsMarker(key)) return PutDirectory(key, paths, source.size(), options.metadata, options);
  OBJFS_ASSIGN_OR_RETURN(SftpSessionPool::Lease lease, pool_.Acquire());
  SftpConnection& c = *lease;
  SftpWire& wire = c.wire();
  const std::string staged = TempName(paths.dir);
  OBJFS_RETURN_IF_ERROR(NoteTemporary(staged, "put " + std::string(key)));
  auto cleanup = [&] { DropTemporary(c, staged); };

  const uint32_t create = kOpenWrite | kOpenCreate | kOpenTruncate | kOpenExclusive;
  Result<SftpWire::Handle> handle = wire.OpenFile(staged, create, 0600);
  if (!handle.ok() && handle.status().code() == StatusCode::kNotFound) {
    Status made = MakeDirs(c, paths.dir);
    if (!made.ok()) {
      cleanup();
      return made;
    }
    handle = wire.OpenFile(staged, create, 0600);
  }
  if (!handle.ok()) {
    cleanup();
    return handle.status().WithContext("put " + std::string(key));
  }

  Md5 md5;
  const uint64_t size = source.size();
  const size_t block = std::max<uint64_t>(wire.limits().max_write, 4096) *
                       static_cast<size_t>(std::max(1, options_.requests_in_flight));
  std::vector<std::byte> buf(std::min<uint64_t>(block, std::max<uint64_t>(size, 1)));
  Status status;
  for (uint64_t offset = 0; offset < size && status.ok();) {
    size_t want = std::min<uint64_t>(buf.size(), size - offset);
    Result<size_t> n = source.read_at(offset, std::span<std::byte>(buf.data(), want));
    if (!n.ok()) {
      status = n.status();
      break;
    }
    if (*n == 0) {
      status = IoError("put " + std::string(key) + ": the source ended early");
      break;
    }
    // Each request's bytes are hashed while the server takes the ones before.
    status = wire.WriteAll(*handle, offset, std::span<const std::byte>(buf.data(), *n),
                           options_.requests_in_flight, [&](std::span<const std::byte> piece) {
                             md5.Update(piece);
                             if (options_.metrics != nullptr) {
                               Bump(options_.metrics->bytes_hashed, piece.size());
                             }
                           });
    offset += *n;
  }
  if (!status.ok()) {
    (void)wire.Close(*handle);
    cleanup();
    return status.WithContext("put " + std::string(key));
  }
  Result<ObjectInfo> staged_info =
      FinishStaged(c, *handle, key, staged, options.metadata, size, paths.data, options.replaced);
  if (!staged_info.ok()) {
    cleanup();
    return staged_info.status().WithContext("put " + std::string(key));
  }
  // The MD5 of exactly the bytes written: the one ETag this store can vouch for.
  const ETag content = ETag::FromMd5(md5.Final());
  status = Commit(c, key, paths, staged, staged_info->etag, content, options);
  if (!status.ok()) {
    cleanup();
    return status;
  }
  if (options_.journal != nullptr) options_.journal->Closed(staged, "");
  ObjectInfo info = std::move(staged_info).value();
  info.etag = content;
  return info;
}

// An upload session over a temporary file (see Upload in object_store.h). Each call borrows a
// connection of its own and opens the file there, so that calls run in parallel.
class SftpStore::Session : public Upload {
 public:
  Session(SftpStore* store, std::string key, KeyPaths paths, std::string staged, uint64_t part_size,
          StagedIdentity identity)
      : store_(store),
        key_(std::move(key)),
        paths_(std::move(paths)),
        staged_(std::move(staged)),
        part_size_(part_size),
        may_leave_md5_(store->MayLeaveMd5ToServer(paths_.data)),
        md5_valid_(!may_leave_md5_ || store->Md5sumOff()),
        identity_(identity) {}
  ~Session() override { (void)abort(); }

  const std::string& key() const override { return key_; }
  uint64_t part_size() const override { return part_size_; }
  bool whole_parts() const override { return false; }
  uint64_t max_size() const override { return 0; }

  Status write(uint64_t offset, const ByteSource& source, uint64_t source_offset,
               uint64_t length) override {
    const std::string what = "write " + key_;
    if (length == 0) return InvalidArgumentError(what + ": an empty range");
    OBJFS_RETURN_IF_ERROR(CheckOpen(what));
    OBJFS_RETURN_IF_ERROR(NoteExtent(what, offset, length));
    Writing writing(this, offset);
    // Sized by the first connection's limits; not zeroed: every byte sent is read into it first.
    std::unique_ptr<std::byte[]> buf;
    size_t buf_size = 0;
    // What this call fed to the MD5: a repeated attempt skips it. `ahead`: where this call's
    // bytes were past the MD5's end, so that it hashes them, from `source` again, once the
    // writes before it have (parts go up in parallel).
    uint64_t hashed_here = offset;
    std::optional<uint64_t> ahead;
    // A repeated write (after a broken connection) rewrites the same bytes.
    Status status = store_->WithRetry([&](SftpConnection& c) -> Status {
      SftpWire& wire = c.wire();
      OBJFS_ASSIGN_OR_RETURN(SftpWire::Handle handle, OpenStaged(wire, staged_, Identity()));
      if (buf == nullptr) {
        const size_t block = std::max<uint64_t>(wire.limits().max_write, 4096) *
                             static_cast<size_t>(std::max(1, store_->options_.requests_in_flight));
        buf_size = std::min<uint64_t>(block, length);
        buf = std::make_unique_for_overwrite<std::byte[]>(buf_size);
      }
      Status st;
      for (uint64_t done = 0; done < length && st.ok();) {
        const size_t want = std::min<uint64_t>(buf_size, length - done);
        Result<size_t> n = source.read_at(source_offset + done, std::span(buf.get(), want));
        if (!n.ok()) {
          st = n.status();
          break;
        }
        if (*n == 0) {
          st = IoError(what + ": the source ended early");
          break;
        }
        const uint64_t at = offset + done;
        // Each request's bytes are hashed while the server takes the ones before.
        uint64_t piece_at = at;
        auto hash = [&](std::span<const std::byte> piece) {
          const uint64_t end = piece_at + piece.size();
          if (!ahead && end > hashed_here) {
            const uint64_t skip = hashed_here - std::min(piece_at, hashed_here);
            if (Hash(hashed_here, piece.subspan(skip))) {
              hashed_here = end;
            } else {
              ahead = hashed_here;
            }
          }
          piece_at = end;
        };
        st = wire.WriteAll(handle, at, std::span<const std::byte>(buf.get(), *n),
                           store_->options_.requests_in_flight, hash);
        done += *n;
      }
      Status closed = wire.Close(handle);
      return st.ok() ? closed : st;
    });
    if (!status.ok()) {
      // Some of its bytes may be on the server, and the range is written again or not at all.
      MutexLock lock(&mu_);
      md5_valid_ = false;
      hashed_changed_.SignalAll();
      return status.WithContext(what);
    }
    if (ahead) {
      HashInTurn(writing, *ahead, offset + length, source, source_offset + (*ahead - offset),
                 std::span(buf.get(), buf_size));
    }
    MutexLock lock(&mu_);
    covered_.Add(offset, offset + length);
    return Status::Ok();
  }

  Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
              uint64_t length) override {
    const std::string what = "copy " + base.key + " into " + key_;
    if (length == 0) return InvalidArgumentError(what + ": an empty range");
    if (!store_->capabilities().copy_ranges) {
      return UnsupportedError(what + ": the server has no copy-data");
    }
    OBJFS_RETURN_IF_ERROR(CheckOpen(what));
    OBJFS_RETURN_IF_ERROR(NoteExtent(what, offset, length));
    OBJFS_ASSIGN_OR_RETURN(KeyPaths base_paths, store_->PathsOf(base.key));
    {
      MutexLock lock(&mu_);
      md5_valid_ = false;  // bytes this machine never saw
      hashed_changed_.SignalAll();
    }
    Status status = store_->WithRetry([&](SftpConnection& c) -> Status {
      SftpWire& wire = c.wire();
      OBJFS_ASSIGN_OR_RETURN(ObjectInfo named, store_->HeadOn(c, base.key));
      OBJFS_RETURN_IF_ERROR(CheckRegular(named, what));
      OBJFS_ASSIGN_OR_RETURN(SftpWire::Handle from, wire.OpenFile(base_paths.data, kOpenRead, 0));
      {
        Result<SftpWire::FileAttrs> opened = wire.Fstat(from);
        Status same = opened.ok() ? CheckOpenedIsNamed(*opened, named, what) : opened.status();
        if (!same.ok()) {
          (void)wire.Close(from);
          return same;
        }
      }
      Result<SftpWire::Handle> to = OpenStaged(wire, staged_, Identity());
      if (!to.ok()) {
        (void)wire.Close(from);
        return to.status();
      }
      // The version of the very file open as `from`, before and after the copy: objfs replaces
      // files by renaming others onto them, so the bytes copied are that version's.
      auto check = [&]() -> Status {
        OBJFS_ASSIGN_OR_RETURN(SftpWire::FileAttrs a, wire.Fstat(from));
        if (!base.etag.empty() && VersionOf(a.size, a.mtime_s) != base.etag) {
          return PreconditionFailedError(what + ": the base changed (version " +
                                         VersionOf(a.size, a.mtime_s).value() + ", expected " +
                                         base.etag.value() + ")");
        }
        if (base_offset + length > a.size) {
          return InvalidArgumentError(what + ": bytes past the end of the base");
        }
        return Status::Ok();
      };
      Status st = check();
      if (st.ok()) {
        SftpSessionPool::SilenceAllowance copying(
            store_->pool_, c, ServerWorkSilence(store_->options_.request_timeout, length));
        st = wire.CopyData(from, base_offset, length, *to, offset);
      }
      if (st.ok()) st = check();
      Status closed_to = wire.Close(*to);
      Status closed_from = wire.Close(from);
      if (!st.ok()) return st;
      return closed_to.ok() ? closed_from : closed_to;
    });
    if (!status.ok()) return status.WithContext(what);
    MutexLock lock(&mu_);
    covered_.Add(offset, offset + length);
    return Status::Ok();
  }

  // cp on the server (CopyWithCp), into the temporary file before anything else is written.
  // Not repeated on a fresh connection: a cp whose connection failed may still be writing.
  Status copy_whole(const ObjectInfo& base) override {
    const std::string what = "copy " + base.key + " into " + key_;
    OBJFS_RETURN_IF_ERROR(CheckOpen(what));
    OBJFS_ASSIGN_OR_RETURN(KeyPaths base_paths, store_->PathsOf(base.key));
    OBJFS_ASSIGN_OR_RETURN(SftpSessionPool::Lease lease, store_->pool_.Acquire());
    SftpConnection& c = *lease;
    // The version of the file at the base's path, before and after the copy: objfs replaces
    // files by renaming others onto them, so the bytes cp copied are that version's.
    auto check = [&]() -> Status {
      Attributes a(sftp_stat(c.sftp(), base_paths.data.c_str()));
      if (a == nullptr) return LibsshStatus(c, what);
      if (a->size != base.size || (!base.etag.empty() && VersionOf(*a) != base.etag)) {
        return PreconditionFailedError(what + ": the base changed (version " +
                                       VersionOf(*a).value() + ", expected " + base.etag.value() +
                                       ")");
      }
      return Status::Ok();
    };
    OBJFS_RETURN_IF_ERROR(check());
    OBJFS_RETURN_IF_ERROR(NoteExtent(what, 0, base.size));
    {
      MutexLock lock(&mu_);
      md5_valid_ = false;  // bytes this machine never saw
      hashed_changed_.SignalAll();
    }
    const bool copy_data =
        store_->options_.use_copy_data && c.wire().HasExtension("copy-data", "1");
    StagedIdentity identity = Identity();
    Result<CpOutcome> copied =
        store_->CopyWithCp(c, base_paths.data, staged_, base.size, copy_data, &identity);
    if (!copied.ok()) {
      MutexLock lock(&mu_);
      cp_may_run_ = true;
      return copied.status().WithContext(what + " (cp may still be writing the temporary file)");
    }
    if (*copied != CpOutcome::kNotRun) {
      MutexLock lock(&mu_);
      identity_ = identity;  // cp made the file anew (or objfs did, after cp)
    }
    if (*copied != CpOutcome::kCopied) {
      return UnsupportedError(what + ": cp does not copy on this server");
    }
    OBJFS_RETURN_IF_ERROR(check());
    MutexLock lock(&mu_);
    covered_.Add(0, base.size);
    return Status::Ok();
  }

  Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) override {
    const std::string what = "complete " + key_;
    uint64_t extent = 0;
    std::optional<ETag> md5;
    {
      MutexLock lock(&mu_);
      if (finished_) return InvalidArgumentError(what + ": the upload is finished");
      finished_ = true;  // completed now, or the temporary file is removed
      if (!covered_.Covers(size)) {
        Status gap = InvalidArgumentError(what + ": nothing was written at " +
                                          std::to_string(covered_.FirstGap(size)));
        lock.Unlock();
        (void)Drop();
        return gap;
      }
      extent = extent_;
      if (md5_valid_ && hashed_ == size) md5 = ETag::FromMd5(md5_.Final());
    }
    Result<ObjectInfo> info = store_->WithRetry([&](SftpConnection& c) -> Result<ObjectInfo> {
      SftpWire& wire = c.wire();
      OBJFS_ASSIGN_OR_RETURN(SftpWire::Handle handle, OpenStaged(wire, staged_, Identity()));
      if (extent > size) {
        if (Status cut = wire.Truncate(handle, size); !cut.ok()) {
          (void)wire.Close(handle);
          return cut;
        }
      }
      OBJFS_ASSIGN_OR_RETURN(ObjectInfo staged,
                             store_->FinishStaged(c, handle, key_, staged_, options.metadata, size,
                                                  paths_.data, options.replaced));
      OBJFS_RETURN_IF_ERROR(store_->Commit(c, key_, paths_, staged_, staged.etag, md5, options));
      return staged;
    });
    if (!info.ok()) {
      (void)Drop();
      return info.status().WithContext(what);
    }
    if (store_->options_.journal != nullptr) store_->options_.journal->Closed(staged_, "");
    // After the upload, not beside it: the check costs the server a shell's start, which would
    // slow the upload down on a busy machine.
    if (may_leave_md5_) store_->StartMd5Probe(paths_.dir);
    // The MD5 of exactly the bytes written, when all of them passed here in order; else the
    // version (ContentEtagStore hashes the file when asked).
    if (md5) info->etag = *md5;
    return info;
  }

  Status abort() override {
    {
      MutexLock lock(&mu_);
      if (finished_) return Status::Ok();
      finished_ = true;
      // A cp that may still write the file would make it again once removed: it stays, with
      // its note in the journal, and the next mount removes it.
      if (cp_may_run_) return Status::Ok();
    }
    return Drop();
  }

 private:
  // The end of the range a call is about to send: a call that fails part-way may leave bytes
  // there, which complete() cuts. A range past uint64 is refused.
  Status NoteExtent(const std::string& what, uint64_t offset, uint64_t length) {
    if (offset > UINT64_MAX - length) return InvalidArgumentError(what + ": a range past 2^64");
    MutexLock lock(&mu_);
    extent_ = std::max(extent_, offset + length);
    return Status::Ok();
  }

  Status CheckOpen(const std::string& what) {
    MutexLock lock(&mu_);
    if (finished_) return InvalidArgumentError(what + ": the upload is finished");
    return Status::Ok();
  }

  // A write() in progress, from `offset` on: the writes that wait to hash their bytes in turn
  // wait for it.
  class Writing {
   public:
    Writing(Session* session, uint64_t offset) : session_(session) {
      MutexLock lock(&session_->mu_);
      it_ = session_->writing_.insert(offset);
    }
    ~Writing() {
      MutexLock lock(&session_->mu_);
      session_->writing_.erase(it_);
      session_->hashed_changed_.SignalAll();
    }
    Writing(const Writing&) = delete;
    Writing& operator=(const Writing&) = delete;
    std::multiset<uint64_t>::const_iterator entry() const { return it_; }

   private:
    Session* session_;
    std::multiset<uint64_t>::iterator it_;
  };

  // Feeds bytes on their way to `offset` to the running MD5 when they continue it. False when
  // they lie past its end (to be hashed in turn); bytes before its end, written again, leave
  // the MD5 unknown.
  bool Hash(uint64_t offset, std::span<const std::byte> data) {
    MutexLock lock(&mu_);
    if (!md5_valid_) return true;
    if (offset > hashed_) return false;
    if (offset < hashed_) {
      md5_valid_ = false;  // written twice: the MD5 stays unknown
      hashed_changed_.SignalAll();
      return true;
    }
    HashLocked(data);
    return true;
  }

  void HashLocked(std::span<const std::byte> data) REQUIRES(mu_) {
    md5_.Update(data);
    hashed_ += data.size();
    hashed_changed_.SignalAll();
    if (store_->options_.metrics != nullptr)
      Bump(store_->options_.metrics->bytes_hashed, data.size());
  }

  // Hashes [from, to) of the object, read again from `source` at `source_from`, once the MD5
  // has reached `from`: waits while another write() that begins before `from` (`self` is the
  // caller's own) is in progress. Those bytes were sent already, so only this call waits, not
  // the upload. When no such write is left and the MD5 ends before `from`, the MD5 stays short
  // of the object (complete() then returns none).
  void HashInTurn(const Writing& self, uint64_t from, uint64_t to, const ByteSource& source,
                  uint64_t source_from, std::span<std::byte> buf) {
    {
      MutexLock lock(&mu_);
      while (md5_valid_ && hashed_ < from && OtherWriteBeforeLocked(self, from)) {
        hashed_changed_.Wait(&mu_);
      }
      if (!md5_valid_ || hashed_ < from) return;
      if (hashed_ > from) {
        md5_valid_ = false;  // another write hashed some of these bytes
        hashed_changed_.SignalAll();
        return;
      }
    }
    for (uint64_t at = from; at < to;) {
      const size_t want = std::min<uint64_t>(buf.size(), to - at);
      Result<size_t> n = source.read_at(source_from + (at - from), buf.first(want));
      MutexLock lock(&mu_);
      if (!n.ok() || *n == 0 || !md5_valid_ || hashed_ != at) {
        md5_valid_ = false;  // these bytes, sent already, cannot be hashed in turn now
        hashed_changed_.SignalAll();
        return;
      }
      HashLocked(buf.first(*n));
      at += *n;
    }
  }

  bool OtherWriteBeforeLocked(const Writing& self, uint64_t offset) REQUIRES(mu_) {
    for (auto it = writing_.cbegin(); it != writing_.cend() && *it < offset; ++it) {
      if (it != self.entry()) return true;
    }
    return false;
  }

  // Removes the temporary file, and its note once it is gone.
  Status Drop() {
    Status removed = store_->RemoveTemporary(staged_);
    if (removed.ok() && store_->options_.journal != nullptr) {
      store_->options_.journal->Closed(staged_, "");
    }
    return removed;
  }

  SftpStore* store_;
  const std::string key_;
  const KeyPaths paths_;
  const std::string staged_;
  StagedIdentity Identity() {
    MutexLock lock(&mu_);
    return identity_;
  }

  const uint64_t part_size_;
  Mutex mu_;  // lock 25 of fs/lock_order.h: guards the fields below
  bool finished_ GUARDED_BY(mu_) = false;
  UploadRanges covered_ GUARDED_BY(mu_);
  uint64_t extent_ GUARDED_BY(mu_) = 0;  // the end of the furthest range sent, or tried
  Md5 md5_ GUARDED_BY(mu_);
  uint64_t hashed_ GUARDED_BY(mu_) = 0;
  // The MD5 is left to the server unless md5sum there is known not to answer right.
  const bool may_leave_md5_;
  bool md5_valid_ GUARDED_BY(mu_);           // false: the MD5 stays unknown
  bool cp_may_run_ GUARDED_BY(mu_) = false;  // copy_whole's cp failed with its outcome unknown
  StagedIdentity identity_ GUARDED_BY(mu_);  // of the temporary file (remade by cp)
  std::multiset<uint64_t> writing_ GUARDED_BY(mu_);  // where the write() calls in progress begin
  CondVar hashed_changed_;                           // hashed_, md5_valid_ or writing_ changed
};

Result<std::unique_ptr<Upload>> SftpStore::start_upload(std::string_view key,
                                                        const UploadOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  if (IsMarker(key)) {
    return InvalidArgumentError("upload " + std::string(key) + ": a directory holds no data");
  }
  const std::string what = "upload " + std::string(key);
  const std::string staged = TempName(paths.dir);
  OBJFS_RETURN_IF_ERROR(NoteTemporary(staged, what));
  StagedIdentity identity;
  int attempts = 0;
  Status created = WithRetry([&](SftpConnection& c) -> Status {
    SftpWire& wire = c.wire();
    // A try before this one may have made the file: only a file made here, never one (or a
    // link) that took the name meanwhile, is written.
    if (attempts++ > 0 && sftp_unlink(c.sftp(), staged.c_str()) != 0) {
      Status gone = LibsshStatus(c, "remove " + staged);
      if (gone.code() != StatusCode::kNotFound) return gone;
    }
    const uint32_t create = kOpenWrite | kOpenCreate | kOpenTruncate | kOpenExclusive;
    Result<SftpWire::Handle> handle = wire.OpenFile(staged, create, 0600);
    if (!handle.ok() && handle.status().code() == StatusCode::kNotFound) {
      OBJFS_RETURN_IF_ERROR(MakeDirs(c, paths.dir));
      handle = wire.OpenFile(staged, create, 0600);
    }
    if (!handle.ok()) return handle.status();
    Result<StagedIdentity> marked = MarkStaged(wire, *handle);
    Status closed = wire.Close(*handle);
    if (!marked.ok()) return marked.status();
    identity = *marked;
    return closed;
  });
  if (!created.ok()) {
    if (RemoveTemporary(staged).ok() && options_.journal != nullptr) {
      options_.journal->Closed(staged, "");
    }
    return created.WithContext(what);
  }
  constexpr uint64_t kDefaultPartSize = 8 << 20;
  const uint64_t part_size = options.part_size != 0 ? options.part_size : kDefaultPartSize;
  return std::unique_ptr<Upload>(std::make_unique<Session>(this, std::string(key), std::move(paths),
                                                           staged, part_size, identity));
}

Result<ObjectInfo> SftpStore::copy(const ObjectInfo& src, std::string_view dst,
                                   const CopyOptions& options) {
  bool cp_unknown = false;
  Result<ObjectInfo> copied = CopyFile(src, dst, options, /*may_cp=*/true, &cp_unknown);
  // cp may still be writing the first temporary file (left, noted, for the next mount): once
  // more under another name, without cp (whatever broke it may break it again; a cp that has
  // worked stays on for the copies after this one when only its connection broke).
  if (cp_unknown) copied = CopyFile(src, dst, options, /*may_cp=*/false, &cp_unknown);
  return copied;
}

Result<ObjectInfo> SftpStore::CopyFile(const ObjectInfo& src, std::string_view dst,
                                       const CopyOptions& options, bool may_cp, bool* cp_unknown) {
  OBJFS_ASSIGN_OR_RETURN(KeyPaths src_paths, PathsOf(src.key));
  OBJFS_ASSIGN_OR_RETURN(KeyPaths dst_paths, PathsOf(dst));
  if (IsMarker(src.key) || IsMarker(dst)) {
    if (!IsMarker(src.key) || !IsMarker(dst)) {
      return InvalidArgumentError("copy " + src.key + " to " + std::string(dst) +
                                  ": a directory marker copies only to a directory marker");
    }
    // The copy of a directory marker is the directory, with the source's attributes.
    OBJFS_ASSIGN_OR_RETURN(ObjectInfo current, head(src.key));
    PutOptions put;
    put.metadata = options.replace_metadata ? *options.replace_metadata : current.metadata;
    return PutDirectory(dst, dst_paths, 0, put.metadata, put);
  }
  OBJFS_ASSIGN_OR_RETURN(SftpSessionPool::Lease lease, pool_.Acquire());
  SftpConnection& c = *lease;
  SftpWire& wire = c.wire();
  const std::string what = "copy " + src.key + " to " + std::string(dst);

  // Open the source and check that it is still the version the caller saw, under its lock. A
  // content MD5 as src.etag cannot be checked here (only ContentEtagStore can): it never
  // matches.
  const bool copy_data = options_.use_copy_data && wire.HasExtension("copy-data", "1");
  ObjectInfo current;
  SftpWire::Handle src_handle;
  {
    MutexLock lock(&KeyLock(src.key));
    OBJFS_ASSIGN_OR_RETURN(current, HeadOn(c, src.key));
    // Not opened unless a regular file (a FIFO would hold the server's open).
    OBJFS_RETURN_IF_ERROR(CheckRegular(current, what));
    if (options.if_match_source && !src.etag.empty() && current.etag != src.etag) {
      return PreconditionFailedError(what + ": the source changed (version " +
                                     current.etag.value() + ", expected " + src.etag.value() + ")");
    }
    Result<SftpWire::Handle> h = wire.OpenFile(src_paths.data, kOpenRead, 0);
    if (!h.ok()) return h.status().WithContext(what);
    src_handle = std::move(h).value();
    Result<SftpWire::FileAttrs> opened = wire.Fstat(src_handle);
    Status same = opened.ok() ? CheckOpenedIsNamed(*opened, current, what) : opened.status();
    if (!same.ok()) {
      (void)wire.Close(src_handle);
      return same;
    }
  }

  const std::string staged = TempName(dst_paths.dir);
  if (Status noted = NoteTemporary(staged, what); !noted.ok()) {
    (void)wire.Close(src_handle);
    return noted;
  }
  auto cleanup = [&] { DropTemporary(c, staged); };
  const uint32_t create = kOpenWrite | kOpenCreate | kOpenTruncate | kOpenExclusive;
  Result<SftpWire::Handle> dst_handle = wire.OpenFile(staged, create, 0600);
  if (!dst_handle.ok() && dst_handle.status().code() == StatusCode::kNotFound) {
    Status made = MakeDirs(c, dst_paths.dir);
    if (!made.ok()) {
      (void)wire.Close(src_handle);
      cleanup();
      return made;
    }
    dst_handle = wire.OpenFile(staged, create, 0600);
  }
  if (!dst_handle.ok()) {
    (void)wire.Close(src_handle);
    cleanup();
    return dst_handle.status().WithContext(what);
  }

  ETag etag;
  Status status;
  uint64_t copied = current.size;
  StagedIdentity identity;
  const bool try_cp = may_cp && MayRunCp(current.size);
  if (try_cp) {
    // cp makes the file anew: what it made must be this account's.
    Result<SftpWire::FileAttrs> made = wire.Fstat(*dst_handle);
    if (!made.ok()) {
      (void)wire.Close(*dst_handle);
      (void)wire.Close(src_handle);
      cleanup();
      return made.status().WithContext(what);
    }
    identity.uid = made->uid;
    identity.made_s = made->mtime_s;
  }
  Result<CpOutcome> by_cp =
      try_cp ? CopyWithCp(c, src_paths.data, staged, current.size, copy_data, &identity)
             : Result<CpOutcome>(CpOutcome::kNotRun);
  if (!by_cp.ok()) {
    // cp may still be writing the temporary file: it stays, noted, for the next mount.
    (void)wire.Close(*dst_handle);
    (void)wire.Close(src_handle);
    *cp_unknown = true;
    return by_cp.status().WithContext(what);
  }
  if (*by_cp != CpOutcome::kNotRun) {
    // cp made the temporary file anew: the handle is the one it removed.
    (void)wire.Close(*dst_handle);
    dst_handle = OpenStaged(wire, staged, identity);
    if (!dst_handle.ok()) {
      (void)wire.Close(src_handle);
      cleanup();
      return dst_handle.status().WithContext(what);
    }
  }
  if (*by_cp == CpOutcome::kCopied) {
    // The bytes are the source's: a content MD5 the caller vouches for stays true.
    if (src.etag.is_plain_md5()) etag = src.etag;
  } else if (copy_data) {
    // The server copies the whole file before it answers.
    SftpSessionPool::SilenceAllowance copying(
        pool_, c, ServerWorkSilence(options_.request_timeout, current.size));
    status = wire.CopyData(src_handle, 0, 0, *dst_handle, 0);
    // The bytes are the source's: a content MD5 the caller vouches for stays true.
    if (src.etag.is_plain_md5()) etag = src.etag;
  } else {
    // Stream through this machine, hashing on the way.
    Md5 md5;
    const uint32_t chunk =
        static_cast<uint32_t>(std::clamp<uint64_t>(wire.limits().max_read, 4096, 4u << 20));
    std::vector<std::byte> buf(static_cast<size_t>(chunk) *
                               static_cast<size_t>(std::max(1, options_.requests_in_flight)));
    copied = 0;
    while (status.ok()) {
      Result<size_t> n =
          wire.Read(src_handle, copied, buf, chunk, options_.requests_in_flight,
                    options_.metrics != nullptr ? &options_.metrics->sftp_read_requests : nullptr);
      if (!n.ok()) {
        status = n.status();
        break;
      }
      if (*n == 0) break;
      std::span<const std::byte> data(buf.data(), *n);
      md5.Update(data);
      if (options_.metrics != nullptr) Bump(options_.metrics->bytes_hashed, *n);
      status = wire.WriteAll(*dst_handle, copied, data, options_.requests_in_flight);
      copied += *n;
    }
    etag = ETag::FromMd5(md5.Final());
  }
  if (status.ok()) {
    // The version checked before the copy must still be the source's after it: what was
    // copied is then that version (a source replaced by a rename between the check and the
    // open would otherwise pass with the old version's MD5).
    Attributes after(sftp_stat(c.sftp(), src_paths.data.c_str()));
    if (after == nullptr) {
      status = LibsshStatus(c, what);
    } else if (VersionOf(*after) != current.etag) {
      status = PreconditionFailedError(what + ": the source changed during the copy");
    }
  }
  Status closed_src = wire.Close(src_handle);
  if (status.ok()) status = closed_src;
  if (!status.ok()) {
    (void)wire.Close(*dst_handle);
    cleanup();
    return status.WithContext(what);
  }
  // Without replaced metadata the copy keeps the source's mode and mtime. Durable (fsync)
  // before it replaces anything: a rename's source is removed right after.
  const Metadata& metadata =
      options.replace_metadata ? *options.replace_metadata : current.metadata;
  Result<ObjectInfo> staged_info = FinishStaged(c, *dst_handle, dst, staged, metadata, copied);
  if (!staged_info.ok()) {
    cleanup();
    return staged_info.status().WithContext(what);
  }
  status = Commit(c, dst, dst_paths, staged, staged_info->etag, std::nullopt, PutOptions{});
  if (!status.ok()) {
    cleanup();
    return status;
  }
  if (options_.journal != nullptr) options_.journal->Closed(staged, "");
  ObjectInfo info = std::move(staged_info).value();
  info.etag = etag;
  return info;
}

Result<ObjectInfo> SftpStore::set_attributes(std::string_view key, const Metadata& metadata,
                                             const SetAttributesOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  const ObjectInfo& expected = options.expected;
  if (IsMarker(key)) {
    // New attributes of the directory itself (chmod, chown, touch): compared with what the
    // caller saw, as for a file. A directory that is gone is not made again.
    OBJFS_RETURN_IF_ERROR(head(key).status());
    PutOptions put;
    put.metadata = metadata;
    return PutDirectory(key, paths, 0, metadata, put, &expected.metadata);
  }
  return WithRetry([&](SftpConnection& c) -> Result<ObjectInfo> {
    MutexLock lock(&KeyLock(key));
    // A file the caller itself wrote or changed moments ago is not looked at first (as on
    // S3): rsync's utimens and chmod of the file it just closed are one round trip each.
    if (!expected.etag.empty() && !options.source_known_current) {
      OBJFS_ASSIGN_OR_RETURN(ObjectInfo current, HeadOn(c, key));
      if (current.etag != expected.etag) {
        return PreconditionFailedError("set attributes of " + std::string(key) +
                                       ": the file changed (version " + current.etag.value() +
                                       ", expected " + expected.etag.value() + ")");
      }
    }
    return ApplyAttributes(c, key, paths.data, metadata, &expected.metadata);
  });
}

Status SftpStore::DirectoryKept(SftpConnection& c, std::string_view key, const std::string& dir) {
  Status refused = LibsshStatus(c, "remove the directory " + std::string(key));
  if (refused.code() == StatusCode::kNotFound) return Status::Ok();
  // As an object store keeps a prefix while other keys are under it, a directory that holds
  // other objects stays: not a failure (a tree's removal takes the marker before the files).
  // One that holds none the mount shows did not go for a reason of the server's: said.
  sftp_dir listed = sftp_opendir(c.sftp(), dir.c_str());
  if (listed == nullptr) return refused;
  const std::string temporary = std::string(kReservedPrefix) + "tmp-";
  size_t temporaries = 0;
  std::string hidden;  // another reserved name, which the mount does not show either
  bool others = false;
  while (Attributes a{sftp_readdir(c.sftp(), listed)}) {
    std::string_view name = a->name != nullptr ? a->name : "";
    if (name.empty() || name == "." || name == "..") continue;
    if (StartsWith(name, temporary)) {
      ++temporaries;
    } else if (!StartsWith(name, kReservedPrefix)) {
      others = true;
    } else if (name != kMarkerFile && hidden.empty()) {
      hidden = name;
    }
  }
  const bool complete = sftp_dir_eof(listed) != 0;
  sftp_closedir(listed);
  if (!c.healthy()) return TransientError("remove " + std::string(key) + ": connection lost");
  if (!complete) return refused;
  if (others) return Status::Ok();
  if (temporaries != 0) {
    return NotEmptyError("remove the directory " + std::string(key) + ": it holds " +
                         std::to_string(temporaries) + " temporary files of uploads (" + temporary +
                         "*: in flight, or left by a mount that was killed, which the next "
                         "mount over its cache_dir removes)");
  }
  if (!hidden.empty()) {
    return NotEmptyError("remove the directory " + std::string(key) + ": it holds " + hidden +
                         ", a name objfs keeps for its own files and does not show, which "
                         "another program made there");
  }
  // Emptied since (by another client), or refused for a reason of the server's: once more.
  if (sftp_rmdir(c.sftp(), dir.c_str()) == 0) return Status::Ok();
  if (!c.healthy()) return TransientError("remove " + std::string(key) + ": connection lost");
  refused = LibsshStatus(c, "remove the directory " + std::string(key));
  if (refused.code() == StatusCode::kNotFound) return Status::Ok();
  return refused;
}

Status SftpStore::remove(std::string_view key) {
  if (key == "/") return InvalidKey(key);  // the mount's root is never removed
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  return WithRetry([&](SftpConnection& c) -> Status {
    MutexLock lock(&KeyLock(key));
    if (!IsMarker(key) && sftp_unlink(c.sftp(), paths.data.c_str()) != 0) {
      Status status = LibsshStatus(c, "remove " + std::string(key));
      if (status.code() != StatusCode::kNotFound) {
        // Removing a key that names a directory removes no object (a link is an object).
        Attributes a(sftp_lstat(c.sftp(), paths.data.c_str()));
        if (a == nullptr || !IsDirectory(*a)) return status;
      }
    }
    if (IsMarker(key)) {
      // (Earlier versions kept an empty marker file in it.)
      sftp_unlink(c.sftp(), (paths.dir + "/" + std::string(kMarkerFile)).c_str());
      if (sftp_rmdir(c.sftp(), paths.dir.c_str()) != 0 && c.healthy()) {
        return DirectoryKept(c, key, paths.dir);
      }
    }
    if (!c.healthy()) return TransientError("remove " + std::string(key) + ": connection lost");
    return Status::Ok();
  });
}

Status SftpStore::remove_if_match(std::string_view key, const ETag& etag, bool /*known_current*/) {
  if (IsMarker(key)) return InvalidKey(key);  // a version names a file
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  return WithRetry([&](SftpConnection& c) -> Status {
    MutexLock lock(&KeyLock(key));
    // Under the key's commit lock, as a put with If-Match: another objfs client's conditional
    // commit waits for it (any other SFTP client is left the round trip from the STAT on).
    bool ours_left = false;
    OBJFS_ASSIGN_OR_RETURN(std::string commit_lock,
                           TakeCommitLock(c, paths, key, "remove", &ours_left));
    Result<ObjectInfo> current = HeadOn(c, key);
    Status done;
    bool taken_over = false;  // then the lock is the other client's, and stays
    if (!current.ok()) {
      if (current.status().code() != StatusCode::kNotFound) done = current.status();
    } else if (current->etag != etag) {
      done = PreconditionFailedError("remove " + std::string(key) + ": another version is there (" +
                                     current->etag.value() + ", expected " + etag.value() + ")");
    } else if (Result<bool> still_ours = CheckCommitLock(c, commit_lock); !still_ours.ok()) {
      done = still_ours.status();
    } else if (!*still_ours) {
      taken_over = true;
      done = TransientError("remove " + std::string(key) + ": another client took over " +
                            commit_lock + " (this mount stalled while removing it)");
    } else if (sftp_unlink(c.sftp(), paths.data.c_str()) != 0) {
      done = LibsshStatus(c, "remove " + std::string(key));
      if (done.code() == StatusCode::kNotFound) done = Status::Ok();
    }
    if (!taken_over) ReleaseCommitLock(c, commit_lock);
    if (!c.healthy()) return TransientError("remove " + std::string(key) + ": connection lost");
    return done;
  });
}

Result<ObjectInfo> SftpStore::symlink(std::string_view key, std::string_view target,
                                      const PutOptions& options) {
  if (IsMarker(key))
    return InvalidArgumentError("a link cannot be a directory: " + std::string(key));
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  const std::string to(target);
  if (to.empty() || to.find('\0') != std::string::npos) {
    return InvalidArgumentError("symlink " + std::string(key) + ": not a valid link target");
  }
  return WithRetry([&](SftpConnection& c) -> Result<ObjectInfo> {
    MutexLock lock(&KeyLock(key));
    OBJFS_RETURN_IF_ERROR(MakeDirs(c, paths.dir));
    // The server makes the link: any SFTP or shell user sees a link, and its owner and times
    // are the server's.
    if (sftp_symlink(c.sftp(), to.c_str(), paths.data.c_str()) != 0) {
      Status failed = LibsshStatus(c, "symlink " + std::string(key));
      Attributes there(sftp_lstat(c.sftp(), paths.data.c_str()));
      if (there == nullptr) return failed;
      // The same link already: an earlier attempt whose reply the dropped connection lost.
      char* existing =
          S_ISLNK(there->permissions) ? sftp_readlink(c.sftp(), paths.data.c_str()) : nullptr;
      const bool same = existing != nullptr && to == existing;
      if (existing != nullptr) ssh_string_free_char(existing);
      if (!same) return AlreadyExistsError("symlink " + std::string(key) + ": exists");
    }
    if (options_.owner_from_caller && c.wire().HasExtension("lsetstat@openssh.com", "1")) {
      // The link's own owner, its creator's (the link has no mode of its own).
      SftpWire::NewAttrs attrs = NewAttrsOf(options.metadata);
      attrs.permissions.reset();
      KeepOwner(options.metadata, &attrs);
      if (attrs.owner) {
        Result<SftpWire::FileAttrs> set = c.wire().LSetStat(paths.data, attrs);
        // The link is made either way: a refusal is said once, a broken connection retried.
        if (!set.ok() && OwnerRefusal(set.status())) {
          OwnerRefused(std::string(key), set.status());
        } else if (!set.ok()) {
          return set.status();
        }
      }
    }
    Attributes a(sftp_lstat(c.sftp(), paths.data.c_str()));
    if (a == nullptr) return LibsshStatus(c, "stat " + std::string(key));
    return InfoFromAttributes(key, *a);
  });
}

Result<std::string> SftpStore::read_link(std::string_view key) {
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  return WithRetry([&](SftpConnection& c) -> Result<std::string> {
    char* target = sftp_readlink(c.sftp(), paths.data.c_str());
    if (target == nullptr) return LibsshStatus(c, "readlink " + std::string(key));
    std::string out(target);
    ssh_string_free_char(target);
    return out;
  });
}

namespace {

// Whether `path` between single quotes is itself and nothing else to any shell an account may
// have: letters, digits, the bytes of UTF-8 sequences, space and `._,+=@:/-`. Quotes, `$`,
// backquotes, backslashes, `%`, `!`, `&`, `|`, `<`, `>`, `^`, parentheses and control
// characters (a newline ends a command in csh even between quotes) all mean something to some
// shell, cmd.exe's among them.
bool QuotableForAnyShell(std::string_view path) {
  if (path.empty()) return false;
  constexpr std::string_view kPunctuation = "._,+=@:/- ";
  return std::all_of(path.begin(), path.end(), [&](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'A' && u <= 'Z') ||
           (u >= 'a' && u <= 'z') || kPunctuation.find(c) != std::string_view::npos;
  });
}

// The digest in GNU md5sum's line for the file `path`: 32 hex digits, a space, a space or `*`,
// the path as given, a newline. nullopt for anything else (a shell that prints a banner, an
// SFTP server's silence, a shell that read the path as another one).
OptionalMd5 ParseMd5sumLine(std::string_view out, std::string_view path) {
  if (out.size() != 32 + 2 + path.size() + 1 || out[32] != ' ' ||
      (out[33] != ' ' && out[33] != '*') || out.substr(34, path.size()) != path ||
      out.back() != '\n') {
    return std::nullopt;
  }
  std::array<uint8_t, 16> digest{};
  for (size_t i = 0; i < 32; ++i) {
    const char c = out[i];
    int v = -1;
    if (c >= '0' && c <= '9') v = c - '0';
    if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    if (v < 0) return std::nullopt;
    digest[i / 2] = static_cast<uint8_t>((digest[i / 2] << 4) | v);
  }
  return digest;
}

struct ServerCommand {
  bool started = false;  // false: the server refused the channel or the command
  // Its exit status; -1 when unknown (killed by a signal, or none came in time).
  int exit_status = -1;
  std::string out;       // the first bytes of its standard output
  bool out_cut = false;  // it wrote more than that
};

// How long md5sum on the server may take for a file of `size` bytes: request_timeout, and the
// file read at kServerWorkMinRate.
std::chrono::milliseconds Md5sumTime(std::chrono::milliseconds request_timeout, uint64_t size) {
  return request_timeout +
         std::chrono::seconds((size + kServerWorkMinRate - 1) / kServerWorkMinRate);
}

// Runs `command` on the server on a channel of its own over `c`'s connection, with its
// standard input closed, and keeps up to `max_out` bytes of its standard output (its standard
// error is read and dropped, so that it never holds the command up). Transient, with the
// connection marked broken so that it is not used again (the caller's retry makes a new one),
// when the connection failed or an answer did not come in time; TimedOut, with the connection
// marked broken too, when the command ran past `deadline` (not retried: it would take as long
// again). The watchdog also cuts a command silent for longer than its allowance.
Result<ServerCommand> RunOnServer(SftpConnection& c, const std::string& command, size_t max_out,
                                  DeadlineClock::time_point deadline) {
  ssh_session ssh = c.ssh();
  ServerCommand result;
  ssh_channel channel = ssh_channel_new(ssh);
  if (channel == nullptr) return TransientError("cannot create an SSH channel");
  auto broken = [&](const std::string& what) -> Status {
    c.MarkBroken();  // the channel's state on the server is unknown: never reused
    return TransientError(what + ": " + ssh_get_error(ssh));
  };
  int rc = ssh_channel_open_session(channel);
  if (rc == SSH_OK) rc = ssh_channel_request_exec(channel, command.c_str());
  if (rc != SSH_OK) {
    ssh_channel_free(channel);
    // SSH_AGAIN: no answer in time. Only an answer that says no is a refusal.
    if (rc != SSH_ERROR || ssh_is_connected(ssh) == 0 || c.marked_broken()) {
      return broken("running a command on the server");
    }
    return result;
  }
  result.started = true;
  Status status;
  if (ssh_channel_send_eof(channel) != SSH_OK) status = broken("closing the command's input");
  char buf[4096];
  // Standard error is read and dropped, up to this much: a command that says more is not the
  // one asked for.
  constexpr size_t kMostStderr = 64 << 10;
  size_t stderr_bytes = 0;
  while (status.ok()) {
    // Standard error first: a channel is at its end only once both streams are read.
    for (int got; stderr_bytes <= kMostStderr &&
                  (got = ssh_channel_read_nonblocking(channel, buf, sizeof buf, 1)) > 0;) {
      stderr_bytes += static_cast<size_t>(got);
    }
    const int n = ssh_channel_read_timeout(channel, buf, sizeof buf, /*is_stderr=*/0, 1000);
    if (n == SSH_ERROR || ssh_is_connected(ssh) == 0 || c.marked_broken()) {
      status = broken("reading the command's output");
    } else if (n > 0) {
      const size_t keep = std::min<size_t>(static_cast<size_t>(n), max_out - result.out.size());
      result.out.append(buf, keep);
      // More than the answer can be: not read on (the channel is left as it is, and with it
      // the connection).
      if (keep < static_cast<size_t>(n)) {
        result.out_cut = true;
        c.MarkBroken();
        break;
      }
    } else if (ssh_channel_poll(channel, /*is_stderr=*/0) == SSH_EOF &&
               ssh_channel_poll(channel, /*is_stderr=*/1) == SSH_EOF) {
      break;
    }
    if (status.ok() && stderr_bytes > kMostStderr) {
      result.out_cut = true;
      c.MarkBroken();
      break;
    }
    if (status.ok() && DeadlineClock::now() >= deadline) {
      // Not Transient: the connection is sound, the command is slow, and running it again
      // would wait as long again.
      c.MarkBroken();  // the command may still be running: the connection is not reused
      status = TimedOutError("the command on the server ran past its time");
    }
  }
  if (status.ok() && !result.out_cut) {
    result.exit_status = ssh_channel_get_exit_status(channel);
    if (ssh_is_connected(ssh) == 0 || c.marked_broken()) {
      status = broken("waiting for the command's exit status");
    }
  }
  ssh_channel_close(channel);
  ssh_channel_free(channel);
  if (!status.ok()) return status;
  return result;
}

}  // namespace

Result<OptionalMd5> SftpStore::server_md5(std::string_view key, uint64_t size) {
  if (!options_.server_md5 || server_md5_state_.load() == kServerCommandOff) return OptionalMd5();
  // Small, or empty (as SFTP shows a FIFO or a device too, on which md5sum would wait): read
  // here sooner.
  if (size == 0 || size < options_.server_md5_min_size) return OptionalMd5();
  OBJFS_ASSIGN_OR_RETURN(KeyPaths paths, PathsOf(key));
  if (!QuotableForAnyShell(paths.data)) return OptionalMd5();
  // A connection hashing on the server serves nothing else meanwhile: at most half of them do
  // (none of one). A call that finds them all hashing waits for one, as long as md5sum may take
  // on this file, rather than read it here at once: that costs the whole file on the wire and
  // its hash here (a dozen getfattr at once read each file back, up to three times its size).
  if (md5_slots_ == nullptr ||
      !md5_slots_->try_acquire_for(
          std::min(options_.operation_timeout, Md5sumTime(options_.request_timeout, size)))) {
    return OptionalMd5();
  }
  struct Running {
    Md5Slots& slots;
    ~Running() { slots.release(); }
  } running{*md5_slots_};
  // Not checked yet (no streamed upload of this mount probed it): checked on this file, below.
  // A read never writes a probe: a getfattr must not change a directory, nor write on a
  // read-only mount.
  const bool trusted = server_md5_state_.load() == kServerCommandTrusted;
  // Not trusted yet: the version the check below reads (the same size and mtime throughout).
  std::optional<ObjectInfo> version;
  if (!trusted) {
    Result<ObjectInfo> before = head(key);
    if (!before.ok() || before->size != size) return OptionalMd5();  // the caller's read decides
    version = std::move(before).value();
  }
  server_md5_runs_.fetch_add(1);
  const std::string command = options_.server_md5_command + " '" + paths.data + "'";
  Result<ServerCommand> ran = WithRetry([&](SftpConnection& c) -> Result<ServerCommand> {
    // Only a shortcut: the file can always be read here instead. So md5sum gets request_timeout
    // and the time to read the file at kServerWorkMinRate, not the minutes a copy or an fsync
    // may take, and its own deadline ends it before the watchdog would cut the connection as
    // a stalled server's (which would fail every call for request_timeout).
    const std::chrono::milliseconds allowed = Md5sumTime(options_.request_timeout, size);
    SftpSessionPool::SilenceAllowance hashing(pool_, c, allowed + options_.request_timeout);
    // md5sum's one line: the digest, two spaces, the path and a newline.
    return RunOnServer(c, command, paths.data.size() + 64, DeadlineClock::now() + allowed);
  });
  // The caller reads the file instead, and meets whatever made this fail.
  if (!ran.ok()) return OptionalMd5();
  OptionalMd5 digest;
  if (ran->started && ran->exit_status == 0 && !ran->out_cut) {
    digest = ParseMd5sumLine(ran->out, paths.data);
  }
  // md5sum follows a link, and has no option not to: one that another account put in the
  // file's place would have it hash the link's target, whose MD5 would then pass for the
  // file's. The name must still be the regular file of that size, and of the version checked
  // below (the caller's read meets whatever else is there). A link put there only while
  // md5sum ran is not seen: SFTP shows no inode numbers to tell the file back in its place
  // from the one it was.
  if (digest) {
    Result<ObjectInfo> after = head(key);
    if (!after.ok() || after->size != size || !CheckRegular(*after, "md5sum").ok() ||
        (version && after->etag != version->etag)) {
      return OptionalMd5();
    }
  }
  if (trusted) {
    // Gone, unreadable, killed: the read says why.
    if (digest && options_.metrics != nullptr) Bump(options_.metrics->server_md5s);
    return digest;
  }
  // The first answer is checked against the file's bytes, read here: that md5sum runs, says
  // what GNU md5sum says, and sees the files SFTP shows (a chroot or a virtual file system may
  // show the shell others). A command that could not run, or a wrong answer, turns it off for
  // the mount, for good: an account that cannot run it would otherwise cost an exec per file.
  // A file gone, changed or unreadable meanwhile decides nothing.
  std::string why;
  if (!ran->started) {
    why = "the server refused to run it";
  } else if (!digest && ran->exit_status != 1 && ran->exit_status != -1) {
    why = "exit status " + std::to_string(ran->exit_status) + ", " +
          std::to_string(ran->out.size()) + (ran->out_cut ? " or more" : "") + " bytes of output";
  }
  OptionalMd5 here;
  if (why.empty()) {
    Md5 md5;
    std::vector<std::byte> buf(4 << 20);
    for (uint64_t offset = 0; offset < size;) {
      Result<size_t> n = read(key, offset, buf, &version->etag);
      if (!n.ok() || *n == 0) return OptionalMd5();  // not decided: the caller's read meets it
      md5.Update(std::span<const std::byte>(buf.data(), *n));
      if (options_.metrics != nullptr) Bump(options_.metrics->bytes_hashed, *n);
      offset += *n;
    }
    here = md5.Final();
    if (digest && *digest == *here) {
      int untried = kServerCommandUntried;
      server_md5_state_.compare_exchange_strong(untried, kServerCommandTrusted);
      if (options_.metrics != nullptr) Bump(options_.metrics->server_md5s);
      return digest;
    }
    why = digest ? "its MD5 of " + paths.data + " is not that of the bytes SFTP reads"
                 : "it failed (exit status " + std::to_string(ran->exit_status) +
                       ") on a file SFTP reads";
  }
  TurnServerMd5Off(why);
  return here;  // the bytes' own MD5 where the check read them, so that they are not read again
}

bool SftpStore::MayLeaveMd5ToServer(std::string_view path) const {
  // As server_md5 would ask md5sum for it: a name any shell takes as it is, and a connection
  // that may hash (at most half of them do).
  return options_.leave_upload_md5_to_server && options_.server_md5 && options_.sessions >= 2 &&
         QuotableForAnyShell(path);
}

void SftpStore::StartMd5Probe(const std::string& dir) {
  if (!options_.server_md5 || server_md5_state_.load() != kServerCommandUntried) return;
  if (md5_probe_started_.exchange(true)) return;
  md5_probe_ = std::thread([this, dir] {
    (void)ProbeServerMd5(dir);
    md5_probe_done_.store(true);
  });
}

SftpStore::~SftpStore() {
  if (md5_probe_.joinable()) md5_probe_.join();
}

void SftpStore::TurnServerMd5Off(const std::string& why) {
  int untried = kServerCommandUntried;
  if (server_md5_state_.compare_exchange_strong(untried, kServerCommandOff) && options_.log) {
    options_.log(LogLevel::kInfo, describe() + ": md5sum cannot run on the server (" + why +
                                      "): MD5s are computed here, from the files' bytes");
  }
}

SftpStore::Md5Probe SftpStore::ProbeServerMd5(const std::string& dir) {
  std::array<std::byte, 4096> bytes{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), bytes.size()) != 1) {
    return Md5Probe::kNoProbe;
  }
  const std::string probe = TempName(dir);  // no character a shell takes for another
  if (!NoteTemporary(probe, "md5sum probe").ok()) return Md5Probe::kNoProbe;
  bool made = false;
  Result<ServerCommand> ran = WithRetry([&](SftpConnection& c) -> Result<ServerCommand> {
    SftpWire& wire = c.wire();
    // Made here (O_EXCL), never a file that took the name; a retry after a broken connection
    // finds its own and decides nothing.
    OBJFS_ASSIGN_OR_RETURN(SftpWire::Handle handle,
                           wire.OpenFile(probe, kOpenWrite | kOpenCreate | kOpenExclusive, 0600));
    Status wrote = wire.WriteAll(handle, 0, bytes, 1);
    Status closed = wire.Close(handle);
    OBJFS_RETURN_IF_ERROR(wrote);
    OBJFS_RETURN_IF_ERROR(closed);
    made = true;
    const std::chrono::milliseconds allowed = Md5sumTime(options_.request_timeout, bytes.size());
    SftpSessionPool::SilenceAllowance hashing(pool_, c, allowed + options_.request_timeout);
    server_md5_runs_.fetch_add(1);
    return RunOnServer(c, options_.server_md5_command + " '" + probe + "'", probe.size() + 64,
                       DeadlineClock::now() + allowed);
  });
  if (RemoveTemporary(probe).ok() && options_.journal != nullptr) {
    options_.journal->Closed(probe, "");
  }
  if (!ran.ok() && !made && ran.status().code() != StatusCode::kTransient) {
    return Md5Probe::kNoProbe;
  }
  // Killed, or no status came: nothing decided, unless it said more than md5sum ever does.
  if (!ran.ok() || (ran->started && ran->exit_status == -1 && !ran->out_cut)) {
    return Md5Probe::kNoAnswer;
  }
  OptionalMd5 digest;
  if (ran->started && ran->exit_status == 0 && !ran->out_cut) {
    digest = ParseMd5sumLine(ran->out, probe);
  }
  if (digest && *digest == Md5Of(std::span<const std::byte>(bytes))) {
    int untried = kServerCommandUntried;
    server_md5_state_.compare_exchange_strong(untried, kServerCommandTrusted);
    if (options_.metrics != nullptr) Bump(options_.metrics->server_md5_probes);
    return Md5Probe::kTrusted;
  }
  std::string why;
  if (!ran->started) {
    why = "the server refused to run it";
  } else if (digest) {
    why = "its MD5 of a file objfs wrote there is not that of the bytes written";
  } else {
    why = "exit status " + std::to_string(ran->exit_status) + ", " +
          std::to_string(ran->out.size()) + (ran->out_cut ? " or more" : "") +
          " bytes of output, for a file objfs wrote there";
  }
  TurnServerMd5Off(why);
  return Md5Probe::kOff;
}

bool SftpStore::MayRunCp(uint64_t size) const {
  // Small, or empty (as SFTP shows a FIFO or a device too, on which cp would wait): copy-data
  // costs less than starting a command.
  return options_.server_cp && server_cp_state_.load() != kServerCommandOff && size != 0 &&
         size >= options_.server_cp_min_size;
}

Result<SftpStore::CpOutcome> SftpStore::CopyWithCp(SftpConnection& c, const std::string& from,
                                                   const std::string& to, uint64_t size,
                                                   bool copy_data, StagedIdentity* identity) {
  if (!MayRunCp(size)) return CpOutcome::kNotRun;
  if (!QuotableForAnyShell(from) || !QuotableForAnyShell(to)) return CpOutcome::kNotRun;
  // A clone costs what the account's shell takes to start (its start-up files may run
  // programs: 0.48 s on the test machine's root, a few ms for most), copy-data a read and a
  // write of each byte, and the fsync after it writes them out (0.7 s for 512 MiB on the test
  // machine's ext4 and XFS, about 1 GiB/s at best): cp only where that would take longer.
  const int64_t clone_ns = cp_clone_ns_.load();
  if (copy_data && clone_ns >= 0 &&
      static_cast<double>(size) <
          static_cast<double>(options_.server_cp_copy_data_rate) * 1e-9 * clone_ns) {
    return CpOutcome::kNotRun;
  }
  server_cp_runs_.fetch_add(1);
  // --remove-destination: cp removes `to` and makes its own with O_EXCL, so that cp itself
  // never follows a link put in its place (by anyone who may write the directory; objfs's own
  // opens by name check what they opened: OpenStaged). umask 077: the new file is private
  // until renamed into place, as the one made over SFTP.
  // -P: a link put in the source's place is copied as a link (which the check below refuses),
  // never followed to another file.
  const std::string command = "umask 077; " + options_.server_cp_command + " -P" +
                              (copy_data ? " --reflink=always" : " --reflink=auto") +
                              " --remove-destination -- '" + from + "' '" + to + "'";
  // A clone is only a shortcut past copy-data: it gets request_timeout, and the file at
  // copy-data's rate, not the minutes server work may take; a copy (no copy-data here) gets
  // what copy-data would. Its own deadline ends it before the watchdog would cut the
  // connection as a stalled server's.
  const std::chrono::milliseconds allowed =
      copy_data ? Md5sumTime(options_.request_timeout, size / 64)  // 640 MiB/s
                : ServerWorkSilence(options_.request_timeout, size);
  const auto started = DeadlineClock::now();
  Result<ServerCommand> ran = [&] {
    SftpSessionPool::SilenceAllowance copying(pool_, c, allowed + options_.request_timeout);
    // cp prints nothing: more than a line on its standard output is a shell's, not cp's.
    return RunOnServer(c, command, 1024, started + allowed);
  }();
  const int64_t took_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(DeadlineClock::now() - started).count();
  auto turn_off = [&](const std::string& why, const std::string& then) {
    int state = server_cp_state_.exchange(kServerCommandOff);
    if (state != kServerCommandOff && options_.log) {
      options_.log(LogLevel::kInfo, describe() +
                                        (copy_data ? ": cp cannot clone files on the server ("
                                                   : ": cp cannot copy files on the server (") +
                                        why + "): " + then);
    }
  };
  // Whatever runs there may still be writing `to`: the caller leaves it. A server whose cp
  // hangs or talks is not asked again. A connection that broke under a cp that has worked
  // before is the connection's failure, not cp's (a network cut, a killed session): cp stays
  // on for the copies and edits after this one.
  if (!ran.ok()) {
    if (ran.status().code() != StatusCode::kTransient ||
        server_cp_state_.load() != kServerCommandTrusted) {
      turn_off(ran.status().message(), "it is not run again in this mount");
    }
    return ran.status();
  }
  if (ran->out_cut) {
    turn_off("the shell printed more than cp does", "it is not run again in this mount");
    return IoError("cp on the server: the shell printed more than cp does");
  }
  std::string why;
  if (!ran->started) {
    why = "the server refused to run it";
  } else if (ran->exit_status != 0) {
    why = "exit status " + std::to_string(ran->exit_status);
  } else {
    // `to` was made over SFTP: only a cp that sees the files SFTP shows (no chroot or virtual
    // file system that shows the shell others) filled it.
    Attributes copied(sftp_lstat(c.sftp(), to.c_str()));
    if (copied == nullptr) return LibsshStatus(c, "stat " + to);
    if (copied->type == SSH_FILEXFER_TYPE_REGULAR && copied->size == size) {
      // Opened once more (that open follows a link put there since the lstat): the file must
      // still be a regular file of this account's, of that size, before it gets its own atime.
      SftpWire& wire = c.wire();
      StagedIdentity cps;  // cp's file has an atime of its own
      cps.uid = identity->uid;
      cps.made_s = identity->made_s;
      OBJFS_ASSIGN_OR_RETURN(SftpWire::Handle made, OpenStaged(wire, to, cps, size));
      Result<StagedIdentity> marked = MarkStaged(wire, made);
      Status closed = wire.Close(made);
      if (!marked.ok()) return marked.status();
      OBJFS_RETURN_IF_ERROR(closed);
      *identity = *marked;
      int untried = kServerCommandUntried;
      server_cp_state_.compare_exchange_strong(untried, kServerCommandTrusted);
      if (options_.metrics != nullptr) Bump(options_.metrics->server_cps);
      if (copy_data) {
        int64_t shortest = cp_clone_ns_.load();
        while ((shortest < 0 || took_ns < shortest) &&
               !cp_clone_ns_.compare_exchange_weak(shortest, took_ns)) {
        }
      }
      return CpOutcome::kCopied;
    }
    why = "the copy SFTP shows has " + std::to_string(copied->size) + " bytes of " +
          std::to_string(size);
  }
  // cp ended: `to` is made again, empty, for copy-data (cp may have removed it, or left what
  // SFTP showed there: a link is removed, not followed).
  if (sftp_unlink(c.sftp(), to.c_str()) != 0) {
    Status gone = LibsshStatus(c, "remove " + to);
    if (gone.code() != StatusCode::kNotFound) return gone;
  }
  SftpWire& wire = c.wire();
  OBJFS_ASSIGN_OR_RETURN(
      SftpWire::Handle remade,
      wire.OpenFile(to, kOpenWrite | kOpenCreate | kOpenTruncate | kOpenExclusive, 0600));
  Result<StagedIdentity> marked = MarkStaged(wire, remade);
  Status closed = wire.Close(remade);
  if (!marked.ok()) return marked.status();
  OBJFS_RETURN_IF_ERROR(closed);
  *identity = *marked;
  // Once it worked, a failure is this copy's (a full disk, a file gone or changed meanwhile,
  // another file system): copy-data, or the copy through this machine, says why.
  if (server_cp_state_.load() == kServerCommandUntried) {
    turn_off(why, copy_data ? "copies use copy-data" : "copies go through this machine");
  }
  return CpOutcome::kFailed;
}

Result<StoreSpace> SftpStore::space() {
  return WithRetry([&](SftpConnection& c) -> Result<StoreSpace> {
    if (!c.wire().HasExtension("statvfs@openssh.com", "2")) {
      return UnsupportedError(describe() + ": the server has no statvfs@openssh.com");
    }
    sftp_statvfs_t v = sftp_statvfs(c.sftp(), options_.root.c_str());
    if (v == nullptr) {
      Status failed = LibsshStatus(c, "statvfs " + describe());
      // A server that offers the extension but refuses it (sftp-server -P statvfs) has no
      // capacity to report, as one without it; a lost connection is an error.
      if (failed.code() == StatusCode::kTransient) return failed;
      return UnsupportedError(failed.message());
    }
    StoreSpace space;
    space.block_size = v->f_frsize != 0 ? v->f_frsize : v->f_bsize;
    space.blocks = v->f_blocks;
    space.blocks_free = v->f_bfree;
    space.blocks_available = v->f_bavail;
    space.files = v->f_files;
    space.files_free = v->f_ffree;
    space.name_max = v->f_namemax;
    sftp_statvfs_free(v);
    return space;
  });
}

Status SftpStore::rename(std::string_view from, std::string_view to) {
  if (IsMarker(from) || IsMarker(to)) {
    return InvalidArgumentError("rename takes keys without a trailing slash");
  }
  OBJFS_ASSIGN_OR_RETURN(KeyPaths src, PathsOf(from));
  OBJFS_ASSIGN_OR_RETURN(KeyPaths dst, PathsOf(to));
  return WithRetry([&](SftpConnection& c) -> Status {
    MutexLock lock(&KeyLock(to));
    Status status = Rename(c, src.data, dst.data);
    if (!status.ok() && !c.healthy()) {
      return TransientError("rename " + std::string(from) + ": connection lost");
    }
    return status;
  });
}

Status SftpStore::remove_many(const std::vector<std::string>& keys) {
  Status first;
  std::string failed;
  // The directories that held the keys (a marker "d/" holds itself, "d"), restricted to those
  // at or below the deepest directory common to all of them: removing a tree (a directory
  // renamed through the mount passes its keys and its marker) takes its emptied directories
  // with it, as an object store would, and never touches a directory above it.
  std::vector<std::string> dirs;
  for (const std::string& key : keys) {
    Status status = remove(key);
    if (status.ok()) {
      size_t slash = IsMarker(key) ? key.size() - 1 : key.rfind('/');
      for (; slash != std::string::npos && slash > 0; slash = key.rfind('/', slash - 1)) {
        dirs.push_back(key.substr(0, slash));
      }
      continue;
    }
    if (first.ok()) first = status;
    failed += (failed.empty() ? "" : ", ") + key;
  }
  std::string common;  // the deepest directory that is an ancestor-or-self of every key's dir
  bool have_common = false;
  for (const std::string& key : keys) {
    size_t end = IsMarker(key) ? key.size() - 1 : key.rfind('/');
    std::string dir = end == std::string::npos ? std::string() : key.substr(0, end);
    if (!have_common) {
      common = dir;
      have_common = true;
      continue;
    }
    while (!common.empty() && !(dir == common || StartsWith(dir, common + "/"))) {
      size_t up = common.rfind('/');
      common = up == std::string::npos ? std::string() : common.substr(0, up);
    }
  }
  std::erase_if(dirs, [&](const std::string& d) {
    return common.empty() || !(d == common || StartsWith(d, common + "/"));
  });
  std::sort(dirs.begin(), dirs.end(), [](const std::string& x, const std::string& y) {
    return std::count(x.begin(), x.end(), '/') > std::count(y.begin(), y.end(), '/') ||
           (std::count(x.begin(), x.end(), '/') == std::count(y.begin(), y.end(), '/') && x < y);
  });
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  if (!dirs.empty()) {
    (void)WithRetry([&](SftpConnection& c) -> Status {
      // Best effort: a directory that still holds anything stays.
      for (const std::string& d : dirs) sftp_rmdir(c.sftp(), (options_.root + "/" + d).c_str());
      return Status::Ok();
    });
  }
  if (first.ok()) return first;
  return Status(first.code(), "could not remove " + failed + ": " + first.message(),
                first.server_code());
}

Capabilities SftpStore::capabilities() const {
  Capabilities caps;
  caps.scheme = "sftp";
  caps.stores_owner = options_.owner_from_caller;
  caps.native_etags = false;
  caps.native_rename = true;
  caps.directory_attributes = true;
  caps.reserved_prefix = std::string(kReservedPrefix);
  MutexLock lock(&server_mu_);
  caps.server_side_copy = copy_data_;
  caps.upload_sessions = true;
  caps.copy_ranges = copy_data_;
  caps.read_unit = ReadChunk(limits_);
  return caps;
}

std::string SftpStore::describe() const {
  return "sftp://" + options_.user + "@" + options_.host + ":" + std::to_string(options_.port) +
         options_.root;
}

}  // namespace objfs::sftp
