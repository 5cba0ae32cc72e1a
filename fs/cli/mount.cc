// objfs: mounts an S3 bucket or an SFTP directory (or a test build's added scheme) as a directory.
//
// Everything that can be checked before mounting is checked first (arguments, mount point,
// credentials, endpoint, bucket; for SFTP the host key, the login and the directory), each failure
// being one line on stderr and exit status 1, so that a mount that cannot work fails before the
// shell gets its prompt back. Only after the kernel mount succeeded does the process go to the
// background. On unmount, SIGTERM or SIGINT everything unsaved is uploaded before the process
// exits; a failed upload makes the exit status non-zero.
#define FUSE_USE_VERSION 314

#include "fs/cli/mount.h"

#include <curl/curl.h>
#include <execinfo.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <libssh/libssh.h>
#include <malloc.h>
#include <openssl/crypto.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "backend/log.h"
#include "backend/metrics.h"
#include "backend/metrics_store.h"
#include "backend/prefix_store.h"
#include "backend/retry.h"
#include "backend/s3/s3_store.h"
#include "backend/sftp/sftp_store.h"
#include "backend/sftp/ssh_config.h"
#include "backend/small_file.h"
#include "cache/buffer_pool.h"
#include "cache/content_etag_store.h"
#include "cache/data_cache.h"
#include "cache/listing_attr_store.h"
#include "cache/store_db.h"
#include "cache/upload_records.h"
#include "fs/cli/cache_directory.h"
#include "fs/cli/stats_command.h"
#include "fs/filesystem.h"
#include "fs/fuse_adapter.h"
#include "fs/kernel_readahead.h"
#include "fs/xattr.h"
#include "objfs_version.h"

namespace objfs {
namespace {

// The mount's messages, through the process's Logger (backend/log.h): on standard error until
// the mount serves, then to the sink -o log= chose.
class Reporter {
 public:
  void set_daemon(bool daemon) { Logger::Instance().StartServing(daemon); }

  void Error(const std::string& message) const { LogError(message); }
  void Warn(const std::string& message) const { LogWarn(message); }
};

// A crash leaves the mount point "Transport endpoint is not connected"; the least the process
// owes its user is a line saying why, and a backtrace for the bug report. Only
// async-signal-safe calls here (backtrace() is loaded before the handler can run).
void OnFatalSignal(int sig) {
  char line[96];
  int n = std::snprintf(line, sizeof line, "objfs: fatal signal %d (%s); backtrace:\n", sig,
                        sig == SIGSEGV   ? "segmentation fault"
                        : sig == SIGABRT ? "abort"
                        : sig == SIGBUS  ? "bus error"
                        : sig == SIGFPE  ? "arithmetic error"
                                         : "illegal instruction");
  if (n > 0) (void)!::write(STDERR_FILENO, line, static_cast<size_t>(n));
  void* frames[64];
  int depth = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void InstallCrashReporter() {
#if defined(__SANITIZE_ADDRESS__)
  return;  // the sanitizer's own report is better
#endif
  void* warm[1];
  ::backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction action {};
  action.sa_handler = OnFatalSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) ::sigaction(sig, &action, nullptr);
}

// SIGINT, SIGTERM and SIGHUP end the loop through libfuse's handlers. Threads started while
// they are blocked inherit the mask, so the signals always reach the thread running the loop.
sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

Status CheckMountPoint(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT) return NotFoundError("mount point '" + path + "' does not exist");
    if (err == ENOTCONN) {
      return IoError("mount point '" + path +
                     "' is a disconnected FUSE mount: unmount it first (fusermount3 -u " + path +
                     ")");
    }
    return IoError("cannot use mount point '" + path + "': " + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgumentError("mount point '" + path + "' is not a directory");
  }
  return Status::Ok();
}

struct MountInfoEntry {
  std::string point;  // octal escapes (\040) undone
  std::string type;   // "fuse.objfs", "autofs", ...
};

// The mount points and file system types of /proc/self/mountinfo.
std::vector<MountInfoEntry> MountPoints() {
  std::vector<MountInfoEntry> points;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT ..."
    size_t pos = 0;
    for (int field = 0; field < 4 && pos != std::string::npos; ++field) {
      pos = line.find(' ', pos);
      if (pos != std::string::npos) ++pos;
    }
    if (pos == std::string::npos) continue;
    std::string escaped = line.substr(pos, line.find(' ', pos) - pos);
    std::string point;
    for (size_t i = 0; i < escaped.size(); ++i) {
      if (escaped[i] == '\\' && i + 3 < escaped.size()) {
        point += static_cast<char>(std::stoi(escaped.substr(i + 1, 3), nullptr, 8));
        i += 3;
      } else {
        point += escaped[i];
      }
    }
    // "... - TYPE SOURCE OPTIONS"
    const size_t dash = line.find(" - ", pos);
    std::string type;
    if (dash != std::string::npos) {
      type = line.substr(dash + 3, line.find(' ', dash + 3) - (dash + 3));
    }
    points.push_back({std::move(point), std::move(type)});
  }
  return points;
}

