// The command line of objfs: `objfs URL MOUNTPOINT [-f] [-d] [-o opt[,opt...]]...`.
//
// Parsing is separate from main() so that every option, default and error message is unit
// tested without mounting anything. The result says what to mount where and with which tuning;
// main() turns it into store, filesystem and libfuse settings. Every error is one line meant to
// be printed as "objfs: <message>".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/s3/s3_endpoint.h"
#include "backend/status.h"
#include "fs/filesystem.h"

namespace objfs {

enum class UrlScheme { kS3, kSftp };

// `s3://BUCKET[/PREFIX]` or `sftp://[USER@]HOST[:PORT]/PATH`, taken apart.
struct MountUrl {
  UrlScheme scheme = UrlScheme::kS3;
  std::string text;  // the URL as given

  // s3://
  std::string bucket;
  std::string prefix;  // empty, or the key prefix ending with '/' ("some/dir/")

  // sftp://
  std::string user;  // empty: the caller's user name
  std::string host;
  int port = 22;
  std::string path;  // absolute path on the server, starting with '/'
};

// Parses a mount URL. InvalidArgument with a one-line message when it is malformed or its
// scheme is neither s3 nor sftp.
Result<MountUrl> ParseMountUrl(std::string_view url);

// Parses a byte count: decimal digits with an optional binary suffix K, M, G or T (any case,
// optionally followed by "iB" or "B"): "4096", "64K", "1M", "2GiB". InvalidArgument otherwise.
Result<uint64_t> ParseSize(std::string_view text);

inline constexpr double kDefaultRequestTimeout = 30;
inline constexpr double kDefaultOperationTimeout = 120;

// What the process is asked to do.
enum class MountAction { kMount, kHelp, kVersion };

struct MountOptions {
  MountAction action = MountAction::kMount;
  MountUrl url;
  std::string mountpoint;
  bool foreground = false;  // -f (or -d): do not daemonise
  bool debug = false;       // -d: libfuse's debug output

  // S3 settings; empty / unset means the environment's or the store's default.
  std::string endpoint;                               // endpoint=
  std::string region;                                 // region=
  std::string profile;                                // profile=: the credentials file's profile
  s3::Addressing addressing = s3::Addressing::kAuto;  // path_style / virtual_host
  std::optional<uint64_t> multipart_threshold;
  std::optional<uint64_t> part_size;
  std::optional<uint64_t> copy_part_threshold;
  std::optional<int> parallel_parts;

  // Bounded waits, for s3:// and sftp:// alike. request_timeout=: a request that moves (almost)
  // nothing for this long is abandoned (and retried); operation_timeout=: one backend call's
  // attempts and back-off waits together, after which it fails (EIO) and the log says why; at
  // unmount, what is left to upload gets this long once.
  double request_timeout = kDefaultRequestTimeout;
  double operation_timeout = kDefaultOperationTimeout;

  // SFTP settings.
  // identity=FILE, repeatable: the private keys to offer, in order, and nothing else. Empty:
  // ssh-agent (when SSH_AUTH_SOCK is set), then ~/.ssh/id_ed25519, id_ecdsa, id_rsa.
  std::vector<std::string> identity_files;
  // known_hosts=FILE; for sftp:// always set: as given, else ~/.ssh/known_hosts.
  std::string known_hosts;
  // accept_new_host_key: record the key of a host that known_hosts does not list (trust on
  // first use). A changed key is refused all the same.
  bool accept_new_host_key = false;
  std::optional<int> sessions;  // sessions=N: SSH connections (1..64)
  // password_file=FILE (its first line) or password_stdin (one line read at start): a password
  // to log in with when no key is accepted. Never on the command line itself.
  std::string password_file;
  bool password_stdin = false;
  // ciphers=A:B:C, stored comma-separated as libssh takes it; empty: objfs's default.
  std::string ciphers;

  // The filesystem's settings (uid, gid, umask, timeouts, cache_dir, read_buffer,
  // max_readahead, io_threads, prefetch_memory, max_rename_objects, read_only). cache_dir is
  // always set: cache_dir= as given, or the default root plus a per-mount subdirectory named
  // after the URL (MountCacheName), so that remounting the same URL finds the staging files a
  // crashed process left behind.
  // metadata_delay defaults to 1 second here (kDefaultMetadataDelay).
  FilesystemOptions fs;

  // Options handed to libfuse's mount as "-o" options: ro, allow_other, default_permissions,
  // fsname=, and the kernel flags rw, dev, nodev, suid, nosuid, exec, noexec.
  std::vector<std::string> fuse_options;
  bool has_fsname = false;  // fsname= was among fuse_options
  // allow_other without default_permissions (no_default_permissions): the kernel checks no
  // permissions, so every local user may read and change everything; worth a warning. Otherwise
  // allow_other adds default_permissions to fuse_options.
  bool unchecked_other_users = false;
  // direct_io: reads and writes bypass the kernel's page cache (FuseAdapterOptions::direct_io).
  bool direct_io = false;
};

// Seconds a mount lets a metadata change of a closed file wait for what follows it (rsync's
// rename), unless metadata_delay= says otherwise.
inline constexpr double kDefaultMetadataDelay = 1.0;

// Facts about the calling process that supply defaults.
struct MountEnvironment {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string cache_root;  // directory holding every mount's cache directory
  std::string home;        // the caller's home directory ("~" in file options); may be empty
};

// uid/gid of the process; home $HOME, else the passwd entry's home directory; cache_root
// $XDG_CACHE_HOME/objfs, else <home>/.cache/objfs, else /tmp/objfs-<uid>.
MountEnvironment CurrentMountEnvironment();

// The name of the per-mount cache subdirectory for `url`: readable and unique ("s3-bucket-
// some-dir-<hash>"), a single path component.
std::string MountCacheName(const MountUrl& url);

// Parses the arguments after the program name.
Result<MountOptions> ParseMountOptions(const std::vector<std::string>& args,
                                       const MountEnvironment& env);

// The text of --help.
std::string MountUsage();

}  // namespace objfs
