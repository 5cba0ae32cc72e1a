#include "fs/cli/mount_options.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  OBJFS_ASSIGN_OR_RETURN(uint64_t size, ParseSizeOption(text, what, 0));
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

}  // namespace

// What the options given so far need checked once the URL (which may come after them) is known.
struct OptionState {
  const MountEnvironment& env;
  bool cache_dir = false;
  bool data_cache_size = false;
  bool allow_other = false;
  bool default_permissions = false;
  bool no_default_permissions = false;
  // Each option given that not every scheme accepts, in order: its name and its spec.
  std::vector<std::pair<std::string, const OptionSpec*>> scheme_bound{};
};

namespace {

using V = OptionSpec::Value;
using G = OptionSpec::Group;

// Appliers shared by several options; an option's own parsing is a lambda in its declaration.
template <size_t FilesystemOptions::*field>
Status FsSize(std::string_view name, std::string_view value, MountOptions& out, OptionState&) {
  OBJFS_ASSIGN_OR_RETURN(uint64_t size, ParseSizeOption(value, name, kMinReadBuffer));
  out.fs.*field = size;
  return Status::Ok();
}

template <double FilesystemOptions::*field>
Status FsSeconds(std::string_view name, std::string_view value, MountOptions& out, OptionState&) {
  OBJFS_ASSIGN_OR_RETURN(out.fs.*field, ParseSeconds(value, name));
  return Status::Ok();
}

template <double MountOptions::*field>
Status Timeout(std::string_view name, std::string_view value, MountOptions& out, OptionState&) {
  OBJFS_ASSIGN_OR_RETURN(double seconds, ParseSeconds(value, name));
  if (seconds < 1 || seconds > 86400) {
    return Invalid(std::string(name) + "=" + std::string(value) +
                   " is out of range (1..86400 seconds)");
  }
  out.*field = seconds;
  return Status::Ok();
}

template <uint32_t FilesystemOptions::*field>
Status FsId(std::string_view name, std::string_view value, MountOptions& out, OptionState&) {
  OBJFS_ASSIGN_OR_RETURN(uint64_t id, ParseBounded(value, name, 0, 0xfffffffeu));
  out.fs.*field = static_cast<uint32_t>(id);
  return Status::Ok();
}

template <std::string MountOptions::*field>
Status Text(std::string_view, std::string_view value, MountOptions& out, OptionState&) {
  out.*field = std::string(value);
  return Status::Ok();
}

template <std::string MountOptions::*field>
Status PathText(std::string_view name, std::string_view value, MountOptions& out,
                OptionState& state) {
  OBJFS_ASSIGN_OR_RETURN(out.*field, ExpandHome(value, name, state.env));
  return Status::Ok();
}

// Handed to libfuse's mount as it is.
Status FuseFlag(std::string_view name, std::string_view, MountOptions& out, OptionState&) {
  out.fuse_options.emplace_back(name);
  return Status::Ok();
}

Status Ignore(std::string_view, std::string_view, MountOptions&, OptionState&) {
  return Status::Ok();
}

// A value sent as an HTTP header as it is: printable ASCII, no spaces.
Status CheckHeaderToken(std::string_view name, std::string_view value) {
  for (char c : value) {
    if (c <= ' ' || c > '~') {
      return Invalid("bad value '" + std::string(value) + "' for " + std::string(name) +
                     " (printable characters without spaces)");
    }
  }
  return Status::Ok();
}

// The options of the shipped command line, in the order of --help and README.md.
std::vector<OptionSpec> BuildOptionSpecs() {
  const std::vector<std::string_view> s3 = {"s3"};
  const std::vector<std::string_view> sftp = {"sftp"};
  return {
      // ---- S3 ----
      {.names = {"endpoint"},
       .value = V::kRequired,
       .value_name = "URL",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "S3 endpoint, `http://` or `https://`; else `AWS_ENDPOINT_URL_S3`, "
                  "`AWS_ENDPOINT_URL` or the profile's `endpoint_url`",
       .default_value = "AWS's regional endpoint",
       .apply = Text<&MountOptions::endpoint>},
      {.names = {"region"},
       .value = V::kRequired,
       .value_name = "NAME",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "SigV4 signing region; else `AWS_REGION`, `AWS_DEFAULT_REGION` or the "
                  "profile's `region`",
       .default_value = "the bucket's, from the server",
       .apply = Text<&MountOptions::region>},
      {.names = {"profile"},
       .value = V::kRequired,
       .value_name = "NAME",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "profile of `~/.aws/credentials` and `~/.aws/config` to take the credentials "
                  "(and region, endpoint) from, as the AWS CLI's `--profile`",
       .default_value = "the default chain: `AWS_ACCESS_KEY_ID`, web identity, the files' "
                        "`AWS_PROFILE` or `default`, container, instance metadata",
       .apply = Text<&MountOptions::profile>},
      {.names = {"credentials"},
       .value = V::kRequired,
       .value_name = "SOURCE",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "take the credentials from this source only: `environment`, `web_identity`, "
                  "`shared_files`, `container` or `instance_metadata`",
       .default_value = "the first source of the chain that has some",
       .apply =
           [](std::string_view name, std::string_view value, MountOptions& out, OptionState&) {
             for (std::string_view source : s3::kCredentialSources) {
               if (value == source) {
                 out.credentials = std::string(value);
                 return Status::Ok();
               }
             }
             return InvalidArgumentError(
                 std::string(name) + "=" + std::string(value) +
                 ": not environment, web_identity, shared_files, container or instance_metadata");
           }},
      {.names = {"credentials_file"},
       .value = V::kRequired,
       .value_name = "PATH",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "the shared credentials file of this mount (for fstab lines), instead of "
                  "`AWS_SHARED_CREDENTIALS_FILE`",
       .default_value = "`~/.aws/credentials`",
       .apply = PathText<&MountOptions::credentials_file>},
      {.names = {"path_style"},
       .schemes = s3,
       .group = G::kS3,
       .meaning = "address the bucket in the path of each request",
       .default_value = "for an IP address or `localhost`",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.addressing = s3::Addressing::kPath;
             return Status::Ok();
           }},
      {.names = {"virtual_host"},
       .schemes = s3,
       .group = G::kS3,
       .meaning = "address the bucket in the host name of each request",
       .default_value = "for other endpoints",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.addressing = s3::Addressing::kVirtualHost;
             return Status::Ok();
           }},
      {.names = {"multipart_threshold"},
       .value = V::kRequired,
       .value_name = "SIZE",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "uploads above this are multipart (5M..5G, S3's limits, checked at mount)",
       .default_value = "64M",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         // S3 refuses a single PUT above 5 GiB; below 5 MiB a multipart upload buys nothing.
         OBJFS_ASSIGN_OR_RETURN(out.multipart_threshold,
                                ParseS3Size(value, name, s3::kMinPartSize, s3::kMaxPartSize,
                                            "a single PUT is at most 5 GiB"));
         return Status::Ok();
       }},
      {.names = {"part_size"},
       .value = V::kRequired,
       .value_name = "SIZE",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "multipart part size (5M..5G). A file that would need more than 10,000 parts "
                  "is sent in larger ones (the smallest whole MiB that fits, as the AWS CLI "
                  "does); a write or truncate past 5 TiB, S3's largest object, fails with "
                  "`EFBIG`",
       .default_value = "16M",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.part_size,
                                ParseS3Size(value, name, s3::kMinPartSize, s3::kMaxPartSize,
                                            "S3 parts are 5 MiB to 5 GiB"));
         return Status::Ok();
       }},
      {.names = {"copy_part_threshold"},
       .value = V::kRequired,
       .value_name = "SIZE",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "server-side copies above this use UploadPartCopy (at most 5G)",
       .default_value = "5G",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(
             out.copy_part_threshold,
             ParseS3Size(value, name, 1, s3::kMaxPartSize, "a single CopyObject is at most 5 GiB"));
         return Status::Ok();
       }},
      {.names = {"parallel_parts"},
       .value = V::kRequired,
       .value_name = "N",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "parts in flight per upload, copy or edit, a file streamed while written "
                  "included (1..256)",
       .default_value = "4",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(uint64_t n, ParseBounded(value, name, 1, 256));
         out.parallel_parts = static_cast<int>(n);
         return Status::Ok();
       }},
      {.names = {"part_checksum"},
       .value = V::kRequired,
       .value_name = "KIND",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "how each part of a multipart upload is checked: `md5`, by its MD5, hashed "
                  "here as the part is sent and compared with the part ETag the server "
                  "answers; a part that arrived different is sent again with its Content-MD5, "
                  "which the server checks itself (BadDigest), and never completed into the "
                  "object. Where part ETags are not MD5s (SSE-KMS, SSE-C), every part is hashed "
                  "first and carries its Content-MD5. `none`: no checksum, as s3fs sends by "
                  "default: no MD5 pass over the bytes written, and a part is protected in "
                  "transit by TLS (`https://`) or TCP's checksum alone. The ETag shown stays the "
                  "server's. A whole PUT (at most `multipart_threshold`) carries its Content-MD5 "
                  "either way",
       .default_value = "md5",
       .choices = {"md5", "none"},
       .apply = Text<&MountOptions::part_checksum>},
      {.names = {"max_metadata"},
       .value = V::kRequired,
       .value_name = "SIZE",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "the most user metadata a change may give an object: mode, owner, mtime and "
                  "`user.` attributes together (256..1M); a `setfattr` over it fails with "
                  "`E2BIG` or `ENOSPC`",
       .default_value = "2048, AWS's limit",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(uint64_t size, ParseSizeOption(value, name, kMinMaxMetadata));
         if (size > kMaxMaxMetadata) {
           return Invalid("max_metadata=" + std::string(value) + " is too large (maximum " +
                          std::to_string(kMaxMaxMetadata) + " bytes)");
         }
         out.fs.max_metadata = size;
         return Status::Ok();
       }},
      {.names = {"listing_attrs"},
       .schemes = s3,
       .group = G::kS3,
       .meaning = "a listing HEADs no file. Listed files show their size and Last-Modified with "
                  "the mount's default mode and owner, cached like exact attributes, until a "
                  "lookup after `attr_timeout` reads their headers: goofys's and mountpoint-s3's "
                  "trade-off, for buckets that s3fs and objfs did not write (`rsync -a` into "
                  "such a mount sees Last-Modified, not the stored mtime)",
       .default_value = "off",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.fs.listing_attrs = true;
             return Status::Ok();
           }},

      {.names = {"storage_class"},
       .value = V::kRequired,
       .value_name = "CLASS",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "storage class of new objects (`STANDARD`, `STANDARD_IA`, `GLACIER_IR`, ...: "
                  "the server checks the name); a copy or rename keeps it too",
       .default_value = "the bucket's",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_RETURN_IF_ERROR(CheckHeaderToken(name, value));
         out.storage_class = std::string(value);
         return Status::Ok();
       }},
      {.names = {"acl"},
       .value = V::kRequired,
       .value_name = "CANNED",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "canned ACL of new objects, copies included",
       .default_value = "none sent (the bucket's, `private` on AWS)",
       .choices = {"private", "public-read", "public-read-write", "authenticated-read",
                   "aws-exec-read", "bucket-owner-read", "bucket-owner-full-control"},
       .apply = Text<&MountOptions::acl>},
      {.names = {"sse"},
       .value = V::kRequired,
       .value_name = "KIND",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "server-side encryption of new objects, on puts, copies and multipart "
                  "uploads: `AES256` (SSE-S3) or `aws:kms` (SSE-KMS, with `sse_kms_key_id`)",
       .default_value = "the bucket's; a copy or new version of an object keeps that object's",
       .choices = {"AES256", "aws:kms"},
       .apply = Text<&MountOptions::sse>},
      {.names = {"sse_kms_key_id"},
       .value = V::kRequired,
       .value_name = "ID",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "the KMS key of `sse=aws:kms`",
       .default_value = "the account's AWS managed key",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_RETURN_IF_ERROR(CheckHeaderToken(name, value));
         out.sse_kms_key_id = std::string(value);
         return Status::Ok();
       }},
      {.names = {"sse_c_key"},
       .value = V::kRequired,
       .value_name = "FILE",
       .schemes = s3,
       .group = G::kS3,
       .meaning = "SSE-C: encrypt every object with the customer key in FILE (32 bytes, raw or "
                  "base64), sent with each read, put, copy and multipart upload; objects the "
                  "key does not open cannot be read; not with data_cache=",
       .default_value = "none",
       .apply = PathText<&MountOptions::sse_c_key_file>},
      {.names = {"requester_pays"},
       .schemes = s3,
       .group = G::kS3,
       .meaning = "send `x-amz-request-payer: requester` on every request, for buckets whose "
                  "owner charges the requester",
       .default_value = "off",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.requester_pays = true;
             return Status::Ok();
           }},

      // ---- SFTP ----
      {.names = {"identity"},
       .value = V::kRequired,
       .value_name = "FILE",
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "private key to offer; repeat to offer several, in order",
       .default_value = "ssh-agent (when `SSH_AUTH_SOCK` is set), then `~/.ssh/id_ed25519`, "
                        "`id_ecdsa`, `id_rsa`",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState& state) -> Status {
         OBJFS_ASSIGN_OR_RETURN(std::string path, ExpandHome(value, name, state.env));
         out.identity_files.push_back(std::move(path));
         return Status::Ok();
       }},
      {.names = {"known_hosts"},
       .value = V::kRequired,
       .value_name = "FILE",
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "host keys the server's key is checked against",
       .default_value = "the ssh configuration's `UserKnownHostsFile`, else `~/.ssh/known_hosts`; "
                        "then `/etc/ssh/ssh_known_hosts`",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState& state) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.known_hosts, ExpandHome(value, name, state.env));
         out.known_hosts_given = true;
         return Status::Ok();
       }},
      {.names = {"ssh_config"},
       .value = V::kRequired,
       .value_name = "FILE",
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "read this OpenSSH client configuration instead of the default ones, as "
                  "`ssh -F FILE` does (`none`: read none); it resolves the URL's host as ssh "
                  "would (Host aliases, HostName, User, Port, IdentityFile, UserKnownHostsFile, "
                  "GlobalKnownHostsFile, ProxyJump, ProxyCommand), and the URL and -o options win "
                  "over it",
       .default_value = "`~/.ssh/config`, then `/etc/ssh/ssh_config`",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState& state) -> Status {
         if (value == "none") {
           out.ssh_config_given = "none";
           return Status::Ok();
         }
         OBJFS_ASSIGN_OR_RETURN(out.ssh_config_given, ExpandHome(value, name, state.env));
         return Status::Ok();
       }},
      {.names = {"accept_new_host_key"},
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "add the key of a host that known_hosts does not list to it (trust on first "
                  "use); a changed key is always refused",
       .default_value = "off",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.accept_new_host_key = true;
             return Status::Ok();
           }},
      {.names = {"no_server_md5"},
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "compute the MD5 (user.etag) of a file nobody hashed yet here, from its bytes, "
                  "never by running md5sum on the server; files streamed up through the mount are "
                  "then hashed on their way up",
       .default_value = "md5sum on the server where the account may run it, and streamed uploads "
                        "left unhashed for it",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.no_server_md5 = true;
             return Status::Ok();
           }},
      {.names = {"no_server_cp"},
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "copy files on the server (cp within the mount, the unchanged bytes of an "
                  "edit) with copy-data only, never by running cp there",
       .default_value = "a clone by cp on the server where its file system can (XFS, Btrfs) and "
                        "the account may run it",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.no_server_cp = true;
             return Status::Ok();
           }},
      {.names = {"sessions"},
       .value = V::kRequired,
       .value_name = "N",
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "SSH connections, i.e. requests served at once (1..64)",
       .default_value = "4",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(uint64_t n, ParseBounded(value, name, 1, 64));
         out.sessions = static_cast<int>(n);
         return Status::Ok();
       }},
      {.names = {"password_file"},
       .value = V::kRequired,
       .value_name = "FILE",
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "log in with the password on FILE's first line when no key is accepted "
                  "(password or keyboard-interactive authentication)",
       .default_value = "none",
       .apply = PathText<&MountOptions::password_file>},
      {.names = {"password_stdin"},
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "the same with a password read as one line from standard input (without "
                  "echo at a terminal) before objfs goes to the background",
       .default_value = "off",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.password_stdin = true;
             return Status::Ok();
           }},
      {.names = {"ciphers"},
       .value = V::kRequired,
       .value_name = "NAME[:NAME...]",
       .schemes = sftp,
       .group = G::kSftp,
       .meaning = "ciphers to offer, in order, colon-separated",
       .default_value = "AES-GCM first on CPUs with AES instructions, else libssh's order",
       .apply =
           [](std::string_view, std::string_view value, MountOptions& out, OptionState&) {
             // Colon-separated, since commas separate options.
             out.ciphers = std::string(value);
             for (char& c : out.ciphers) {
               if (c == ':') c = ',';
             }
             return Status::Ok();
           }},

      // ---- The filesystem ----
      {.names = {"cache_dir"},
       .value = V::kRequired,
       .value_name = "DIR",
       .meaning = "where writes are staged; created `0700`, and refused unless it belongs to the "
                  "mounting user and no one else can write it (nor a directory above it, but a "
                  "sticky one such as `/tmp`), as ssh checks its keys",
       .default_value = "a directory per URL under `$XDG_CACHE_HOME/objfs` or `~/.cache/objfs`",
       .apply =
           [](std::string_view, std::string_view value, MountOptions& out, OptionState& state) {
             out.fs.cache_dir = std::string(value);
             state.cache_dir = true;
             return Status::Ok();
           }},
      {.names = {"cache_reserve"},
       .value = V::kRequired,
       .value_name = "SIZE",
       .meaning = "free space that writes staged in `cache_dir` leave on its disk beyond the "
                  "blocks the file system keeps for root (ext4's 5%), which they never take "
                  "either, even when objfs runs as root: a write that would take it fails with "
                  "`ENOSPC`, so that no user of an `allow_other` mount can fill that disk",
       .default_value = "0",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.fs.cache_reserve, ParseSizeOption(value, name, 0));
         return Status::Ok();
       }},
      {.names = {"data_cache"},
       .value = V::kRequired,
       .value_name = "DIR",
       .meaning = "keep the data read in blocks of `read_buffer` in DIR, across mounts, and read "
                  "them from there while the object is unchanged; one mount at a time; checked "
                  "as `cache_dir` is",
       .default_value = "none",
       .apply = PathText<&MountOptions::data_cache>},
      {.names = {"data_cache_size"},
       .value = V::kRequired,
       .value_name = "SIZE",
       .meaning = "the most `data_cache` holds; least recently used blocks go first",
       .default_value = "1G",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState& state) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.data_cache_size, ParseSizeOption(value, name, kMinReadBuffer));
         state.data_cache_size = true;
         return Status::Ok();
       }},
      {.names = {"read_buffer"},
       .value = V::kRequired,
       .value_name = "SIZE",
       .meaning = "smallest backend read, at least 4K",
       .default_value = "1M",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.fs.prefetch.read_buffer,
                                ParseSizeOption(value, name, kMinReadBuffer));
         return Status::Ok();
       }},
      {.names = {"max_readahead"},
       .value = V::kRequired,
       .value_name = "SIZE",
       .meaning = "largest sequential read-ahead window, not below `read_buffer`",
       .default_value = "64M",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.fs.prefetch.max_readahead,
                                ParseSizeOption(value, name, kMinReadBuffer));
         return Status::Ok();
       }},
      {.names = {"prefetch_memory"},
       .value = V::kRequired,
       .value_name = "SIZE",
       .meaning = "read-ahead data of all open files together",
       .default_value = "256M",
       .apply = FsSize<&FilesystemOptions::prefetch_memory>},
      {.names = {"io_threads"},
       .value = V::kRequired,
       .value_name = "N",
       .meaning = "backend I/O threads fetching it (1..1024)",
       .default_value = "8",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(uint64_t n, ParseBounded(value, name, 1, 1024));
         out.fs.io_threads = static_cast<int>(n);
         return Status::Ok();
       }},
      {.names = {"direct_io"},
       .meaning = "bypass the kernel's page cache: large sequential reads cost one copy less, "
                  "small reads a request each, and shared `mmap` of a file fails with `ENODEV`",
       .default_value = "off",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.direct_io = true;
             return Status::Ok();
           }},
      {.names = {"uid"},
       .value = V::kRequired,
       .value_name = "N",
       .meaning = "owner of objects without owner metadata",
       .default_value = "the caller",
       .apply = FsId<&FilesystemOptions::uid>},
      {.names = {"gid"},
       .value = V::kRequired,
       .value_name = "N",
       .meaning = "group of objects without owner metadata",
       .default_value = "the caller's",
       .apply = FsId<&FilesystemOptions::gid>},
      {.names = {"umask"},
       .value = V::kRequired,
       .value_name = "OCTAL",
       .meaning = "applied to the permissions of objects without mode metadata",
       .default_value = "022",
       .apply = [](std::string_view, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.fs.umask, ParseOctalMask(value));
         return Status::Ok();
       }},
      {.names = {"attr_timeout"},
       .value = V::kRequired,
       .value_name = "SECONDS",
       .meaning = "how long attributes and names are cached",
       .default_value = "1",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(double seconds, ParseSeconds(value, name));
         out.fs.attr_timeout = seconds;
         out.fs.entry_timeout = seconds;
         return Status::Ok();
       }},
      {.names = {"negative_timeout"},
       .value = V::kRequired,
       .value_name = "SECONDS",
       .meaning = "how long \"no such file\" answers (including a directory listing's) are "
                  "cached",
       .default_value = "1",
       .apply = FsSeconds<&FilesystemOptions::negative_timeout>},
      {.names = {"writeback"},
       .value = V::kRequired,
       .value_name = "SECONDS",
       .meaning = "upload a closed file this long after it was closed instead of in `close`, so "
                  "that renames and attribute changes right after (rsync) cost no requests; "
                  "`fsync` and unmount still upload at once, and a crash leaves the data staged "
                  "for the next mount",
       .default_value = "0",
       .apply = FsSeconds<&FilesystemOptions::writeback>},
      {.names = {"metadata_delay"},
       .value = V::kRequired,
       .value_name = "SECONDS",
       .meaning = "S3: how long a `chmod`, `chown`, `touch` or `setfattr` of a closed file may "
                  "wait for a rename or upload to carry it instead of a copy of its own; `fsync` "
                  "and unmount apply it at once, a crash at the next mount (0: a copy at once)",
       .default_value = "1",
       .apply = FsSeconds<&FilesystemOptions::metadata_delay>},
      {.names = {"max_rename_objects"},
       .value = V::kRequired,
       .value_name = "N",
       .meaning = "largest directory `mv`, in objects",
       .default_value = "10000",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.fs.max_rename_objects,
                                ParseBounded(value, name, 1, std::numeric_limits<uint32_t>::max()));
         return Status::Ok();
       }},
      {.names = {"readdir_heads"},
       .value = V::kRequired,
       .value_name = "N",
       .meaning = "files a listing HEADs for their metadata, a page of 1,000 names at a time, "
                  "until it has shown N (`ls -l` then needs no lookup per name; later files are "
                  "HEADed by the kernel's lookups; 0: never)",
       .default_value = "10000",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.fs.readdir_heads, ParseBounded(value, name, 0, 1000000));
         return Status::Ok();
       }},

      // ---- Bounded waits ----
      {.names = {"request_timeout"},
       .value = V::kRequired,
       .value_name = "SECONDS",
       .group = G::kTimeouts,
       .meaning = "a request moving under 1 KiB/s (S3) or an SFTP connection receiving nothing "
                  "for this long is abandoned and retried; server-side copies and completions "
                  "may be silent for 300 s or more",
       .default_value = "30",
       .apply = Timeout<&MountOptions::request_timeout>},
      {.names = {"operation_timeout"},
       .value = V::kRequired,
       .value_name = "SECONDS",
       .group = G::kTimeouts,
       .meaning = "one backend call's attempts and waits together: after this long it fails "
                  "with `EIO` and the log says why; at unmount, the time what is left to upload "
                  "gets in all",
       .default_value = "120",
       .apply = Timeout<&MountOptions::operation_timeout>},

      // ---- Logs and stats ----
      {.names = {"log"},
       .value = V::kRequired,
       .value_name = "SINK",
       .group = G::kLogs,
       .meaning = "where messages go: `syslog`, `stderr` (under systemd, the journal) or a FILE "
                  "appended to, a time stamp on each line (a regular file of the mounting user's, "
                  "not a symbolic link, not writable by group or others, empty or an objfs "
                  "log; a new one is 0600). "
                  "Without `/dev/log`, `syslog` falls back to standard error",
       .default_value = "`stderr` in the foreground or under systemd (`JOURNAL_STREAM`), else "
                        "`syslog`",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState& state) -> Status {
         OBJFS_ASSIGN_OR_RETURN(std::string path, ExpandHome(value, name, state.env));
         const LogLevel level = out.log.level;
         OBJFS_ASSIGN_OR_RETURN(out.log, ParseLogSink(path));
         out.log.level = level;
         return Status::Ok();
       }},
      {.names = {"log_level"},
       .value = V::kRequired,
       .value_name = "LEVEL",
       .group = G::kLogs,
       .meaning = "the least severe messages logged: `error`, `warn`, `info`, or `debug`, which "
                  "adds one line per S3 or SFTP request (method, key, status, bytes, latency, "
                  "request id; never credentials or signatures)",
       .default_value = "info",
       .choices = {"error", "warn", "info", "debug"},
       .apply = [](std::string_view, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(out.log.level, ParseLogLevel(value));
         return Status::Ok();
       }},
      {.names = {"log_metrics"},
       .value = V::kRequired,
       .value_name = "SECONDS",
       .group = G::kLogs,
       .meaning = "log the counters of `objfs stats` (one line, at level `info`) this often",
       .default_value = "never",
       .apply = [](std::string_view name, std::string_view value, MountOptions& out,
                   OptionState&) -> Status {
         OBJFS_ASSIGN_OR_RETURN(double seconds, ParseSeconds(value, name));
         if (seconds < 1 || seconds > 86400) {
           return Invalid(std::string(name) + "=" + std::string(value) +
                          " is out of range (1..86400 seconds)");
         }
         out.log_metrics = seconds;
         return Status::Ok();
       }},

      // ---- FUSE and mount(8) ----
      {.names = {"ro"},
       .group = G::kMount,
       .meaning = "a read-only mount",
       .default_value = "off",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.fs.read_only = true;
             out.fuse_options.emplace_back("ro");
             return Status::Ok();
           }},
      {.names = {"allow_other"},
       .group = G::kMount,
       .meaning = "other users may use the mount; implies `default_permissions`, so the kernel "
                  "checks the modes and owners the mount shows (objfs itself checks none)",
       .default_value = "off",
       .apply =
           [](std::string_view name, std::string_view, MountOptions& out, OptionState& state) {
             state.allow_other = true;
             out.fuse_options.emplace_back(name);
             return Status::Ok();
           }},
      {.names = {"default_permissions"},
       .group = G::kMount,
       .meaning = "the kernel checks the modes and owners the mount shows",
       .default_value = "with `allow_other`",
       .apply =
           [](std::string_view name, std::string_view, MountOptions& out, OptionState& state) {
             state.default_permissions = true;
             out.fuse_options.emplace_back(name);
             return Status::Ok();
           }},
      {.names = {"no_default_permissions"},
       .group = G::kMount,
       .meaning = "with `allow_other`: no permission is checked at all, every local user may "
                  "read, change and remove every file (a warning says so at mount)",
       .default_value = "off",
       .apply =
           [](std::string_view, std::string_view, MountOptions&, OptionState& state) {
             state.no_default_permissions = true;
             return Status::Ok();
           }},
      {.names = {"nonempty"},
       .group = G::kMount,
       .meaning = "mount over a directory that has entries (they are hidden while mounted); "
                  "without it such a mount is refused",
       .default_value = "off",
       .apply =
           [](std::string_view, std::string_view, MountOptions& out, OptionState&) {
             out.nonempty = true;
             return Status::Ok();
           }},
      {.names = {"auto_unmount"},
       .group = G::kMount,
       .meaning = "FUSE unmounts when objfs exits, even when it is killed (staged data stays in "
                  "`cache_dir` for the next mount)",
       .default_value = "off",
       .apply = FuseFlag},
      {.names = {"fsname"},
       .value = V::kRequired,
       .value_name = "NAME",
       .group = G::kMount,
       .meaning = "the source the mount table shows",
       .default_value = "`objfs:URL`",
       .apply =
           [](std::string_view name, std::string_view value, MountOptions& out, OptionState&) {
             out.fuse_options.push_back(std::string(name) + "=" + std::string(value));
             out.has_fsname = true;
             return Status::Ok();
           }},
      // Mount flags that libfuse (3.14) hands to the kernel.
      {.names = {"rw", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "async", "dirsync",
                 "atime", "noatime"},
       .group = G::kMount,
       .meaning = "kernel mount flags, passed through",
       .apply =
           [](std::string_view name, std::string_view, MountOptions& out, OptionState&) {
             if (name == "rw") out.fs.read_only = false;
             out.fuse_options.emplace_back(name);
             return Status::Ok();
           }},
      // Access-time flags that libfuse 3.14 does not know. objfs never updates an access time on
      // a read (only utimensat sets one), so they change nothing; accepted so that an fstab line or
      // a habit does not make the mount fail.
      {.names = {"relatime", "norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime",
                 "diratime", "nodiratime"},
       .group = G::kMount,
       .meaning = "accepted and change nothing: reads never update an access time (as `noatime`); "
                  "only `touch -a` and utimensat set one",
       .apply = Ignore},
      // Options of mount(8) and fstab that concern the mount command, not the filesystem.
      {.names = {"auto", "noauto", "user", "nouser", "users", "_netdev", "nofail"},
       .value = V::kAny,
       .group = G::kMount,
       .meaning = "read by mount(8) and systemd; accepted so that fstab entries work",
       .apply = Ignore},
      {.names = {"sync"},
       .value = V::kAny,
       .group = G::kMount,
       .meaning = "refused: `close` and `fsync` already upload",
       .apply =
           [](std::string_view, std::string_view, MountOptions&, OptionState&) {
             // The kernel would send an fsync after every write(2), each uploading the whole file.
             return Invalid(
                 "option 'sync' is not supported: objfs uploads a file when it is closed or "
                 "fsync'ed");
           }},
  };
}