// A second mount on a mount point hides the first one's files and stacks up on each retry of a
// boot script: refused, whatever is mounted there. But for autofs: systemd's automount
// (x-systemd.automount) mounts over the autofs trigger it placed there.
Status CheckNotMounted(const std::string& canonical_path) {
  for (const MountInfoEntry& entry : MountPoints()) {
    if (entry.point == canonical_path && entry.type != "autofs") {
      std::string message = "'" + canonical_path;
      message += "' is already a mount point; unmount it first (umount ";
      message += canonical_path;
      message += ")";
      return InvalidArgumentError(std::move(message));
    }
  }
  return Status::Ok();
}

// A directory with entries is refused as a mount point unless -o nonempty: the mount would hide
// them, a classic accident (a mount over the wrong directory, or a boot that wrote to the
// directory before the mount). An autofs trigger (x-systemd.automount) is never read: reading it
// would wait for this very mount.
Status CheckEmpty(const std::string& canonical_path) {
  for (const MountInfoEntry& entry : MountPoints()) {
    if (entry.point == canonical_path && entry.type == "autofs") return Status::Ok();
  }
  std::error_code ec;
  std::filesystem::directory_iterator it(canonical_path, ec);
  if (ec) return IoError("cannot read mount point '" + canonical_path + "': " + ec.message());
  if (it != std::filesystem::directory_iterator()) {
    return InvalidArgumentError("mount point '" + canonical_path + "' is not empty (it has '" +
                                it->path().filename().string() +
                                "'); the mount would hide its files: give -o nonempty to mount "
                                "over them anyway");
  }
  return Status::Ok();
}

// Logs the counters of user.objfs.stats (those not zero) as one line every `period`, until
// stopped: -o log_metrics.
class MetricsLogger {
 public:
  MetricsLogger(std::chrono::milliseconds period, std::function<std::string()> text)
      : period_(period), text_(std::move(text)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~MetricsLogger() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    thread_.join();
  }
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  // "name=value" lines as one line of the non-zero ones.
  static std::string OneLine(const std::string& text) {
    std::string line = "stats:";
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const std::string entry = text.substr(start, end - start);
      start = end + 1;
      if (entry.empty() || entry.size() < 2 || entry.substr(entry.size() - 2) == "=0") continue;
      line += ' ';
      line += entry;
    }
    return line;
  }

 private:
  void Loop() {
    MutexLock lock(&mu_);
    auto next = std::chrono::steady_clock::now() + period_;
    while (!stop_) {
      if (cv_.WaitUntil(&mu_, next) || stop_) continue;
      next += period_;
      LogInfo(OneLine(text_()));
    }
  }

  const std::chrono::milliseconds period_;
  const std::function<std::string()> text_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Says what a clearing of uploads left on the server did (`kind`: what an upload is on this
// store). At the start, before this mount serves anything, they are an earlier mount's
// (`whose`: "an earlier mount"); while it runs, and at the unmount, this one's whose abort
// failed while the server was away.
void SayCleared(const UploadRecords::ClearResult& result, std::string_view kind,
                std::string_view whose, const LogFunction& log) {
  auto count = [kind](size_t n) {
    return std::to_string(n) + " " + std::string(kind) + (n == 1 ? "" : "s");
  };
  if (result.cleared != 0) {
    log(LogLevel::kInfo,
        "cleared " + count(result.cleared) + " left on the server by " + std::string(whose));
  }
  if (result.damaged != 0) {
    log(LogLevel::kWarn, "dropped " + std::to_string(result.damaged) +
                             " damaged notes of uploads left by " + std::string(whose));
  }
  if (result.failed != 0) {
    log(LogLevel::kWarn,
        count(result.failed) + " of " + std::string(whose) +
            " not cleared (tried again at the next mount): " + result.first_error.message());
  }
}

// A whole number of seconds, at least 1, for settings that take seconds.
long WholeSeconds(double seconds) { return std::max(1L, static_cast<long>(std::ceil(seconds))); }

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

Result<std::shared_ptr<ObjectStore>> OpenS3(const StoreContext& context) {
  const MountOptions& options = context.options;
  Metrics& metrics = context.metrics;
  const std::shared_ptr<UploadRecords>& uploads = context.uploads;
  const LogFunction& log = context.log;
  s3::S3StoreOptions s3_options;
  s3_options.http.idle_timeout_s = WholeSeconds(options.request_timeout);
  s3_options.http.connect_timeout_ms =
      std::min<long>(s3_options.http.connect_timeout_ms, Millis(options.request_timeout).count());
  s3_options.retry.budget = Millis(options.operation_timeout);
  s3_options.log = log;
  s3_options.bucket = options.url.bucket;
  s3_options.endpoint = options.endpoint;
  s3_options.region = options.region;  // empty: from the environment, else us-east-1
  s3_options.addressing = options.addressing;
  if (options.multipart_threshold) s3_options.multipart_threshold = *options.multipart_threshold;
  if (options.part_size) s3_options.part_size = *options.part_size;
  if (options.copy_part_threshold) s3_options.copy_part_threshold = *options.copy_part_threshold;
  if (options.parallel_parts) s3_options.parallel_parts = *options.parallel_parts;
  if (options.part_checksum == "none") s3_options.part_checksum = s3::PartChecksum::kNone;
  s3_options.metrics = &metrics;
  s3_options.journal = uploads;
  s3::ObjectHeaderOptions& headers = s3_options.object_headers;
  headers.storage_class = options.storage_class;
  headers.acl = options.acl;
  headers.sse = options.sse;
  headers.sse_kms_key_id = options.sse_kms_key_id;
  headers.requester_pays = options.requester_pays;
  if (!options.sse_c_key_file.empty()) {
    OBJFS_ASSIGN_OR_RETURN(headers.sse_c_key, s3::ReadSseCustomerKey(options.sse_c_key_file));
  }
  // Without the file (Debian's media-types) new objects get the server's binary/octet-stream.
  headers.mime_types =
      std::make_shared<const s3::MimeTypes>(s3::MimeTypes::Load(s3::MimeTypes::kSystemFile));
  s3::ChainOptions chain;
  chain.profile = options.profile;
  chain.source = options.credentials;
  chain.credentials_file = options.credentials_file;
  chain.getenv = [](const char* name) { return std::getenv(name); };
  chain.request_timeout_ms = Millis(options.request_timeout).count();
  OBJFS_RETURN_IF_ERROR(s3::ApplyEnvironment(s3_options, std::move(chain), log));
  if (context.check_server) OBJFS_RETURN_IF_ERROR(context.check_server(s3_options.endpoint));
  const std::string endpoint = s3_options.endpoint.empty() ? "AWS" : s3_options.endpoint;
  const bool discover_region = s3_options.discover_region;
  const std::string credentials_line =
      "credentials: from " + s3_options.credentials.source +
      (s3_options.credentials.expiry ? " (temporary, renewed before they expire)" : "");

  OBJFS_ASSIGN_OR_RETURN(std::unique_ptr<s3::S3Store> s3_store,
                         s3::S3Store::Create(std::move(s3_options)));
  OBJFS_RETURN_IF_ERROR(s3_store->CheckBucket(options.url.prefix));
  s3::S3Store* s3 = s3_store.get();
  // Said once the mount is up (stderr in the foreground, else syslog), so that a mount that
  // works prints nothing at the terminal; and the renewal thread starts after the fork.
  const std::vector<std::string> notes = {
      "s3: endpoint " + endpoint + ", region " + s3->region() +
          (!discover_region              ? ""
           : s3->region() != "us-east-1" ? " (the bucket's, from x-amz-bucket-region)"
                                         : " (none configured, and the server named none)"),
      credentials_line};
  if (context.start_threads != nullptr) {
    *context.start_threads = [s3, notes, log] {
      for (const std::string& note : notes) log(LogLevel::kInfo, note);
      s3->credentials().StartRefreshing();
    };
  }
  auto abort = [s3](const OpenUploadRecord& r) { return s3->AbortUpload(r.name, r.upload_id); };
  SayCleared(uploads->ClearLeftovers(abort), "multipart upload", "an earlier mount", log);
  if (context.clear_upload != nullptr) *context.clear_upload = {abort, "multipart upload"};

  std::shared_ptr<ObjectStore> store =
      std::make_shared<MetricsStore>(std::shared_ptr<ObjectStore>(std::move(s3_store)), metrics);
  if (!options.url.prefix.empty()) {
    store = std::make_shared<PrefixStore>(std::move(store), options.url.prefix);
  }
  return store;
}

// The name of the calling user, the SSH user of an sftp:// URL without one.
std::string LocalUserName() {
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_name != nullptr) {
    return pw->pw_name;
  }
  const char* user = std::getenv("USER");
  return user != nullptr ? user : "";
}

