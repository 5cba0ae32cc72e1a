#include "fs/mount_options.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "backend/s3/s3_store.h"
#include "fs/object_metadata.h"

namespace objfs {
namespace {

constexpr size_t kMinReadBuffer = 4096;
// max_metadata: room for mode, owner and mtime at the least; at most what fits in HTTP headers
// of any server.
constexpr uint64_t kMinMaxMetadata = 256;
constexpr uint64_t kMaxMaxMetadata = 1 << 20;

Status Invalid(std::string message) { return InvalidArgumentError(std::move(message)); }

// Splits "a,b,c" on commas; empty pieces are dropped.
std::vector<std::string> SplitOptions(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    if (comma > start) out.emplace_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Result<uint64_t> ParseUnsigned(std::string_view text, std::string_view what) {
  if (text.empty()) return Invalid(std::string(what) + " needs a value");
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return Invalid("bad value '" + std::string(text) + "' for " + std::string(what) +
                     " (expected a non-negative integer)");
    }
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return Invalid("value '" + std::string(text) + "' for " + std::string(what) +
                     " is too large");
    }
    value = value * 10 + digit;
  }
  return value;
}

Result<uint64_t> ParseBounded(std::string_view text, std::string_view what, uint64_t min,
                              uint64_t max) {
  OBJFS_ASSIGN_OR_RETURN(uint64_t value, ParseUnsigned(text, what));
  if (value < min || value > max) {
    return Invalid(std::string(what) + "=" + std::string(text) + " is out of range (" +
                   std::to_string(min) + ".." + std::to_string(max) + ")");
  }
  return value;
}

Result<uint64_t> ParseSizeOption(std::string_view text, std::string_view what, uint64_t min) {
  if (text.empty()) return Invalid(std::string(what) + " needs a value");
  Result<uint64_t> size = ParseSize(text);
  if (!size.ok()) {
    return Invalid("bad size '" + std::string(text) + "' for " + std::string(what) +
                   " (expected e.g. 4096, 64K, 1M, 2G)");
  }
  if (*size < min) {
    return Invalid(std::string(what) + "=" + std::string(text) + " is too small (minimum " +
                   std::to_string(min) + " bytes)");
  }
  return *size;
}

// A size option bounded by S3's limits; `why` ends the message when it is out of range.
Result<uint64_t> ParseS3Size(std::string_view text, std::string_view what, uint64_t min,
                             uint64_t max, std::string_view why) {
  OBJFS_ASSIGN_OR_RETURN(uint64_t size, ParseSizeOption(text, what, 1));
  if (size < min || size > max) {
    auto mib = [](uint64_t n) {
      return n % (1 << 20) == 0 ? std::to_string(n >> 20) + "M" : std::to_string(n);
    };
    return Invalid(std::string(what) + "=" + std::string(text) + " is out of range (" + mib(min) +
                   ".." + mib(max) + "): " + std::string(why));
  }
  return size;
}

Result<double> ParseSeconds(std::string_view text, std::string_view what) {
  std::string copy(text);
  if (copy.empty()) return Invalid(std::string(what) + " needs a value");
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(copy.c_str(), &end);
  if (errno != 0 || end != copy.c_str() + copy.size() || !(value >= 0) || value > 1e9) {
    return Invalid("bad value '" + copy + "' for " + std::string(what) +
                   " (expected a non-negative number of seconds)");
  }
  return value;
}

Result<uint32_t> ParseOctalMask(std::string_view text) {
  if (text.empty()) return Invalid("umask needs a value");
  uint32_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '7') {
      return Invalid("bad value '" + std::string(text) + "' for umask (expected octal, e.g. 022)");
    }
    value = value * 8 + static_cast<uint32_t>(c - '0');
    if (value > 0777) return Invalid("umask=" + std::string(text) + " is out of range (0..0777)");
  }
  return value;
}

// Mount flags that libfuse (3.14) hands to the kernel.
bool IsKernelFlag(std::string_view opt) {
  static constexpr std::string_view kFlags[] = {"rw",      "dev",   "nodev",  "suid",
                                                "nosuid",  "exec",  "noexec", "async",
                                                "dirsync", "atime", "noatime"};
  for (std::string_view flag : kFlags) {
    if (opt == flag) return true;
  }
  return false;
}