// The declaration of option `name` among `specs`, or nullptr.
const OptionSpec* FindOption(const std::vector<OptionSpec>& specs, std::string_view name) {
  for (const OptionSpec& spec : specs) {
    for (std::string_view n : spec.names) {
      if (n == name) return &spec;
    }
  }
  return nullptr;
}

Status ApplyOption(std::string_view opt, MountOptions& out, OptionState& state,
                   const std::vector<SchemeSyntax>& extra) {
  size_t eq = opt.find('=');
  std::string_view name = opt.substr(0, eq);
  std::string_view value = eq == std::string_view::npos ? std::string_view() : opt.substr(eq + 1);
  bool has_value = eq != std::string_view::npos;

  const OptionSpec* spec = FindOption(MountOptionSpecs(), name);
  for (size_t i = 0; spec == nullptr && i < extra.size(); ++i) {
    spec = FindOption(extra[i].options, name);
  }
  if (spec == nullptr)
    return Invalid("unknown option '" + std::string(opt) + "' (see objfs --help)");
  if (spec->value == V::kRequired && (!has_value || value.empty())) {
    return Invalid("option '" + std::string(name) + "' needs a value (" + std::string(name) +
                   "=...)");
  }
  if (spec->value == V::kNone && has_value) {
    return Invalid("option '" + std::string(name) + "' takes no value");
  }
  if (!spec->choices.empty() &&
      std::find(spec->choices.begin(), spec->choices.end(), value) == spec->choices.end()) {
    std::string expected;
    for (size_t i = 0; i < spec->choices.size(); ++i) {
      if (i > 0) expected += i + 1 == spec->choices.size() ? " or " : ", ";
      expected += std::string(spec->choices[i]);
    }
    return Invalid("bad value '" + std::string(value) + "' for " + std::string(name) +
                   " (expected " + expected + ")");
  }
  if (!spec->schemes.empty()) state.scheme_bound.emplace_back(std::string(name), spec);
  if (spec->apply == nullptr) {
    out.scheme_options[std::string(spec->names[0])] = std::string(value);
    return Status::Ok();
  }
  return spec->apply(name, value, out, state);
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

const std::vector<OptionSpec>& MountOptionSpecs() {
  static const std::vector<OptionSpec> specs = BuildOptionSpecs();
  return specs;
}

Result<MountUrl> ParseMountUrl(std::string_view url, const std::vector<SchemeSyntax>& extra) {
  MountUrl out;
  out.text = std::string(url);
  size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return Invalid("'" + std::string(url) +
                   "' is not a URL (expected s3://BUCKET[/PREFIX] or sftp://[USER@]HOST/PATH)");
  }
  std::string_view scheme = url.substr(0, sep);
  std::string_view rest = url.substr(sep + 3);
  out.scheme_name = std::string(scheme);
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
      out.port_given = true;
    }
    if (out.host.empty()) return Invalid("URL '" + std::string(url) + "' names no host");
    return out;
  }
  std::string known = extra.empty() ? "s3:// or sftp://" : "s3://, sftp://";
  for (size_t i = 0; i < extra.size(); ++i) {
    known += (i + 1 == extra.size() ? " or " : ", ") + extra[i].name + "://";
    if (scheme == extra[i].name) {
      out.scheme = UrlScheme::kOther;
      out.rest = std::string(rest);
      if (out.rest.empty()) return Invalid("URL '" + std::string(url) + "' names nothing");
      return out;
    }
  }
  return Invalid("unsupported URL scheme '" + std::string(scheme) + "' (use " + known + ")");
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