// `path` made absolute against the current directory: the daemon runs in "/" and reconnects
// long after the mount.
std::string AbsolutePath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

// Reads allocate and free buffers of 128 KiB (kernel reads) to 8 MiB (read-ahead pieces) all the
// time. glibc serves such sizes with a fresh mmap each, so every byte read cost a page fault
// and a page clear; with these settings they come from the heap and are reused. Measured on a
// 512 MiB sequential read from RGW: 1.48-1.58 -> 1.30-1.36 CPU s/GiB. Freed memory above 64 MiB
// is still returned to the system. One arena for all threads: a buffer is filled by an I/O
// thread and freed by a FUSE thread, and with an arena per thread glibc unmapped whole heaps
// of freed buffers and faulted them in again (40,000 faults per 512 MiB read, 22,000-24,000
// with one arena; 1.26-1.38 -> 1.10-1.24 CPU s/GiB). The daemon's allocations are few per
// request, so the one lock is not contended in the read path; metadata-heavy loads (ls -l of
// 1,000 objects) measured no slower.
void KeepLargeBuffersMapped() {
  ::mallopt(M_ARENA_MAX, 1);
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

// The first line of `path` (standard input when empty), without its line end.
Result<std::string> ReadPasswordLine(const std::string& path) {
  std::string line;
  if (path.empty()) {
    // At a terminal: a prompt, and no echo.
    struct termios saved {};
    const bool tty = ::isatty(STDIN_FILENO) != 0 && ::tcgetattr(STDIN_FILENO, &saved) == 0;
    if (tty) {
      std::fprintf(stderr, "password: ");
      struct termios quiet = saved;
      quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
      ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
    }
    const bool got = static_cast<bool>(std::getline(std::cin, line));
    if (tty) {
      ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
      std::fprintf(stderr, "\n");
    }
    if (!got) return InvalidArgumentError("password_stdin: no password line on standard input");
  } else {
    Result<std::string> text = ReadSmallFile(path, 64 << 10, "password file");
    if (!text.ok()) return InvalidArgumentError(text.status().message());
    if (text->empty()) return InvalidArgumentError("password file '" + path + "' is empty");
    line = text->substr(0, text->find('\n'));
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

Result<std::shared_ptr<ObjectStore>> OpenSftp(const StoreContext& context) {
  const MountOptions& options = context.options;
  Metrics& metrics = context.metrics;
  const std::shared_ptr<UploadRecords>& uploads = context.uploads;
  const LogFunction& log = context.log;
  sftp::SftpStoreOptions sftp_options;
  sftp_options.request_timeout = Millis(options.request_timeout);
  sftp_options.connect_timeout = std::min(
      sftp_options.connect_timeout, std::chrono::seconds(WholeSeconds(options.request_timeout)));
  sftp_options.operation_timeout = Millis(options.operation_timeout);
  sftp_options.log = log;
  sftp_options.server_md5 = !options.no_server_md5;
  sftp_options.leave_upload_md5_to_server = true;
  sftp_options.server_cp = !options.no_server_cp;
  // A replaced file keeps an owner that is not the mount's own (see mount_owner).
  sftp_options.mount_owner = std::make_pair(options.fs.uid, options.fs.gid);
  // A shared mount gives new entries their creator's owner (as s3:// does).
  sftp_options.owner_from_caller =
      std::find(options.fuse_options.begin(), options.fuse_options.end(), "allow_other") !=
      options.fuse_options.end();
  // The URL's host may be an alias of the ssh configuration; what the URL and -o say win.
  OBJFS_ASSIGN_OR_RETURN(
      sftp::SshHostConfig config,
      sftp::ReadSshConfig(options.url.host, options.ssh_config_files, options.home));
  sftp_options.host = config.host;
  sftp_options.port = options.url.port_given ? options.url.port : config.port;
  sftp_options.user = !options.url.user.empty() ? options.url.user
                      : !config.user.empty()    ? config.user
                                                : LocalUserName();
  sftp_options.config = config.session;
  if (!config.proxy_command.empty()) {
    // The URL's user and host reach a shell in the proxy command: nothing but what a host or
    // user name holds may (as OpenSSH refuses since 9.6).
    for (const std::string* name : {&sftp_options.user, &sftp_options.host}) {
      if (!sftp::SafeForProxyCommand(*name)) {
        return InvalidArgumentError("'" + *name + "' cannot be given to the proxy command of " +
                                    options.url.host + ": it holds characters a shell reads");
      }
    }
    sftp_options.proxy_command = sftp::ExpandProxyCommand(
        config.proxy_command, config.proxy_jump, sftp_options.host, sftp_options.port,
        sftp_options.user, options.ssh_config_given == "none" ? "" : options.ssh_config_given,
        static_cast<int>(sftp_options.connect_timeout.count()));
  }
  sftp_options.root = options.url.path;
  for (const std::string& identity : options.identity_files) {
    std::string path = AbsolutePath(identity);
    if (::access(path.c_str(), R_OK) != 0) {
      return InvalidArgumentError("cannot read identity file '" + identity +
                                  "': " + std::strerror(errno));
    }
    OBJFS_RETURN_IF_ERROR(CheckRegularFileIfExists(path, "identity file"));
    // As ssh refuses an "UNPROTECTED PRIVATE KEY FILE": a key of the user's that others may
    // read was as good as given away, and one they may write may be theirs by now.
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && st.st_uid == ::getuid() && (st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return PermissionDeniedError("identity file '" + identity + "' is open to others (mode " +
                                   mode + "), which ssh refuses too: chmod 600 it");
    }
    sftp_options.identity_files.push_back(std::move(path));
  }
  if (!options.known_hosts_given && !config.known_hosts.empty()) {
    sftp_options.known_hosts = AbsolutePath(config.known_hosts);
  } else if (!options.known_hosts.empty()) {
    sftp_options.known_hosts = AbsolutePath(options.known_hosts);
  }
  // As ssh: the system-wide list after the user's, when there is one.
  const std::string global =
      config.global_known_hosts.empty() ? "/etc/ssh/ssh_known_hosts" : config.global_known_hosts;
  if (::access(global.c_str(), R_OK) == 0) sftp_options.global_known_hosts = AbsolutePath(global);
  for (const std::string* file : {&sftp_options.known_hosts, &sftp_options.global_known_hosts}) {
    OBJFS_RETURN_IF_ERROR(CheckRegularFileIfExists(*file, "known_hosts file"));
  }
  sftp_options.accept_new_host_key = options.accept_new_host_key;
  if (options.sessions) sftp_options.sessions = *options.sessions;
  sftp_options.ciphers = options.ciphers;
  if (!options.password_file.empty() && options.password_stdin) {
    return InvalidArgumentError("give password_file or password_stdin, not both");
  }
  if (!options.password_file.empty()) {
    OBJFS_ASSIGN_OR_RETURN(sftp_options.password, ReadPasswordLine(options.password_file));
  } else if (options.password_stdin) {
    OBJFS_ASSIGN_OR_RETURN(sftp_options.password, ReadPasswordLine(""));
  }
  sftp_options.metrics = &metrics;
  sftp_options.journal = uploads;
  const std::string server =
      sftp_options.user + "@" + sftp_options.host + ":" + std::to_string(sftp_options.port);

  // Connects, checks the host key, logs in and stats the root directory.
  Result<std::unique_ptr<sftp::SftpStore>> created = sftp::SftpStore::Create(sftp_options);
  Status checked = created.ok() ? (*created)->CheckRoot() : created.status();
  if (checked.code() == StatusCode::kNotFound) {
    return NotFoundError("directory " + sftp_options.root + " does not exist on " + server);
  }
  OBJFS_RETURN_IF_ERROR(checked);
  sftp::SftpStore* sftp = created->get();
  if (context.stop_threads != nullptr) *context.stop_threads = [sftp] { sftp->StopThreads(); };
  if (context.start_threads != nullptr) {
    *context.start_threads = [sftp] { sftp->StartThreads(); };
  }
  auto remove = [sftp](const OpenUploadRecord& r) { return sftp->RemoveTemporary(r.name); };
  SayCleared(uploads->ClearLeftovers(remove), "temporary upload file", "an earlier mount", log);
  if (context.clear_upload != nullptr) *context.clear_upload = {remove, "temporary upload file"};

  // ---- The SFTP store stack, bottom to top: ----
  //   SftpStore -> MetricsStore -> ContentEtagStore -> Filesystem
  // SftpStore's ETags are versions (size and mtime); ContentEtagStore keeps the content MD5s
  // of files in the cache directory (which exists by now) and turns an MD5 If-Match back into
  // the version it was recorded for. Further SFTP-only wrappers go here.
  std::shared_ptr<ObjectStore> store(std::move(created).value());
  store = std::make_shared<MetricsStore>(std::move(store), metrics, /*log_calls=*/true);
  OBJFS_ASSIGN_OR_RETURN(StoreDb db, StoreDb::Open(options.fs.cache_dir + "/db"));
  store = std::make_shared<ContentEtagStore>(std::move(store),
                                             std::make_shared<StoreDb>(std::move(db)), &metrics);
  return store;
}

// The arguments of fuse_session_new: program name, debug, and the mount options.
std::vector<std::string> FuseArguments(const MountOptions& options,
                                       const FuseAdapterOptions& adapter_options) {
  std::vector<std::string> args = {"objfs"};
  if (options.debug) args.push_back("-d");
  std::string mount_options = "subtype=objfs,max_read=" + std::to_string(adapter_options.max_read);
  if (!options.has_fsname) {
    std::string fsname = "objfs:" + options.url.text;
    std::string escaped;
    for (char c : fsname) {
      if (c == ',' || c == '\\') escaped.push_back('\\');
      escaped.push_back(c);
    }
    mount_options += ",fsname=" + escaped;
  }
  for (const std::string& opt : options.fuse_options) mount_options += "," + opt;
  args.push_back("-o");
  args.push_back(mount_options);
  return args;
}

int Mount(const MountOptions& given_options, const Scheme& scheme) {
  Reporter reporter;
  MountOptions options = given_options;
  Status logging = Logger::Instance().Configure(options.log);
  if (!logging.ok()) {
    reporter.Error(logging.message());
    return 1;
  }

  Status mount_point = CheckMountPoint(options.mountpoint);
  if (!mount_point.ok()) {
    reporter.Error(mount_point.message());
    return 1;
  }
  std::error_code ec;
  std::filesystem::path mountpoint = std::filesystem::canonical(options.mountpoint, ec);
  if (ec) {
    reporter.Error("cannot use mount point '" + options.mountpoint + "': " + ec.message());
    return 1;
  }

  Status not_mounted = CheckNotMounted(mountpoint.string());
  if (!not_mounted.ok()) {
    reporter.Error(not_mounted.message());
    return 1;
  }
  if (!options.nonempty) {
    Status empty = CheckEmpty(mountpoint.string());
    if (!empty.ok()) {
      reporter.Error(empty.message());
      return 1;
    }
  }
  if (options.unchecked_other_users) {
    reporter.Warn(
        "allow_other with no_default_permissions: no permission is checked, "
        "every local user may read, change and remove every file of this mount");
  }

  sigset_t termination = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &termination, nullptr);

  // The cache directory comes first: stores may keep state in it.
  {
    struct stat st {};
    Status cache_dir = ::lstat(options.fs.cache_dir.c_str(), &st) == 0
                           ? Status::Ok()
                           : CreatePrivateDirectories(options.fs.cache_dir);
    if (cache_dir.ok()) cache_dir = CheckCacheDirectory(options.fs.cache_dir);
    if (!cache_dir.ok()) {
      reporter.Error(cache_dir.message());
      return 1;
    }
  }
  options.fs.cache_dir = std::filesystem::canonical(options.fs.cache_dir, ec).string();
  if (ec) {
    reporter.Error("cannot use cache directory '" + given_options.fs.cache_dir +
                   "': " + ec.message());
    return 1;
  }
  // One mount per cache directory: a second one would upload (and then delete) the first one's
  // staged files as leftovers of a crash. The lock goes with the process, even a killed one.
  const std::string lock_path = options.fs.cache_dir + "/.lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    reporter.Error(err == EWOULDBLOCK
                       ? "cache directory '" + options.fs.cache_dir +
                             "' is in use by another objfs mount; give each mount its own "
                             "-o cache_dir="
                       : "cannot lock '" + lock_path + "': " + std::strerror(err));
    return 1;
  }
  // The URL is checked now, the server once the store knows it (check_server below).
  CacheScope cache_scope{.url = CanonicalUrl(options.url), .server = ""};
  if (Status scope = CheckCacheScope(options.fs.cache_dir, cache_scope, nullptr, /*claim=*/false);
      !scope.ok()) {
    reporter.Error(scope.message());
    return 1;
  }
  const FilesystemOptions& fs_options = options.fs;

  // Idle read-ahead buffers kept for reuse count against the prefetch memory too.
  BufferPool::Shared().SetKeepBytes(std::min<size_t>(64 << 20, fs_options.prefetch_memory / 4));

  // What uploads the server holds for this mount, so that the next one can clear those a
  // crash leaves (cache/upload_records.h).
  Result<std::unique_ptr<UploadRecords>> upload_records =
      UploadRecords::Open(options.fs.cache_dir + "/uploads");
  if (!upload_records.ok()) {
    reporter.Error(upload_records.status().message());
    return 1;
  }
  std::shared_ptr<UploadRecords> uploads = std::move(upload_records).value();

  Metrics metrics;
  uploads->CountAbandonedIn(&metrics.abandoned_uploads);
  // What the store, the caches and the file system say, each line at its level, to the sink
  // chosen by -o log= (the Reporter's, so on standard error until the mount serves).
  const LogFunction log = [](LogLevel level, const std::string& message) { Log(level, message); };
  std::function<void()> stop_threads, start_threads;
  UploadClearing clearing;
  Result<std::shared_ptr<ObjectStore>> store = scheme.open(StoreContext{
      .options = options,
      .metrics = metrics,
      .uploads = uploads,
      .log = log,
      .stop_threads = &stop_threads,
      .start_threads = &start_threads,
      .clear_upload = &clearing,
      .check_server = [&](std::string_view endpoint) {
        cache_scope.server = ServerName(endpoint);
        return CheckCacheScope(options.fs.cache_dir, cache_scope, uploads.get(), /*claim=*/false);
      }});
  if (!store.ok()) {
    reporter.Error(store.status().message());
    return 1;
  }
  if (Status scope =
          CheckCacheScope(options.fs.cache_dir, cache_scope, uploads.get(), /*claim=*/true);
      !scope.ok()) {
    // A full cache disk (the mount that must upload what a crash left there) mounts all the
    // same; only the check of a later mount is lost.
    reporter.Warn("cache directory '" + options.fs.cache_dir + "' is not marked as " +
                  cache_scope.Describe() + "'s (" + scope.message() +
                  "): a mount of another URL over it will not be refused");
  }

  // The disk cache of object data, in blocks the size of the prefetcher's reads. Opened (and
  // locked) before mounting, so that a directory another mount holds fails the mount.
  std::shared_ptr<DataCache> data_cache;
  if (!options.data_cache.empty()) {
    const std::string dir = AbsolutePath(options.data_cache);
    struct stat st {};
    Status usable = ::lstat(dir.c_str(), &st) == 0 ? Status::Ok() : CreatePrivateDirectories(dir);
    if (usable.ok()) usable = CheckCacheDirectory(dir, "data_cache");
    if (!usable.ok()) {
      reporter.Error(usable.message());
      return 1;
    }
    DataCacheOptions cache_options;
    cache_options.dir = dir;
    cache_options.max_bytes = options.data_cache_size;
    cache_options.block_size = static_cast<uint32_t>(std::min<uint64_t>(
        EffectiveReadBuffer(fs_options.prefetch.read_buffer, (*store)->capabilities().read_unit),
        UINT32_MAX));
    cache_options.scope = options.url.text + " " + options.endpoint;
    cache_options.log = log;
    Result<std::unique_ptr<DataCache>> opened = DataCache::Open(std::move(cache_options), &metrics);
    const StatusCode code = opened.ok() ? StatusCode::kOk : opened.status().code();
    if (code == StatusCode::kNoSpace || code == StatusCode::kIoError) {
      // A full or failing cache disk costs speed, never the mount.
      reporter.Warn("data cache " + dir +
                    " unusable, reads go uncached: " + opened.status().message());
    } else if (!opened.ok()) {
      reporter.Error(opened.status().message());
      return 1;
    } else {
      data_cache = std::move(opened).value();
    }
  }

  FuseAdapterOptions adapter_options;
  adapter_options.direct_io = options.direct_io;
  adapter_options.log = log;
  FuseAdapter adapter(adapter_options);
  std::vector<std::string> fuse_arg_strings = FuseArguments(options, adapter_options);
  std::vector<char*> fuse_argv;
  fuse_argv.reserve(fuse_arg_strings.size());
  for (std::string& arg : fuse_arg_strings) fuse_argv.push_back(arg.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fuse_argv.size()), fuse_argv.data());
  fuse_session* session = adapter.NewSession(&args);
  if (session == nullptr) {
    reporter.Error("libfuse rejected the mount options");
    fuse_opt_free_args(&args);
    return 1;
  }
  if (fuse_set_signal_handlers(session) != 0) {
    reporter.Error("cannot install signal handlers");
    fuse_session_destroy(session);
    fuse_opt_free_args(&args);
    return 1;
  }
  if (fuse_session_mount(session, mountpoint.c_str()) != 0) {
    reporter.Error("cannot mount at '" + mountpoint.string() + "'");
    fuse_remove_signal_handlers(session);
    fuse_session_destroy(session);
    fuse_opt_free_args(&args);
    return 1;
  }

  // Sequential reads in pieces of read_buffer, up to max_read (fs/kernel_readahead.h); never
  // below the kernel's 128 KiB. Only root may: for anyone else the kernel's default stays,
  // which works, with more and smaller requests. Written before the loop answers the kernel's
  // INIT, whose reply can only lower it (and asks for max_readahead, which is max_read).
  // The buffer as the filesystem will use it (SFTP: whole multiples of the server's max read
  // length), so that the kernel's requests line up with the daemon's reads.
  const uint64_t kernel_readahead = std::clamp<uint64_t>(
      EffectiveReadBuffer(fs_options.prefetch.read_buffer, (*store)->capabilities().read_unit),
      128 << 10, adapter_options.max_readahead);
  Status readahead = SetKernelReadahead(mountpoint.string(), "fuse.objfs", kernel_readahead);
  if (!readahead.ok() && options.debug) {
    reporter.Warn("kernel read-ahead left at its default: " + readahead.message());
  }

  // Threads do not survive the fork of fuse_daemonize, so the filesystem (and its I/O pool)
  // starts only in the process that will serve requests, and the SFTP store's watchdog, which
  // checking the server started, stops for the fork and starts again after it.
  if (stop_threads) stop_threads();
  if (fuse_daemonize(options.foreground ? 1 : 0) != 0) {
    reporter.Error("cannot go to the background");
    fuse_session_unmount(session);
    fuse_remove_signal_handlers(session);
    fuse_session_destroy(session);
    fuse_opt_free_args(&args);
    return 1;
  }
  reporter.set_daemon(!options.foreground);
  if (start_threads) start_threads();

  int exit_code = 0;
  FilesystemOptions logged_options = fs_options;
  // With direct_io the kernel caches no pages to keep.
  logged_options.kernel_page_cache = !options.direct_io;
  logged_options.log = log;
  // An upload whose abort failed while the server was away is cleared once the background
  // uploads show that it answers again.
  constexpr std::string_view kFailedAborts = "this mount's failed aborts";
  if (clearing.clear) {
    logged_options.clear_abandoned_uploads = [uploads, clearing, log, kFailedAborts] {
      SayCleared(uploads->ClearAbandoned(clearing.clear), clearing.kind, kFailedAborts, log);
    };
  }
  std::shared_ptr<ObjectStore> served = *store;
  if (options.url.scheme == UrlScheme::kS3) {
    // S3 listings lack metadata: what HEADs found is kept for the next mount, on top of the
    // stack (keys as the filesystem names them). A cache only: without it, the mount HEADs
    // as before.
    Result<StoreDb> db = StoreDb::Open(fs_options.cache_dir + "/db");
    if (db.ok()) {
      served = std::make_shared<ListingAttrStore>(
          std::move(served), std::make_shared<StoreDb>(std::move(db).value()), &metrics);
    } else {
      reporter.Warn("attributes are not kept between mounts: " + db.status().message());
    }
  }
  if (data_cache != nullptr) {
    // Beneath the filesystem, which reads with the If-Match the blocks are keyed by, and above
    // the metrics: a block served from disk is no backend request.
    served = std::make_shared<DataCacheStore>(std::move(served), data_cache, &metrics);
  }
  Result<std::unique_ptr<Filesystem>> fs = Filesystem::Create(served, logged_options, &metrics);
  if (!fs.ok()) {
    reporter.Error(fs.status().message());
    exit_code = 1;
  } else {
    Status recovered = (*fs)->RecoverStaged();
    if (!recovered.ok()) {
      reporter.Warn(
          "staged data or metadata changes of an earlier mount not in the "
          "store yet (kept in " +
          fs_options.cache_dir + "): " + recovered.message());
    }
    adapter.set_filesystem(fs->get());
    std::unique_ptr<MetricsLogger> metrics_logger;
    if (options.log_metrics > 0) {
      Filesystem* served_fs = fs->get();
      metrics_logger = std::make_unique<MetricsLogger>(
          Millis(options.log_metrics), [served_fs, &adapter]() -> std::string {
            Result<std::string> text = served_fs->GetXattr(kRootIno, kStatsXattr);
            return (text.ok() ? *text : std::string()) + adapter.reply_log().ToText();
          });
    }
    pthread_sigmask(SIG_UNBLOCK, &termination, nullptr);
    int loop_result = adapter.Run(session);
    pthread_sigmask(SIG_BLOCK, &termination, nullptr);
    metrics_logger.reset();
    if (loop_result < 0) {
      reporter.Error(std::string("the request loop failed: ") + std::strerror(-loop_result));
      exit_code = 1;
    }
    // Whatever is still to be uploaded, however many files, gets operation_timeout in all: a
    // server that stopped answering must not keep the process alive. What misses it stays
    // staged in cache_dir for the next mount.
    CapCallDeadlines(DeadlineClock::now() + Millis(options.operation_timeout));
    Status flushed = (*fs)->FlushAll();
    if (!flushed.ok()) {
      reporter.Error("unsaved data could not be uploaded (kept in " + fs_options.cache_dir +
                     "): " + flushed.message());
      exit_code = 1;
    }
  }

  fuse_remove_signal_handlers(session);
  fuse_session_unmount(session);
  if (adapter.SessionReleased(std::chrono::seconds(5))) {
    fuse_session_destroy(session);  // runs the destroy request's flush if the kernel sent none
  } else {
    // A page drop still in the kernel after the unmount: its thread would touch the session
    // after fuse_session_destroy freed it. The session is left to the process's exit, and the
    // flush its destroy would run is run here.
    reporter.Warn("a page drop sent to the kernel has not returned since the unmount");
    adapter.FlushAllOnDestroy();
  }
  fuse_opt_free_args(&args);
  if (fs.ok() && exit_code == 0 && !adapter.destroy_status().ok()) {
    reporter.Error("unsaved data could not be uploaded: " + adapter.destroy_status().message());
    exit_code = 1;
  }
  adapter.set_filesystem(nullptr);
  // Its destruction runs the aborts still queued; the uploads whose abort failed while the
  // server was away would otherwise stay on the server until the next mount, which may never
  // come (within the deadline above: a server still away leaves them for that mount). Only
  // those: an upload a cp on the server may still be writing was never aborted, and stays
  // noted for the next mount, as a cp that has not opened it yet could make it again.
  if (fs.ok()) fs->reset();
  if (clearing.clear) {
    SayCleared(uploads->ClearAbandoned(clearing.clear), clearing.kind, kFailedAborts, log);
  }
  return exit_code;
}

}  // namespace