// Access-time flags that libfuse 3.14 does not know. objfs keeps no access times, so they
// change nothing; accepted so that an fstab line or a habit does not make the mount fail.
bool IsIgnoredTimeFlag(std::string_view opt) {
  static constexpr std::string_view kFlags[] = {"relatime",      "norelatime", "strictatime",
                                                "nostrictatime", "lazytime",   "nolazytime",
                                                "diratime",      "nodiratime"};
  for (std::string_view flag : kFlags) {
    if (opt == flag) return true;
  }
  return false;
}

// Options of mount(8) and fstab that concern the mount command, not the filesystem.
bool IsMountCommandOption(std::string_view opt) {
  return opt == "auto" || opt == "noauto" || opt == "user" || opt == "nouser" || opt == "_netdev" ||
         opt == "users" || opt == "nofail";
}

// What the options given so far need checked once the URL (which may come after them) is known.
struct GivenOptions {
  bool cache_dir = false;
  bool allow_other = false;
  bool default_permissions = false;
  bool no_default_permissions = false;
  std::string s3_only;    // the first option given that applies to s3:// only
  std::string sftp_only;  // the first option given that applies to sftp:// only
};

bool IsS3Option(std::string_view name) {
  return name == "endpoint" || name == "region" || name == "profile" || name == "path_style" ||
         name == "virtual_host" || name == "multipart_threshold" || name == "part_size" ||
         name == "copy_part_threshold" || name == "parallel_parts" || name == "listing_attrs" ||
         name == "max_metadata";
}

bool IsSftpOption(std::string_view name) {
  return name == "identity" || name == "known_hosts" || name == "accept_new_host_key" ||
         name == "sessions" || name == "password_file" || name == "password_stdin" ||
         name == "ciphers";
}

// `path` with a leading "~" or "~/" replaced by the home directory.
Result<std::string> ExpandHome(std::string_view path, std::string_view what,
                               const MountEnvironment& env) {
  if (path != "~" && path.substr(0, 2) != "~/") return std::string(path);
  if (env.home.empty()) {
    return Invalid("cannot expand '~' in " + std::string(what) + "=" + std::string(path) +
                   ": no home directory");
  }
  return env.home + std::string(path.substr(1));
}