std::string CanonicalUrl(const MountUrl& url) {
  if (url.scheme == UrlScheme::kS3) return "s3://" + url.bucket + "/" + url.prefix;
  if (url.scheme == UrlScheme::kOther) return url.scheme_name + "://" + url.rest;
  return "sftp://" + url.user + "@" + url.host + ":" + std::to_string(url.port) + url.path;
}

std::string MountCacheName(const MountUrl& url) {
  const std::string canonical = CanonicalUrl(url);
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
  return url.scheme_name + "-" + readable + "-" + std::string(hash, 12);
}

Result<MountOptions> ParseMountOptions(const std::vector<std::string>& args,
                                       const MountEnvironment& env,
                                       const std::vector<SchemeSyntax>& extra) {
  MountOptions out;
  out.fs.metadata_delay = kDefaultMetadataDelay;
  out.fs.uid = env.uid;
  out.fs.gid = env.gid;
  OptionState given{env};
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
    } else if (arg == "--help-markdown") {
      out.action = MountAction::kHelpMarkdown;
      return out;
    } else if (arg == "--help-man") {
      out.action = MountAction::kHelpMan;
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
        OBJFS_RETURN_IF_ERROR(ApplyOption(opt, out, given, extra));
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
  OBJFS_ASSIGN_OR_RETURN(out.url, ParseMountUrl(positional[0], extra));
  out.mountpoint = positional[1];
  if (out.mountpoint.empty()) return Invalid("the mount point is an empty string");

  // The disk cache's blocks are read_buffer long and evicted by punching their range out, which
  // frees only whole file system pages: other sizes would leave pages behind that no bound counts.
  if (!out.data_cache.empty() && out.fs.prefetch.read_buffer % 4096 != 0) {
    return Invalid("data_cache= needs read_buffer to be a multiple of 4K (it is " +
                   std::to_string(out.fs.prefetch.read_buffer) + ")");
  }
  if (out.fs.prefetch.max_readahead < out.fs.prefetch.read_buffer) {
    return Invalid("max_readahead (" + std::to_string(out.fs.prefetch.max_readahead) +
                   ") must not be smaller than read_buffer (" +
                   std::to_string(out.fs.prefetch.read_buffer) + ")");
  }
  if (given.data_cache_size && out.data_cache.empty()) {
    return Invalid("data_cache_size needs data_cache=DIR");
  }
  if (!out.data_cache.empty() && out.data_cache_size < out.fs.prefetch.read_buffer) {
    return Invalid("data_cache_size (" + std::to_string(out.data_cache_size) +
                   ") must not be smaller than read_buffer (" +
                   std::to_string(out.fs.prefetch.read_buffer) + ")");
  }
  for (const auto& [name, spec] : given.scheme_bound) {
    if (std::find(spec->schemes.begin(), spec->schemes.end(), out.url.scheme_name) !=
        spec->schemes.end()) {
      continue;
    }
    std::string message = "option '" + name + "' applies to ";
    for (size_t i = 0; i < spec->schemes.size(); ++i) {
      if (i > 0) message += i + 1 == spec->schemes.size() ? " and " : ", ";
      message += spec->schemes[i];
      message += "://";
    }
    message += " URLs, not to ";
    message += out.url.scheme_name;
    message += "://";
    return Invalid(std::move(message));
  }
  if (out.url.scheme == UrlScheme::kSftp) {
    if (out.known_hosts.empty() && !env.home.empty()) {
      out.known_hosts = env.home + "/.ssh/known_hosts";
    }
    out.home = env.home;
    if (out.ssh_config_given == "none") {
      out.ssh_config_files.clear();
    } else if (!out.ssh_config_given.empty()) {
      if (::access(out.ssh_config_given.c_str(), R_OK) != 0) {
        return Invalid("cannot read ssh_config file '" + out.ssh_config_given +
                       "': " + std::strerror(errno));
      }
      out.ssh_config_files = {out.ssh_config_given};
    } else {
      if (!env.home.empty()) out.ssh_config_files.push_back(env.home + "/.ssh/config");
      out.ssh_config_files.emplace_back("/etc/ssh/ssh_config");
    }
  } else if (out.url.scheme == UrlScheme::kS3) {
    if (out.fs.max_metadata == 0) out.fs.max_metadata = kDefaultMaxMetadata;
  }
  if (!out.sse_kms_key_id.empty() && out.sse != "aws:kms") {
    return Invalid("option 'sse_kms_key_id' needs sse=aws:kms");
  }
  if (!out.sse.empty() && !out.sse_c_key_file.empty()) {
    return Invalid("give sse= or sse_c_key=, not both: an object has one kind of encryption");
  }
  // The disk cache keeps what it reads, decrypted, across remounts: that would leave the
  // plaintext of objects encrypted with the user's own key on this machine's disk.
  if (!out.sse_c_key_file.empty() && !out.data_cache.empty()) {
    return Invalid(
        "give sse_c_key= or data_cache=, not both: the disk cache would keep the objects' "
        "plaintext on local disk");
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

namespace {

constexpr size_t kHelpWidth = 80;
constexpr size_t kHelpColumn = 28;  // where the meaning of an option starts

// `text` without Markdown's backticks.
std::string PlainText(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c != '`') out += c;
  }
  return out;
}

// Appends `text` to `out`, its words filled into lines of kHelpWidth columns: the first line
// goes on from `column` (where `out` ends), the others start at `indent`.
void AppendWrapped(std::string& out, std::string_view text, size_t column, size_t indent) {
  size_t pos = 0;
  bool first_word = true;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    if (!first_word && column + 1 + word.size() > kHelpWidth) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (!first_word) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first_word = false;
  }
}

