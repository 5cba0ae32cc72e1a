// The command line of objfs: `objfs URL MOUNTPOINT [-f] [-d] [-o opt[,opt...]]...`.
//
// Parsing is separate from main() so that every option, default and error message is unit
// tested without mounting anything. The result says what to mount where and with which tuning;
// cli/mount.h turns it into store, filesystem and libfuse settings. Every error is one line meant
// to be printed as "objfs: <message>".
//
// Each -o option is declared once (OptionSpec, in mount_options.cc): its names, its value, the
// URL schemes that accept it, how it is parsed and checked, its text and its default. The parser,
// --help, the "applies to s3:// URLs" check and README.md's options table (--help-markdown, kept
// identical by mount_options_test) all come from those declarations.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/log.h"
#include "backend/s3/s3_endpoint.h"
#include "backend/status.h"
#include "fs/filesystem.h"

namespace objfs {

// kOther: a scheme a build of the command line added (SchemeSyntax), such as the tests' memory://.
enum class UrlScheme { kS3, kSftp, kOther };

// `s3://BUCKET[/PREFIX]` or `sftp://[USER@]HOST[:PORT]/PATH`, taken apart.
struct MountUrl {
  UrlScheme scheme = UrlScheme::kS3;
  std::string scheme_name = "s3";  // "s3", "sftp", or the added scheme's name
  std::string text;                // the URL as given
  std::string rest;                // kOther: what follows "://"

  // s3://
  std::string bucket;
  std::string prefix;  // empty, or the key prefix ending with '/' ("some/dir/")

  // sftp://
  std::string user;  // empty: the caller's user name
  std::string host;
  int port = 22;
  bool port_given = false;  // the URL names the port (which then wins over ssh_config)
  std::string path;         // absolute path on the server, starting with '/'
};

struct MountOptions;
struct OptionState;  // what the options given so far need checked at the end (mount_options.cc)

// One -o option, or several names sharing one meaning (the kernel's mount flags).
struct OptionSpec {
  enum class Value {
    kNone,      // a flag: "name=..." is refused
    kRequired,  // "name=VALUE" with a non-empty value
    kAny,       // taken with or without a value (mount(8)'s own options)
  };
  enum class Group { kS3, kSftp, kFilesystem, kTimeouts, kLogs, kMount, kScheme };

  std::vector<std::string_view> names{};
  Value value = Value::kNone;
  std::string_view value_name{};  // "SIZE", "N", ...: shown after "name=" in the help
  // The schemes whose URLs accept the option ("s3", "sftp"); empty: every scheme.
  std::vector<std::string_view> schemes{};
  Group group = Group::kFilesystem;
  // What it does, for --help and README.md; `code` spans are shown without backticks in --help.
  std::string_view meaning{};
  std::string_view default_value{};  // empty: none worth saying
  // The values accepted, when they are a fixed set; empty: any (checked by apply).
  std::vector<std::string_view> choices{};
  // Parses and applies the value; nullptr: the value (or "" for a flag) is stored in
  // MountOptions::scheme_options under the first name.
  Status (*apply)(std::string_view name, std::string_view value, MountOptions& out,
                  OptionState& state) = nullptr;
};

// A URL scheme beyond s3:// and sftp://, added by a build of the command line (cli/mount.h): how
// --help shows it and which options only it accepts.
struct SchemeSyntax {
  std::string name;           // "memory": URLs "memory://..."
  std::string usage{};        // "memory://NAME"
  std::string description{};  // one line for --help
  std::vector<OptionSpec> options{};
};

// The options of the shipped command line, in the order --help and README.md list them.
const std::vector<OptionSpec>& MountOptionSpecs();

// Parses a mount URL. InvalidArgument with a one-line message when it is malformed or its
// scheme is neither s3 nor sftp nor one of `extra`.
Result<MountUrl> ParseMountUrl(std::string_view url, const std::vector<SchemeSyntax>& extra = {});

// Parses a byte count: decimal digits with an optional binary suffix K, M, G or T (any case,
// optionally followed by "iB" or "B"): "4096", "64K", "1M", "2GiB". InvalidArgument otherwise.
Result<uint64_t> ParseSize(std::string_view text);

inline constexpr double kDefaultRequestTimeout = 30;
inline constexpr double kDefaultOperationTimeout = 120;

// What the process is asked to do. kHelpMarkdown: print README.md's options table. kHelpMan:
// print the options section of the man pages (troff; packaging/ builds them with it).
enum class MountAction { kMount, kHelp, kVersion, kHelpMarkdown, kHelpMan };

// The bytes a data_cache holds unless data_cache_size= says otherwise.
inline constexpr uint64_t kDefaultDataCacheSize = 1ull << 30;

struct MountOptions {
  MountAction action = MountAction::kMount;
  MountUrl url;
  std::string mountpoint;
  bool foreground = false;  // -f (or -d): do not daemonise
  bool debug = false;       // -d: libfuse's debug output