Status ApplyOption(std::string_view opt, MountOptions& out, GivenOptions& given,
                   const MountEnvironment& env) {
  size_t eq = opt.find('=');
  std::string_view name = opt.substr(0, eq);
  std::string_view value = eq == std::string_view::npos ? std::string_view() : opt.substr(eq + 1);
  bool has_value = eq != std::string_view::npos;

  auto need_value = [&]() -> Status {
    if (!has_value || value.empty()) {
      return Invalid("option '" + std::string(name) + "' needs a value (" + std::string(name) +
                     "=...)");
    }
    return Status::Ok();
  };
  auto no_value = [&]() -> Status {
    if (has_value) return Invalid("option '" + std::string(name) + "' takes no value");
    return Status::Ok();
  };
  if (IsS3Option(name) && given.s3_only.empty()) given.s3_only = std::string(name);
  if (IsSftpOption(name) && given.sftp_only.empty()) given.sftp_only = std::string(name);

  if (name == "endpoint") {
    OBJFS_RETURN_IF_ERROR(need_value());
    out.endpoint = std::string(value);
  } else if (name == "region") {
    OBJFS_RETURN_IF_ERROR(need_value());
    out.region = std::string(value);
  } else if (name == "profile") {
    OBJFS_RETURN_IF_ERROR(need_value());
    out.profile = std::string(value);
  } else if (name == "path_style") {
    OBJFS_RETURN_IF_ERROR(no_value());
    out.addressing = s3::Addressing::kPath;
  } else if (name == "virtual_host") {
    OBJFS_RETURN_IF_ERROR(no_value());
    out.addressing = s3::Addressing::kVirtualHost;
  } else if (name == "cache_dir") {
    OBJFS_RETURN_IF_ERROR(need_value());
    out.fs.cache_dir = std::string(value);
    given.cache_dir = true;
  } else if (name == "read_buffer") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t size, ParseSizeOption(value, name, kMinReadBuffer));
    out.fs.prefetch.read_buffer = size;
  } else if (name == "max_readahead") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t size, ParseSizeOption(value, name, kMinReadBuffer));
    out.fs.prefetch.max_readahead = size;
  } else if (name == "uid") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t id, ParseBounded(value, name, 0, 0xfffffffeu));
    out.fs.uid = static_cast<uint32_t>(id);
  } else if (name == "gid") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t id, ParseBounded(value, name, 0, 0xfffffffeu));
    out.fs.gid = static_cast<uint32_t>(id);
  } else if (name == "umask") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(out.fs.umask, ParseOctalMask(value));
  } else if (name == "writeback") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(out.fs.writeback, ParseSeconds(value, name));
  } else if (name == "metadata_delay") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(out.fs.metadata_delay, ParseSeconds(value, name));
  } else if (name == "request_timeout" || name == "operation_timeout") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(double seconds, ParseSeconds(value, name));
    if (seconds < 1 || seconds > 86400) {
      return Invalid(std::string(name) + "=" + std::string(value) +
                     " is out of range (1..86400 seconds)");
    }
    (name == "request_timeout" ? out.request_timeout : out.operation_timeout) = seconds;
  } else if (name == "attr_timeout") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(double seconds, ParseSeconds(value, name));
    out.fs.attr_timeout = seconds;
    out.fs.entry_timeout = seconds;
  } else if (name == "negative_timeout") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(out.fs.negative_timeout, ParseSeconds(value, name));
  } else if (name == "multipart_threshold") {
    // S3 refuses a single PUT above 5 GiB; below 5 MiB a multipart upload buys nothing.
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(out.multipart_threshold,
                           ParseS3Size(value, name, s3::kMinPartSize, s3::kMaxPartSize,
                                       "a single PUT is at most 5 GiB"));
  } else if (name == "part_size") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(out.part_size,
                           ParseS3Size(value, name, s3::kMinPartSize, s3::kMaxPartSize,
                                       "S3 parts are 5 MiB to 5 GiB"));
  } else if (name == "copy_part_threshold") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(
        out.copy_part_threshold,
        ParseS3Size(value, name, 1, s3::kMaxPartSize, "a single CopyObject is at most 5 GiB"));
  } else if (name == "max_metadata") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t size, ParseSizeOption(value, name, kMinMaxMetadata));
    if (size > kMaxMaxMetadata) {
      return Invalid("max_metadata=" + std::string(value) + " is too large (maximum " +
                     std::to_string(kMaxMaxMetadata) + " bytes)");
    }
    out.fs.max_metadata = size;
  } else if (name == "parallel_parts") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t n, ParseBounded(value, name, 1, 256));
    out.parallel_parts = static_cast<int>(n);
  } else if (name == "identity") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(std::string path, ExpandHome(value, name, env));
    out.identity_files.push_back(std::move(path));
  } else if (name == "known_hosts") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(out.known_hosts, ExpandHome(value, name, env));
  } else if (name == "accept_new_host_key") {
    OBJFS_RETURN_IF_ERROR(no_value());
    out.accept_new_host_key = true;
  } else if (name == "password_file") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(out.password_file, ExpandHome(value, name, env));
  } else if (name == "ciphers") {
    // Colon-separated, since commas separate options.
    OBJFS_RETURN_IF_ERROR(need_value());
    out.ciphers = std::string(value);
    for (char& c : out.ciphers) {
      if (c == ':') c = ',';
    }
  } else if (name == "password_stdin") {
    OBJFS_RETURN_IF_ERROR(no_value());
    out.password_stdin = true;
  } else if (name == "sessions") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t n, ParseBounded(value, name, 1, 64));
    out.sessions = static_cast<int>(n);
  } else if (name == "io_threads") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t n, ParseBounded(value, name, 1, 1024));
    out.fs.io_threads = static_cast<int>(n);
  } else if (name == "prefetch_memory") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t size, ParseSizeOption(value, name, kMinReadBuffer));
    out.fs.prefetch_memory = size;
  } else if (name == "listing_attrs") {
    OBJFS_RETURN_IF_ERROR(no_value());
    out.fs.listing_attrs = true;
  } else if (name == "readdir_heads") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t n, ParseBounded(value, name, 0, 1000000));
    out.fs.readdir_heads = n;
  } else if (name == "max_rename_objects") {
    OBJFS_RETURN_IF_ERROR(need_value());
    OBJFS_ASSIGN_OR_RETURN(uint64_t n,
                           ParseBounded(value, name, 1, std::numeric_limits<uint32_t>::max()));
    out.fs.max_rename_objects = n;
  } else if (name == "direct_io") {
    OBJFS_RETURN_IF_ERROR(no_value());
    out.direct_io = true;
  } else if (name == "ro") {
    OBJFS_RETURN_IF_ERROR(no_value());
    out.fs.read_only = true;
    out.fuse_options.emplace_back("ro");
  } else if (name == "allow_other" || name == "default_permissions" || name == "auto_unmount") {
    OBJFS_RETURN_IF_ERROR(no_value());
    if (name == "allow_other") given.allow_other = true;
    if (name == "default_permissions") given.default_permissions = true;
    out.fuse_options.emplace_back(name);
  } else if (name == "no_default_permissions") {
    OBJFS_RETURN_IF_ERROR(no_value());
    given.no_default_permissions = true;
  } else if (name == "fsname") {
    OBJFS_RETURN_IF_ERROR(need_value());
    out.fuse_options.emplace_back(opt);
    out.has_fsname = true;
  } else if (IsKernelFlag(name)) {
    OBJFS_RETURN_IF_ERROR(no_value());
    if (name == "rw") out.fs.read_only = false;
    out.fuse_options.emplace_back(name);
  } else if (name == "sync") {
    // The kernel would send an fsync after every write(2), and each would upload the whole file.
    return Invalid(
        "option 'sync' is not supported: objfs uploads a file when it is closed or fsync'ed");
  } else if (IsIgnoredTimeFlag(name)) {
    OBJFS_RETURN_IF_ERROR(no_value());
  } else if (IsMountCommandOption(name)) {
    // Meaningful to mount(8) only; accepted so that fstab entries work.
  } else {
    return Invalid("unknown option '" + std::string(opt) + "' (see objfs --help)");
  }
  return Status::Ok();
}