// One entry of --help: `label` in the first column, `text` beside or under it.
void AppendHelpEntry(std::string& out, std::string_view label, std::string_view text) {
  out += "  ";
  AppendWrapped(out, label, 2, 4);
  size_t line_start = out.rfind('\n') + 1;
  size_t column = out.size() - line_start;
  if (column + 2 > kHelpColumn) {
    out += "\n" + std::string(kHelpColumn, ' ');
  } else {
    out += std::string(kHelpColumn - column, ' ');
  }
  AppendWrapped(out, text, kHelpColumn, kHelpColumn);
  out += "\n";
}

// "name=VALUE, other=VALUE" as --help shows an option's names; `code` puts each in backticks.
std::string OptionLabel(const OptionSpec& spec, bool code) {
  std::string label;
  for (std::string_view name : spec.names) {
    if (!label.empty()) label += ", ";
    if (code) label += '`';
    label += std::string(name);
    if (spec.value == OptionSpec::Value::kRequired) label.append("=").append(spec.value_name);
    if (code) label += '`';
  }
  return label;
}

void AppendOptionHelp(std::string& out, const OptionSpec& spec) {
  std::string text = PlainText(spec.meaning);
  if (!spec.default_value.empty()) text += " (default: " + PlainText(spec.default_value) + ")";
  AppendHelpEntry(out, OptionLabel(spec, false), text);
}

}  // namespace