std::vector<Scheme> StandardSchemes() {
  return {{.syntax = {.name = "s3"}, .open = OpenS3},
          {.syntax = {.name = "sftp"}, .open = OpenSftp}};
}

std::string VersionText() {
  const curl_version_info_data* curl = curl_version_info(CURLVERSION_NOW);
  std::string text = std::string("objfs ") + OBJFS_VERSION + "\n";
  text += std::string("libfuse ") + fuse_pkgversion() + "\n";
  text += std::string("libssh ") + ssh_version(0) + "\n";
  text += std::string("libcurl ") + (curl != nullptr ? curl->version : "?");
  if (curl != nullptr && curl->ssl_version != nullptr) {
    text += std::string(" (") + curl->ssl_version + ")";
  }
  text += "\n";
  text += std::string(OpenSSL_version(OPENSSL_VERSION)) + "\n";
  return text;
}

int RunObjfs(int argc, char** argv, const std::vector<Scheme>& schemes) {
  if (argc >= 2 && std::string_view(argv[1]) == "stats") {
    return RunStats(std::vector<std::string>(argv + 2, argv + argc));
  }
  InstallCrashReporter();
  // A file size limit (ulimit -f) then fails a staged write past it with EFBIG, which its
  // writer gets; by default its signal would end the mount.
  ::signal(SIGXFSZ, SIG_IGN);
  KeepLargeBuffersMapped();
  std::vector<SchemeSyntax> extra;
  for (const Scheme& scheme : schemes) {
    if (scheme.syntax.name != "s3" && scheme.syntax.name != "sftp") extra.push_back(scheme.syntax);
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  Result<MountOptions> options = ParseMountOptions(args, CurrentMountEnvironment(), extra);
  if (!options.ok()) {
    std::fprintf(stderr, "objfs: %s\n", options.status().message().c_str());
    return 1;
  }
  switch (options->action) {
    case MountAction::kHelp:
      std::fputs(MountUsage(extra).c_str(), stdout);
      return 0;
    case MountAction::kHelpMarkdown:
      std::fputs(OptionsMarkdown().c_str(), stdout);
      return 0;
    case MountAction::kHelpMan:
      std::fputs(OptionsMan().c_str(), stdout);
      return 0;
    case MountAction::kVersion:
      std::fputs(VersionText().c_str(), stdout);
      return 0;
    case MountAction::kMount:
      break;
  }
  for (const Scheme& scheme : schemes) {
    if (scheme.syntax.name == options->url.scheme_name) return Mount(*options, scheme);
  }
  std::fprintf(stderr, "objfs: URL scheme '%s' is not built into this objfs\n",
               options->url.scheme_name.c_str());
  return 1;
}

}  // namespace objfs