uint64_t Fnv1a64(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

// Refuses "." and ".." among the '/'-separated segments of `path`: on S3 they would be keys
// named "..", on SFTP they would leave the directory the URL seems to name.
Status CheckNoDotSegments(std::string_view path, std::string_view url) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view segment = path.substr(start, end - start);
    if (segment == "." || segment == "..") {
      return Invalid("URL '" + std::string(url) + "' has a '" + std::string(segment) +
                     "' path component; name the directory without it");
    }
    start = end + 1;
  }
  return Status::Ok();
}

}  // namespace

Result<MountUrl> ParseMountUrl(std::string_view url) {
  MountUrl out;
  out.text = std::string(url);
  size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return Invalid("'" + std::string(url) +
                   "' is not a URL (expected s3://BUCKET[/PREFIX] or sftp://[USER@]HOST/PATH)");
  }
  std::string_view scheme = url.substr(0, sep);
  std::string_view rest = url.substr(sep + 3);
  if (scheme == "s3") {
    out.scheme = UrlScheme::kS3;
    size_t slash = rest.find('/');
    out.bucket = std::string(rest.substr(0, slash));
    if (out.bucket.empty()) return Invalid("URL '" + std::string(url) + "' names no bucket");
    if (out.bucket.size() < 3 || out.bucket.size() > 63) {
      return Invalid("bucket name '" + out.bucket + "' must be 3 to 63 characters long");
    }
    for (char c : out.bucket) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '.' || c == '_';
      if (!ok) return Invalid("bucket name '" + out.bucket + "' contains '" + c + "'");
    }
    if (slash != std::string_view::npos) {
      std::string_view prefix = rest.substr(slash + 1);
      while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
      if (prefix.find("//") != std::string_view::npos || (!prefix.empty() && prefix[0] == '/')) {
        return Invalid("prefix of URL '" + std::string(url) + "' has an empty path component");
      }
      OBJFS_RETURN_IF_ERROR(CheckNoDotSegments(prefix, url));
      if (!prefix.empty()) out.prefix = std::string(prefix) + "/";
    }
    return out;
  }
  if (scheme == "sftp") {
    out.scheme = UrlScheme::kSftp;
    size_t slash = rest.find('/');
    if (slash == std::string_view::npos) {
      return Invalid("URL '" + std::string(url) + "' names no path (sftp://[USER@]HOST/PATH)");
    }
    std::string_view authority = rest.substr(0, slash);
    out.path = std::string(rest.substr(slash));
    {
      // "/srv/data/" is "/srv/data"; "/" stays. Every other segment must name something.
      std::string_view path = out.path;
      while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
      if (path.size() > 1) {
        if (path.find("//") != std::string_view::npos) {
          return Invalid("path of URL '" + std::string(url) + "' has an empty path component");
        }
        OBJFS_RETURN_IF_ERROR(CheckNoDotSegments(path.substr(1), url));
      }
    }
    size_t at = authority.rfind('@');
    if (at != std::string_view::npos) {
      out.user = std::string(authority.substr(0, at));
      if (out.user.empty()) return Invalid("URL '" + std::string(url) + "' has an empty user");
      authority = authority.substr(at + 1);
    }
    std::string_view host = authority;
    if (!host.empty() && host[0] == '[') {  // [IPv6]:port
      size_t close = host.find(']');
      if (close == std::string_view::npos) {
        return Invalid("URL '" + std::string(url) + "' has an unterminated '['");
      }
      out.host = std::string(host.substr(1, close - 1));
      host = host.substr(close + 1);
      if (!host.empty() && host[0] != ':') {
        return Invalid("URL '" + std::string(url) + "' has junk after ']'");
      }
    } else {
      size_t colon = host.find(':');
      out.host = std::string(host.substr(0, colon));
      host = colon == std::string_view::npos ? std::string_view() : host.substr(colon);
    }
    if (!host.empty()) {  // ":PORT"
      Result<uint64_t> port = ParseBounded(host.substr(1), "port", 1, 65535);
      if (!port.ok()) {
        return Invalid("bad port '" + std::string(host.substr(1)) + "' in URL '" +
                       std::string(url) + "'");
      }
      out.port = static_cast<int>(*port);
    }
    if (out.host.empty()) return Invalid("URL '" + std::string(url) + "' names no host");
    return out;
  }
  return Invalid("unsupported URL scheme '" + std::string(scheme) + "' (use s3:// or sftp://)");
}