std::string MountUsage(const std::vector<SchemeSyntax>& extra) {
  std::string out = R"(usage: objfs URL MOUNTPOINT [-f] [-d] [-o OPTION[,OPTION...]]...

Mounts an object store bucket (or an SFTP directory) as a directory.

URL:
)";
  AppendHelpEntry(out, "s3://BUCKET[/PREFIX]", "the keys of BUCKET (under PREFIX/)");
  AppendHelpEntry(out, "sftp://[USER@]HOST[:PORT]/PATH", "a directory on an SFTP server");
  for (const SchemeSyntax& scheme : extra) AppendHelpEntry(out, scheme.usage, scheme.description);
  out += "\nArguments:\n";
  AppendHelpEntry(out, "-f", "stay in the foreground");
  AppendHelpEntry(out, "-d", "print libfuse's debug output (implies -f)");
  AppendHelpEntry(out, "-o OPTION[,OPTION...]", "the options below; repeatable");
  AppendHelpEntry(out, "-h, --help", "print this help");
  AppendHelpEntry(out, "-V, --version", "print the version");
  AppendHelpEntry(out, "--help-markdown", "print the table of options of README.md");

  using G = OptionSpec::Group;
  const std::pair<G, std::string_view> groups[] = {
      {G::kS3,
       "S3 options (credentials come from the AWS SDKs' chain: profile=, AWS_ACCESS_KEY_ID/"
       "AWS_SECRET_ACCESS_KEY, web identity, ~/.aws/credentials and ~/.aws/config, container "
       "and instance metadata; the endpoint and region also from AWS_ENDPOINT_URL, AWS_REGION "
       "and ~/.aws/config):"},
      {G::kSftp, "SFTP options (the user defaults to the caller's name, the port to 22):"},
      {G::kFilesystem, "Filesystem options:"},
      {G::kTimeouts, "Bounded waits (every scheme):"},
      {G::kLogs, "Logs and stats:"},
      {G::kMount, "FUSE and mount options:"},
  };
  for (const auto& [group, heading] : groups) {
    out += "\n";
    AppendWrapped(out, heading, 0, 0);
    out += "\n";
    for (const OptionSpec& spec : MountOptionSpecs()) {
      if (spec.group == group) AppendOptionHelp(out, spec);
    }
  }
  for (const SchemeSyntax& scheme : extra) {
    if (scheme.options.empty()) continue;
    out += "\n" + scheme.name + ":// options:\n";
    for (const OptionSpec& spec : scheme.options) AppendOptionHelp(out, spec);
  }
  out += "\nSIZE is a number of bytes with an optional K, M, G or T suffix (powers of 1024).\n";
  out += R"(