  // S3 settings; empty / unset means the environment's or the store's default.
  std::string endpoint;                               // endpoint=
  std::string region;                                 // region=
  std::string profile;                                // profile=: the shared files' profile
  std::string credentials;                            // credentials=: the one source to use
  std::string credentials_file;                       // credentials_file=: for this mount
  s3::Addressing addressing = s3::Addressing::kAuto;  // path_style / virtual_host
  std::optional<uint64_t> multipart_threshold;
  std::optional<uint64_t> part_size;
  std::optional<uint64_t> copy_part_threshold;
  std::optional<int> parallel_parts;
  std::string part_checksum;  // part_checksum=: md5, none, or empty (the store's default)
  // What new objects get: storage_class=, acl= (a canned ACL), server-side encryption (sse=
  // AES256 or aws:kms with sse_kms_key_id=, or sse_c_key= a file holding the customer key),
  // and requester_pays (x-amz-request-payer on every request).
  std::string storage_class;
  std::string acl;
  std::string sse;
  std::string sse_kms_key_id;
  std::string sse_c_key_file;
  bool requester_pays = false;

  // Bounded waits, for s3:// and sftp:// alike. request_timeout=: a request that moves (almost)
  // nothing for this long is abandoned (and retried); operation_timeout=: one backend call's
  // attempts and back-off waits together, after which it fails (EIO) and the log says why; at
  // unmount, what is left to upload gets this long once.
  double request_timeout = kDefaultRequestTimeout;
  double operation_timeout = kDefaultOperationTimeout;

  // log=, log_level=: where messages go and the least severe one kept (backend/log.h).
  LogSettings log;
  // log_metrics=SECONDS: the counters of user.objfs.stats logged (info) this often; 0: never.
  double log_metrics = 0;
  // nonempty: mount over a directory that has entries (hidden while mounted).
  bool nonempty = false;

  // SFTP settings.
  // identity=FILE, repeatable: the private keys to offer, in order, and nothing else. Empty:
  // ssh-agent (when SSH_AUTH_SOCK is set), then ~/.ssh/id_ed25519, id_ecdsa, id_rsa.
  std::vector<std::string> identity_files;
  // known_hosts=FILE; for sftp:// always set: as given, else ~/.ssh/known_hosts.
  std::string known_hosts;
  bool known_hosts_given = false;  // known_hosts= was given (and wins over ssh_config)
  // The OpenSSH client configuration files read for sftp:// (backend/sftp/ssh_config.h), in
  // order: ssh_config=FILE alone, none for ssh_config=none, else ~/.ssh/config and
  // /etc/ssh/ssh_config. `ssh_config_given` names the file given, for ProxyJump's ssh -F.
  std::vector<std::string> ssh_config_files;
  std::string ssh_config_given;
  std::string home;  // the caller's home directory ("~" and "%d" in those files); may be empty
  // accept_new_host_key: record the key of a host that known_hosts does not list (trust on
  // first use). A changed key is refused all the same.
  bool accept_new_host_key = false;
  // no_server_md5: hash a file nobody hashed yet here, from its bytes, never by running
  // md5sum on the server.
  bool no_server_md5 = false;
  // no_server_cp: copy files on the server with copy-data only, never by running cp there.
  bool no_server_cp = false;
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

  // data_cache=DIR: the disk cache of object data (cache/data_cache.h); empty: none.
  // data_cache_size=SIZE: the most its blocks hold.
  std::string data_cache;
  uint64_t data_cache_size = kDefaultDataCacheSize;

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

  // The options of an added scheme (SchemeSyntax::options) that have no apply function: name ->
  // value ("" for a flag).
  std::map<std::string, std::string> scheme_options;
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
// The URL as MountCacheName and a cache directory's .store name it: s3://BUCKET/PREFIX,
// sftp://USER@HOST:PORT/PATH, the rest of another scheme's as given.
std::string CanonicalUrl(const MountUrl& url);

// Parses the arguments after the program name; URLs of the `extra` schemes are accepted too.
Result<MountOptions> ParseMountOptions(const std::vector<std::string>& args,
                                       const MountEnvironment& env,
                                       const std::vector<SchemeSyntax>& extra = {});

// The text of --help, with the `extra` schemes and their options.
std::string MountUsage(const std::vector<SchemeSyntax>& extra = {});

// README.md's options table (Markdown), from MountOptionSpecs().
std::string OptionsMarkdown();

// The body of the man pages' OPTIONS section (troff: a subsection per group, an indented
// paragraph per option), from MountOptionSpecs(). `objfs --help-man` prints it.
std::string OptionsMan();

}  // namespace objfs