Result<uint64_t> ParseSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return Invalid("bad size '" + std::string(text) + "'");
  OBJFS_ASSIGN_OR_RETURN(uint64_t value, ParseUnsigned(text.substr(0, digits), "size"));
  std::string_view suffix = text.substr(digits);
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      case 't':
      case 'T':
        shift = 40;
        break;
      default:
        return Invalid("bad size '" + std::string(text) + "'");
    }
    std::string_view unit = suffix.substr(1);
    if (!unit.empty() && unit != "B" && unit != "iB" && unit != "b" && unit != "ib") {
      return Invalid("bad size '" + std::string(text) + "'");
    }
  }
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return Invalid("size '" + std::string(text) + "' is too large");
  }
  return value << shift;
}

MountEnvironment CurrentMountEnvironment() {
  MountEnvironment env;
  env.uid = static_cast<uint32_t>(::getuid());
  env.gid = static_cast<uint32_t>(::getgid());
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') {
    env.home = home;
  } else if (const passwd* pw = ::getpwuid(::getuid());
             pw != nullptr && pw->pw_dir != nullptr && pw->pw_dir[0] == '/') {
    env.home = pw->pw_dir;
  }
  if (xdg != nullptr && xdg[0] == '/') {
    env.cache_root = std::string(xdg) + "/objfs";
  } else if (!env.home.empty()) {
    env.cache_root = env.home + "/.cache/objfs";
  } else {
    env.cache_root = "/tmp/objfs-" + std::to_string(env.uid);
  }
  return env;
}

std::string MountCacheName(const MountUrl& url) {
  std::string canonical;
  if (url.scheme == UrlScheme::kS3) {
    canonical = "s3://" + url.bucket + "/" + url.prefix;
  } else {
    canonical = "sftp://" + url.user + "@" + url.host + ":" + std::to_string(url.port) + url.path;
  }
  std::string readable;
  for (char c : canonical.substr(canonical.find("://") + 3)) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_';
    if (readable.size() >= 64) break;
    char out = keep ? c : '-';
    if (out == '-' && (readable.empty() || readable.back() == '-')) continue;
    readable += out;
  }
  while (!readable.empty() && readable.back() == '-') readable.pop_back();
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(Fnv1a64(canonical)));
  std::string scheme = url.scheme == UrlScheme::kS3 ? "s3" : "sftp";
  return scheme + "-" + readable + "-" + std::string(hash, 12);
}