Environment:
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
                            S3 credentials (else ~/.aws/credentials)
  AWS_PROFILE               the profile of ~/.aws/credentials (or -o profile=)
  AWS_SHARED_CREDENTIALS_FILE
                            the credentials file instead of ~/.aws/credentials
  AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3
                            the S3 endpoint (or -o endpoint=)
  AWS_REGION, AWS_DEFAULT_REGION
                            the signing region (or -o region=)
  AWS_CA_BUNDLE             a PEM file of the CA certificates trusted for https
  SSH_AUTH_SOCK             ssh-agent's socket, asked for SFTP keys
  XDG_CACHE_HOME            where cache directories go (else ~/.cache)
  JOURNAL_STREAM            set by systemd: messages go to standard error,
                            the journal

Statistics:
  objfs stats MOUNTPOINT    the counters of a mount, readable (the same as
                            getfattr -n user.objfs.stats MOUNTPOINT)

Unmounting:
  fusermount3 -u MOUNTPOINT (as root also umount MOUNTPOINT). objfs uploads
  what is unsaved before it exits; what it cannot upload stays in the cache
  directory for the next mount.
)";
  return out;
}

std::string OptionsMarkdown() {
  std::string out = "| option | URLs | meaning | default |\n|---|---|---|---|\n";
  for (const OptionSpec& spec : MountOptionSpecs()) {
    std::string schemes;
    for (std::string_view scheme : spec.schemes) {
      if (!schemes.empty()) schemes += ", ";
      schemes.append("`").append(scheme).append("://`");
    }
    // Appended piece by piece: g++ 12 at -O3 takes `"literal" + std::string(...)`, an insert at
    // the front, for an overlapping copy (-Wrestrict, GCC bug 105329).
    out.append("| ").append(OptionLabel(spec, true)).append(" | ");
    out.append(schemes.empty() ? "all" : schemes).append(" | ").append(spec.meaning);
    out.append(" | ").append(spec.default_value).append(" |\n");
  }
  return out;
}