Result<MountOptions> ParseMountOptions(const std::vector<std::string>& args,
                                       const MountEnvironment& env) {
  MountOptions out;
  out.fs.metadata_delay = kDefaultMetadataDelay;
  out.fs.uid = env.uid;
  out.fs.gid = env.gid;
  GivenOptions given;
  std::vector<std::string> positional;
  bool only_positional = false;

  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (only_positional || arg.empty() || arg[0] != '-' || arg == "-") {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positional = true;
    } else if (arg == "-h" || arg == "--help") {
      out.action = MountAction::kHelp;
      return out;
    } else if (arg == "-V" || arg == "--version") {
      out.action = MountAction::kVersion;
      return out;
    } else if (arg == "-f") {
      out.foreground = true;
    } else if (arg == "-d") {
      out.debug = true;
      out.foreground = true;
    } else if (arg == "-o" || arg.rfind("-o", 0) == 0) {
      std::string list;
      if (arg == "-o") {
        if (i + 1 >= args.size()) return Invalid("-o needs a list of options");
        list = args[++i];
      } else {
        list = arg.substr(2);
      }
      for (const std::string& opt : SplitOptions(list)) {
        OBJFS_RETURN_IF_ERROR(ApplyOption(opt, out, given, env));
      }
    } else {
      return Invalid("unknown argument '" + arg + "' (see objfs --help)");
    }
  }

  if (positional.empty()) return Invalid("missing URL and mount point (see objfs --help)");
  if (positional.size() == 1) return Invalid("missing mount point (see objfs --help)");
  if (positional.size() > 2) {
    return Invalid("unexpected argument '" + positional[2] + "' (see objfs --help)");
  }
  OBJFS_ASSIGN_OR_RETURN(out.url, ParseMountUrl(positional[0]));
  out.mountpoint = positional[1];
  if (out.mountpoint.empty()) return Invalid("the mount point is an empty string");

  if (out.fs.prefetch.max_readahead < out.fs.prefetch.read_buffer) {
    return Invalid("max_readahead (" + std::to_string(out.fs.prefetch.max_readahead) +
                   ") must not be smaller than read_buffer (" +
                   std::to_string(out.fs.prefetch.read_buffer) + ")");
  }
  if (out.url.scheme == UrlScheme::kSftp) {
    if (!given.s3_only.empty()) {
      return Invalid("option '" + given.s3_only + "' applies to s3:// URLs, not to sftp://");
    }
    if (out.known_hosts.empty() && !env.home.empty()) {
      out.known_hosts = env.home + "/.ssh/known_hosts";
    }
  } else {
    if (!given.sftp_only.empty()) {
      return Invalid("option '" + given.sftp_only + "' applies to sftp:// URLs, not to s3://");
    }
    if (out.fs.max_metadata == 0) out.fs.max_metadata = kDefaultMaxMetadata;
  }
  if (given.default_permissions && given.no_default_permissions) {
    return Invalid(
        "options 'default_permissions' and 'no_default_permissions' contradict each other");
  }
  // Without default_permissions the kernel checks nothing for FUSE and objfs checks nothing
  // either: with allow_other every local user could read and change every file.
  if (given.allow_other && !given.default_permissions) {
    if (given.no_default_permissions) {
      out.unchecked_other_users = true;
    } else {
      out.fuse_options.emplace_back("default_permissions");
    }
  }
  if (!given.cache_dir) out.fs.cache_dir = env.cache_root + "/" + MountCacheName(out.url);
  return out;
}

std::string MountUsage() {
  return R"(usage: objfs URL MOUNTPOINT [-f] [-d] [-o OPTION[,OPTION...]]...

Mounts an object store bucket (or an SFTP directory) as a directory.

URL:
  s3://BUCKET[/PREFIX]            the keys of BUCKET (under PREFIX/)
  sftp://[USER@]HOST[:PORT]/PATH  a directory on an SFTP server

Arguments:
  -f                  stay in the foreground
  -d                  print libfuse's debug output (implies -f)
  -h, --help          print this help
  -V, --version       print the version

S3 options (credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or
~/.aws/credentials; the endpoint and region also from AWS_ENDPOINT_URL and AWS_REGION):
  endpoint=URL              e.g. http://127.0.0.1:8000 (default: AWS)
  region=NAME               signing region (default us-east-1)
  profile=NAME              profile of the shared credentials file
  path_style | virtual_host how requests address the bucket (default: automatic)
  multipart_threshold=SIZE  uploads above this are multipart (default 64M)
  part_size=SIZE            multipart part size (default 16M)
  copy_part_threshold=SIZE  server-side copies above this are multipart (default 5G)
  parallel_parts=N          parts in flight per upload or copy (default 4)
  max_metadata=SIZE         user metadata an object may get: mode, owner, mtime and user
                            extended attributes together (default 2048, AWS's limit; a
                            setxattr over it fails with E2BIG or ENOSPC)
  listing_attrs             ls -l with no HEAD per file: listed files show the mount's default
                            mode and owner and their Last-Modified until a lookup reads
                            their headers (for buckets that s3fs and objfs did not write)

SFTP options (the user defaults to the caller's name, the port to 22):
  identity=FILE             private key to offer; repeat to offer several, in order
                            (default: ssh-agent if SSH_AUTH_SOCK is set, then
                            ~/.ssh/id_ed25519, id_ecdsa, id_rsa)
  known_hosts=FILE          host keys to check the server's against
                            (default ~/.ssh/known_hosts)
  accept_new_host_key       add the key of a host not in known_hosts to it (trust on first
                            use); a changed key is always refused
  sessions=N                SSH connections, i.e. requests served at once, 1..64 (default 4)
  password_file=FILE        log in with the password on FILE's first line when no key is
                            accepted (password or keyboard-interactive authentication)
  password_stdin            the same with a password read as one line from standard input
  ciphers=NAME[:NAME...]    ciphers to offer, in order (default: AES-GCM first on CPUs
                            with AES instructions, else libssh's order)

Filesystem options:
  cache_dir=DIR             staging files of unsaved writes (default: a directory per URL
                            under $XDG_CACHE_HOME/objfs or ~/.cache/objfs)
  read_buffer=SIZE          smallest backend read, at least 4K (default 1M)
  max_readahead=SIZE        largest sequential read-ahead window (default 64M)
  prefetch_memory=SIZE      prefetched data across all open files (default 256M)
  io_threads=N              backend I/O threads for prefetching (default 8)
  uid=N, gid=N              owner of objects without owner metadata (default: the caller)
  umask=OCTAL               applied to default permissions (default 022)
  attr_timeout=SECONDS      attribute and name cache lifetime (default 1)
  negative_timeout=SECONDS  lifetime of "no such file" answers (default 1)
  writeback=SECONDS         upload a closed file this long after it was closed instead of
                            in close(2), so that renames and attribute changes right after
                            (rsync) cost no requests; fsync and unmount still upload at once,
                            and a crash leaves the data staged for the next mount (default 0)
  metadata_delay=SECONDS    S3: apply chmod, chown, touch and setfattr of a closed file to
                            the object within this long, so that a rename or upload right
                            after carries them instead of a copy each; fsync and unmount
                            apply them at once, a crash at the next mount (default 1; 0: at
                            once)
  direct_io                 bypass the kernel's page cache: large sequential reads cost one
                            copy less, small reads a request each, and MAP_SHARED mmap of
                            a file fails with ENODEV
  max_rename_objects=N      refuse renaming directories holding more objects (default 10000)
  readdir_heads=N           a listing HEADs the first N files it shows for their metadata,
                            a page at a time, so that ls -l needs no lookup per name
                            (default 10000; 0: never)

Bounded waits (s3:// and sftp://):
  request_timeout=SECONDS   a request that moves under 1 KiB/s (S3) or gets no reply (SFTP)
                            for this long is abandoned and retried (default 30); server-side
                            copies and completions may be silent for 300 s or more
  operation_timeout=SECONDS a backend call's attempts and waits together: after this long it
                            fails with EIO and the log says why; unmount gives what is left
                            to upload this long in all (default 120)

FUSE and mount options:
  ro, default_permissions, fsname=NAME
  allow_other               let other users use the mount; implies default_permissions (the
                            kernel checks the modes and owners shown)
  no_default_permissions    with allow_other: check no permissions at all (any local user may
                            read and change every file)
  auto_unmount              unmount when objfs exits, even when it is killed
  rw, dev, nodev, suid, nosuid, exec, noexec, async, dirsync, atime, noatime
  (relatime, lazytime and the other access-time flags are accepted and change nothing)
  auto, noauto, user, nouser, _netdev, nofail

SIZE is a number of bytes with an optional K, M, G or T suffix (powers of 1024).
)";
}

}  // namespace objfs