namespace {

// `text` as troff running text: backslashes escaped, `code` spans in bold with their hyphens as
// hyphen-minus (what is typed), and a line never starting with a control character.
std::string ManText(std::string_view text) {
  std::string out;
  bool code = false;
  for (char c : text) {
    if (c == '`') {
      out += code ? "\\fR" : "\\fB";
      code = !code;
    } else if (c == '\\') {
      out += "\\e";
    } else if (c == '-' && code) {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (code) out += "\\fR";
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

// `code` in bold, as ManText shows a `code` span.
std::string ManCode(std::string_view code) { return ManText(std::string("`").append(code) + "`"); }

}  // namespace

std::string OptionsMan() {
  using G = OptionSpec::Group;
  const std::pair<G, std::string_view> groups[] = {
      {G::kS3, "S3 options"},
      {G::kSftp, "SFTP options"},
      {G::kFilesystem, "Filesystem options"},
      {G::kTimeouts, "Bounded waits"},
      {G::kLogs, "Logs and stats"},
      {G::kMount, "FUSE and mount options"},
  };
  std::string out;
  for (const auto& [group, heading] : groups) {
    out.append(".SS ").append(heading).append("\n");
    for (const OptionSpec& spec : MountOptionSpecs()) {
      if (spec.group != group) continue;
      out += ".TP\n";
      std::string label;
      for (std::string_view name : spec.names) {
        if (!label.empty()) label += ", ";
        label += ManCode(name);
        if (spec.value == OptionSpec::Value::kRequired) {
          label.append("=\\fI").append(spec.value_name).append("\\fR");
        }
      }
      out += label + "\n";
      std::string text = ManText(spec.meaning);
      if (!spec.schemes.empty()) {
        text += " (";
        for (size_t i = 0; i < spec.schemes.size(); ++i) {
          if (i > 0) text += ", ";
          text += ManCode(std::string(spec.schemes[i]) + "://");
        }
        text += " URLs)";
      }
      out += text + "\n";
      if (!spec.default_value.empty()) {
        out.append(".br\nDefault: ").append(ManText(spec.default_value)).append(".\n");
      }
    }
  }
  return out;
}

}  // namespace objfs
