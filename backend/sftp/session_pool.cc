#include "backend/sftp/session_pool.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "backend/retry.h"

namespace objfs::sftp {
namespace {

std::string HostPort(const SftpConnectOptions& options) {
  return options.host + ":" + std::to_string(options.port);
}

// "SHA256:<base64>" of the server's host key, or a note that it could not be computed.
std::string ServerFingerprint(ssh_session ssh) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(ssh, &key) != SSH_OK) return "unavailable";
  unsigned char* hash = nullptr;
  size_t hash_len = 0;
  std::string out = "unavailable";
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hash_len) == SSH_OK) {
    char* text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hash_len);
    if (text != nullptr) {
      out = text;
      ssh_string_free_char(text);
    }
    ssh_clean_pubkey_hash(&hash);
  }
  ssh_key_free(key);
  return out;
}

// The known_hosts file as named in messages.
std::string KnownHostsName(const SftpConnectOptions& options) {
  return options.known_hosts.empty() ? std::string("~/.ssh/known_hosts") : options.known_hosts;
}

// How known_hosts names the server: "host" on port 22, "[host]:port" on others.
std::string KnownHostsPattern(const SftpConnectOptions& options) {
  if (options.port == 22) return options.host;
  return "[" + options.host + "]:" + std::to_string(options.port);
}

// The known_hosts file of `options` (of `known_hosts`, or ~/.ssh/known_hosts) and the global one
// that marks the server's key "@revoked", as ssh does for a key that must never be accepted
// (libssh skips such lines, and would accept the key from another line); empty when none does.
// Stricter than ssh: a key revoked for any host is refused for this one too.
std::string RevokedIn(ssh_session ssh, const SftpConnectOptions& options) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(ssh, &key) != SSH_OK) return "";
  char* exported = nullptr;
  const bool have = ssh_pki_export_pubkey_base64(key, &exported) == SSH_OK && exported != nullptr;
  ssh_key_free(key);
  if (!have) return "";
  const std::string blob = exported;
  ssh_string_free_char(exported);
  std::string user = options.known_hosts;
  if (user.empty()) {  // as libssh finds it: the home directory of the user objfs runs as
    const passwd* pw = ::getpwuid(::getuid());
    const char* home = pw != nullptr && pw->pw_dir != nullptr ? pw->pw_dir : std::getenv("HOME");
    if (home != nullptr && home[0] == '/') user = std::string(home) + "/.ssh/known_hosts";
  }
  for (const std::string& file : {user, options.global_known_hosts}) {
    if (file.empty()) continue;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string marker, hosts, type, base64;
      if (fields >> marker >> hosts >> type >> base64 && marker == "@revoked" && base64 == blob) {
        return file;
      }
    }
  }
  return "";
}

Status CheckHostKey(ssh_session ssh, const SftpConnectOptions& options) {
  const std::string where = HostPort(options);
  if (const std::string revoked = RevokedIn(ssh, options); !revoked.empty()) {
    return PermissionDeniedError("host key of " + where + " (" + ServerFingerprint(ssh) +
                                 ") is marked @revoked in " + revoked + ": refusing to connect");
  }
  enum ssh_known_hosts_e state = ssh_session_is_known_server(ssh);
  const std::string known_hosts = KnownHostsName(options);
  switch (state) {
    case SSH_KNOWN_HOSTS_OK:
      return Status::Ok();
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
      return PermissionDeniedError(
          "host key of " + where + " has CHANGED: the server offers " + ServerFingerprint(ssh) +
          ", " + known_hosts +
          " holds another key for it; refusing to connect (if the change is expected, remove "
          "the old key with ssh-keygen -R '" +
          KnownHostsPattern(options) + "' -f " + known_hosts + ")");
    case SSH_KNOWN_HOSTS_NOT_FOUND:
    case SSH_KNOWN_HOSTS_UNKNOWN:
      if (options.accept_new_host_key) {
        if (ssh_session_update_known_hosts(ssh) != SSH_OK) {
          return IoError("cannot record the host key of " + where + " in " + known_hosts + ": " +
                         ssh_get_error(ssh));
        }
        return Status::Ok();
      }
      return PermissionDeniedError("host key of " + where + " is not in " + known_hosts +
                                   (options.global_known_hosts.empty()
                                        ? std::string()
                                        : " or " + options.global_known_hosts) +
                                   "; add it with ssh-keyscan or use -o accept_new_host_key "
                                   "(the server offers the unknown key " +
                                   ServerFingerprint(ssh) + ")");
    case SSH_KNOWN_HOSTS_ERROR:
    default:
      return PermissionDeniedError("cannot check the host key of " + where + " against " +
                                   known_hosts + ": " + ssh_get_error(ssh));
  }
}

// The error of a login that broke off (not a refusal): worth another connection.
Status LoginError(ssh_session ssh, const SftpConnectOptions& options) {
  return TransientError("authentication as " + options.user + "@" + options.host +
                        " failed: " + ssh_get_error(ssh));
}

using Clock = std::chrono::steady_clock;

// The error of a login the server let wait: libssh gave up (SSH_AUTH_AGAIN after its timeout)
// or the watchdog cut the connection. No refusal: the credentials were never answered.
Status LoginTimedOut(const SftpConnectOptions& options, Clock::time_point start) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f",
                std::chrono::duration<double>(Clock::now() - start).count());
  return TimedOutError("login to " + options.user + "@" + options.host + ":" +
                       std::to_string(options.port) + " timed out after " + seconds +
                       " s: the server did not answer");
}

// Whether a libssh login call that returned `rc` after starting at `call_start` gave up waiting
// for the server (SSH_AUTH_AGAIN after its SSH_OPTIONS_TIMEOUT, connect_timeout). A quick
// SSH_AUTH_AGAIN is no such thing.
bool WaitedOut(int rc, const SftpConnectOptions& options, Clock::time_point call_start) {
  return rc == SSH_AUTH_AGAIN &&
         Clock::now() - call_start >= options.connect_timeout - std::chrono::milliseconds(100);
}

// The password, with the "password" method or as the answer to keyboard-interactive prompts
// (what servers using PAM offer), whichever the server lists. PermissionDenied when refused or
// when the server takes neither (noted in `tried`).
Status AuthenticateWithPassword(ssh_session ssh, const SftpConnectOptions& options,
                                std::vector<std::string>* tried, Clock::time_point start) {
  const int methods = ssh_userauth_list(ssh, nullptr);
  const char* password = options.password->c_str();
  const Clock::time_point call_start = Clock::now();
  int rc = SSH_AUTH_DENIED;
  if (methods & SSH_AUTH_METHOD_PASSWORD) {
    rc = ssh_userauth_password(ssh, nullptr, password);
    tried->push_back("password");
  } else if (methods & SSH_AUTH_METHOD_INTERACTIVE) {
    rc = ssh_userauth_kbdint(ssh, nullptr, nullptr);
    // Each round's prompts are answered with the password; a round without prompts is the
    // server's last word before success.
    for (int round = 0; rc == SSH_AUTH_INFO && round < 8; ++round) {
      int prompts = ssh_userauth_kbdint_getnprompts(ssh);
      for (int i = 0; i < prompts; ++i) {
        if (ssh_userauth_kbdint_setanswer(ssh, static_cast<unsigned int>(i), password) < 0) {
          return LoginError(ssh, options);
        }
      }
      rc = ssh_userauth_kbdint(ssh, nullptr, nullptr);
    }
    tried->push_back("password (keyboard-interactive)");
  } else {
    tried->push_back("password (the server does not accept passwords)");
  }
  if (rc == SSH_AUTH_SUCCESS) return Status::Ok();
  if (WaitedOut(rc, options, call_start)) return LoginTimedOut(options, start);
  if (rc == SSH_AUTH_ERROR) return LoginError(ssh, options);
  return PermissionDeniedError("password refused");
}

// Offers the identity files, in order, and only them; without any, ssh-agent (when
// SSH_AUTH_SOCK is set) and then libssh's default keys (~/.ssh/id_ed25519, id_ecdsa, id_rsa).
Status Authenticate(ssh_session ssh, const SftpConnectOptions& options, Clock::time_point start) {
  std::vector<std::string> tried;
  // The server may need to learn the username before offering methods.
  ssh_userauth_none(ssh, nullptr);
  for (const std::string& path : options.identity_files) {
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK) {
      tried.push_back("key " + path + " (unreadable, or protected by a passphrase)");
      continue;
    }
    const Clock::time_point call_start = Clock::now();
    int rc = ssh_userauth_publickey(ssh, nullptr, key);
    ssh_key_free(key);
    if (rc == SSH_AUTH_SUCCESS) return Status::Ok();
    if (WaitedOut(rc, options, call_start)) return LoginTimedOut(options, start);
    if (rc == SSH_AUTH_ERROR) return LoginError(ssh, options);
    tried.push_back("key " + path);
  }
  if (options.identity_files.empty()) {
    if (const char* agent = std::getenv("SSH_AUTH_SOCK"); agent != nullptr && *agent != '\0') {
      const Clock::time_point call_start = Clock::now();
      const int rc = ssh_userauth_agent(ssh, nullptr);
      if (rc == SSH_AUTH_SUCCESS) return Status::Ok();
      if (WaitedOut(rc, options, call_start)) return LoginTimedOut(options, start);
      tried.push_back("ssh-agent");
    }
    const Clock::time_point call_start = Clock::now();
    const int rc = ssh_userauth_publickey_auto(ssh, nullptr, nullptr);
    if (rc == SSH_AUTH_SUCCESS) return Status::Ok();
    if (WaitedOut(rc, options, call_start)) return LoginTimedOut(options, start);
    tried.push_back(!options.config
                        ? "~/.ssh/id_ed25519, id_ecdsa, id_rsa"
                        : "the ssh configuration's IdentityFile keys and ~/.ssh/id_ed25519, "
                          "id_ecdsa, id_rsa");
  }
  if (options.password) {
    Status by_password = AuthenticateWithPassword(ssh, options, &tried, start);
    if (by_password.ok() || by_password.code() != StatusCode::kPermissionDenied) {
      return by_password;
    }
  }
  // A connection that broke meanwhile refused nothing.
  if (ssh_is_connected(ssh) == 0) return LoginError(ssh, options);
  std::string list;
  for (const std::string& t : tried) list += (list.empty() ? "" : ", ") + t;
  if (list.empty()) {
    return PermissionDeniedError("authentication as " + options.user + "@" + options.host +
                                 " failed: no key to offer (give one with -o identity=FILE)");
  }
  return PermissionDeniedError(
      "authentication as " + options.user + "@" + options.host +
      " failed: the server accepted none of the credentials offered (tried: " + list + ")");
}

// A TCP connection to the server within options.connect_timeout, as a blocking socket.
Result<int> ConnectTcp(const SftpConnectOptions& options, const std::string& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options.port);
  const int resolved = ::getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found);
  if (resolved != 0) {
    return TransientError("cannot connect to " + where + ": " + ::gai_strerror(resolved));
  }
  const auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (s < 0) {
      error = std::strerror(errno);
      continue;
    }
    int err = ::connect(s, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{s, POLLOUT, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
      socklen_t len = sizeof err;
      if (ready <= 0) {
        err = ETIMEDOUT;
      } else if (::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      }
    }
    if (err != 0) {
      error = std::strerror(err);
      ::close(s);
      continue;
    }
    ::fcntl(s, F_SETFL, ::fcntl(s, F_GETFL) & ~O_NONBLOCK);
    fd = s;
  }
  ::freeaddrinfo(found);
  if (fd < 0) return TransientError("cannot connect to " + where + ": " + error);
  return fd;
}

// Starts `command` under /bin/sh (exec'ed, as ssh runs a ProxyCommand) with its standard input
// and output on one end of a socket pair, and returns the other end (blocking) and the child's
// pid: the proxy's connection to the server, which the watchdog can shut down. The child gets
// no descriptor of this process but those two (libfuse's auto_unmount socket among them must
// not outlive objfs in an orphaned proxy), default signal handling with nothing blocked, and a
// process group of its own, so that everything it starts goes with it.
struct Proxy {
  int fd = -1;
  pid_t pid = -1;
};
Result<Proxy> StartProxy(const std::string& command, const std::string& where) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return InternalError(std::string("socketpair: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears close-on-exec on the copies; everything else closes.
  posix_spawn_file_actions_adddup2(&actions, pair[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pair[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigfillset(&defaults);
  sigdelset(&defaults, SIGKILL);
  sigdelset(&defaults, SIGSTOP);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const std::string exec = "exec " + command;
  const char* argv[] = {"sh", "-c", exec.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attributes,
                               const_cast<char* const*>(argv), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pair[1]);
  if (rc != 0) {
    ::close(pair[0]);
    return TransientError("cannot connect to " + where + ": cannot run the proxy command (" +
                          std::strerror(rc) + ")");
  }
  return Proxy{pair[0], pid};
}

// Bytes process `pid` has read (rchar of /proc/PID/io), or nullopt.
std::optional<uint64_t> ProcessReadBytes(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/io").c_str(), "re");
  if (f == nullptr) return std::nullopt;
  unsigned long long rchar = 0;
  const bool found = std::fscanf(f, "rchar: %llu", &rchar) == 1;
  std::fclose(f);
  if (!found) return std::nullopt;
  return static_cast<uint64_t>(rchar);
}

}  // namespace

bool CpuHasAesGcm() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
#else
  return false;
#endif
}

std::string DefaultCiphers() {
  if (CpuHasAesGcm()) {
    return "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,"
           "aes256-ctr,aes192-ctr,aes128-ctr";
  }
  return "";
}

std::string SftpConnection::cipher() const {
  const char* name = ssh_get_cipher_in(ssh_);
  return name == nullptr ? "" : name;
}

Result<std::unique_ptr<SftpConnection>> SftpConnection::Connect(const SftpConnectOptions& options,
                                                                const WatchFn& watch) {
  std::unique_ptr<SftpConnection> c(new SftpConnection);
  // Unwatched before `c` goes, on every way out.
  struct Unwatch {
    const WatchFn& watch;
    SftpConnection* connection;
    bool watched = false;
    ~Unwatch() {
      if (watched) watch(connection, false);
    }
  } unwatch{watch, c.get()};
  if (options.config) {
    // What the ssh configuration says of this host (keys to offer, algorithms), read once at
    // mount: the settings below win.
    static Mutex copy_mu;  // a leaf: libssh's copy reads the template's lists
    MutexLock lock(&copy_mu);
    if (ssh_options_copy(options.config.get(), &c->ssh_) != SSH_OK) c->ssh_ = nullptr;
  } else {
    c->ssh_ = ssh_new();
  }
  if (c->ssh_ == nullptr) return InternalError("ssh_new failed");
  ssh_session ssh = c->ssh_;
  long timeout = static_cast<long>(options.connect_timeout.count());
  unsigned int port = static_cast<unsigned int>(options.port);
  int process_config = 0;
  ssh_options_set(ssh, SSH_OPTIONS_PROCESS_CONFIG, &process_config);
  // The connection is ours (below): libssh must not start a proxy of its own.
  if (options.config) ssh_options_set(ssh, SSH_OPTIONS_PROXYCOMMAND, "none");
  ssh_options_set(ssh, SSH_OPTIONS_HOST, options.host.c_str());
  ssh_options_set(ssh, SSH_OPTIONS_PORT, &port);
  if (!options.user.empty()) ssh_options_set(ssh, SSH_OPTIONS_USER, options.user.c_str());
  ssh_options_set(ssh, SSH_OPTIONS_TIMEOUT, &timeout);
  const std::string ciphers = options.ciphers.empty() ? DefaultCiphers() : options.ciphers;
  if (!ciphers.empty() && (ssh_options_set(ssh, SSH_OPTIONS_CIPHERS_S_C, ciphers.c_str()) != 0 ||
                           ssh_options_set(ssh, SSH_OPTIONS_CIPHERS_C_S, ciphers.c_str()) != 0)) {
    return InvalidArgumentError("none of the ciphers " + options.ciphers + " is known to libssh");
  }
  if (!options.known_hosts.empty()) {
    ssh_options_set(ssh, SSH_OPTIONS_KNOWNHOSTS, options.known_hosts.c_str());
    const std::string global =
        options.global_known_hosts.empty() ? "/dev/null" : options.global_known_hosts;
    ssh_options_set(ssh, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, global.c_str());
  }
  const std::string where = options.user + "@" + HostPort(options);
  // The TCP connection is ours, so that the watchdog has its socket from the first byte on: a
  // server that accepts and then says nothing (stopped, overloaded) is cut like a stalled call.
  if (options.proxy_command.empty()) {
    OBJFS_ASSIGN_OR_RETURN(c->socket_, ConnectTcp(options, where));
  } else {
    OBJFS_ASSIGN_OR_RETURN(Proxy proxy, StartProxy(options.proxy_command, where));
    c->socket_ = proxy.fd;
    c->proxy_pid_ = proxy.pid;
  }
  ssh_options_set(ssh, SSH_OPTIONS_FD, &c->socket_);
  c->watch_socket_ = ::fcntl(c->socket_, F_DUPFD_CLOEXEC, 0);
  if (c->watch_socket_ < 0) return InternalError(std::string("dup: ") + std::strerror(errno));
  const Clock::time_point start = Clock::now();
  if (watch) {
    watch(c.get(), true);
    unwatch.watched = true;
  }
  Status login = [&]() -> Status {
    c->socket_handed_over_ = true;  // libssh takes it up in ssh_connect
    if (ssh_connect(ssh) != SSH_OK) {
      const std::string error = ssh_get_error(ssh);
      if (!options.ciphers.empty() &&
          error.find("no match for method encryption") != std::string::npos) {
        return InvalidArgumentError(where + " accepts none of the ciphers " + options.ciphers);
      }
      return TransientError("cannot connect to " + where + ": " + error);
    }
    OBJFS_RETURN_IF_ERROR(CheckHostKey(ssh, options));
    OBJFS_RETURN_IF_ERROR(Authenticate(ssh, options, start));
    c->sftp_ = sftp_new(ssh);
    if (c->sftp_ == nullptr) {
      return TransientError("cannot open an SFTP session on " + where + ": " + ssh_get_error(ssh));
    }
    if (sftp_init(c->sftp_) != SSH_OK) {
      return TransientError("SFTP handshake with " + where + " failed: " + ssh_get_error(ssh));
    }
    OBJFS_ASSIGN_OR_RETURN(c->wire_, SftpWire::Open(ssh));
    c->wire_->set_reply_timeout(ReplyTimeoutFor(options, std::chrono::milliseconds(0)));
    return Status::Ok();
  }();
  // The watchdog cut the connection: whatever libssh made of that (a refused key, among
  // others) is not the server's answer.
  if (!login.ok() && c->marked_broken()) return LoginTimedOut(options, start);
  OBJFS_RETURN_IF_ERROR(login);
  return c;
}

std::chrono::milliseconds ReplyTimeoutFor(const SftpConnectOptions& options,
                                          std::chrono::milliseconds allowed) {
  return std::max(options.reply_timeout,
                  std::max(options.request_timeout, allowed) + options.request_timeout);
}

SftpConnection::~SftpConnection() {
  wire_.reset();
  if (sftp_ != nullptr) sftp_free(sftp_);
  // The descriptor given with SSH_OPTIONS_FD is closed by libssh, once: when the connection
  // fails, or here by ssh_free, which closes the descriptor it still holds. Not after
  // ssh_disconnect, which forgets it without closing it: each dropped connection then kept a
  // descriptor, and its SSH session on the server, for the rest of the mount. Nor by objfs: after
  // a failure its number may be another thread's new connection's by now, which even a look at
  // it (fstat) would race with.
  if (ssh_ != nullptr) ssh_free(ssh_);
  if (!socket_handed_over_ && socket_ >= 0) ::close(socket_);
  if (watch_socket_ >= 0) ::close(watch_socket_);
  if (proxy_pid_ > 0) {
    // Its connection is closed by now, so it is on its way out; a proxy that ignores that
    // is told to stop, with whatever it started (its process group).
    ::kill(-proxy_pid_, SIGTERM);
    for (int waited_ms = 0;; waited_ms += 10) {
      const pid_t done = ::waitpid(proxy_pid_, nullptr, WNOHANG);
      if (done != 0 && !(done < 0 && errno == EINTR)) break;  // reaped, or not our child
      if (waited_ms == 2000) ::kill(-proxy_pid_, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

bool SftpConnection::healthy() const {
  return !broken_ && wire_ != nullptr && wire_->healthy() && ssh_is_connected(ssh_) != 0;
}

SftpSessionPool::SftpSessionPool(SftpConnectOptions options, int size)
    : options_(std::move(options)), size_(std::max(1, size)) {
  StartWatchdog();
}

SftpSessionPool::~SftpSessionPool() { StopWatchdog(); }

void SftpSessionPool::StartWatchdog() {
  if (options_.request_timeout.count() <= 0 || watchdog_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stopping_ = false;
  }
  watchdog_ = std::thread([this] { Watch(); });
}

void SftpSessionPool::StopWatchdog() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  watch_cv_.SignalAll();
  if (watchdog_.joinable()) watchdog_.join();
}

void SftpSessionPool::Watch() {
  using Clock = std::chrono::steady_clock;
  const auto limit = options_.request_timeout;
  const auto interval = std::clamp<std::chrono::milliseconds>(
      limit / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  MutexLock lock(&mu_);
  while (!stopping_) {
    watch_cv_.WaitFor(&mu_, interval);
    if (stopping_) break;
    const Clock::time_point now = Clock::now();
    const std::optional<DeadlineClock::time_point> unmount = CallDeadlineCap();
    for (auto& [connection, watched] : leased_) {
      // Acts only on connections still registered (under mu_, which Release and the end of
      // Connect take to unregister), through the connection's own descriptor.
      const int fd = connection->watch_socket();
      if (now - watched.since < limit || fd < 0 || connection->marked_broken()) continue;
      std::chrono::milliseconds allowed = limit;
      std::string why = "request_timeout";
      if (watched.silence_allowed > limit) {
        if (unmount && now >= *unmount) {
          why = "request_timeout, after the unmount's operation_timeout was spent";
        } else {
          allowed = watched.silence_allowed;
          why = "the most a server-side copy or fsync of its size may take";
        }
      }
      tcp_info info{};
      socklen_t len = sizeof info;
      if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0) {
        // Milliseconds since the server last sent anything on this connection.
        if (std::chrono::milliseconds(info.tcpi_last_data_recv) < allowed) continue;
      } else {
        // Through a proxy command: what the proxy reads (from the server, and the requests
        // sent) is the connection's sign of life. Without it, the call's own time.
        const std::optional<uint64_t> read = ProcessReadBytes(connection->proxy_pid());
        if (read &&
            (*read != watched.proxy_read || watched.proxy_read_changed == Clock::time_point{})) {
          watched.proxy_read = *read;
          watched.proxy_read_changed = now;
        }
        const Clock::time_point quiet_since =
            read ? std::max(watched.proxy_read_changed, watched.since) : watched.since;
        if (now - quiet_since < allowed) continue;
      }
      // Logged first: the call fails as soon as the socket is shut down, and what its caller
      // sees (EIO) must already have its reason in the log. (A login cut fails with its own
      // TimedOut, which says it all.)
      if (options_.log && !watched.logging_in) {
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%.1f",
                      std::chrono::duration<double>(allowed).count());
        options_.log(LogLevel::kWarn, "SFTP server " + options_.user + "@" + HostPort(options_) +
                                          " sent nothing for " + seconds + " s (" + why +
                                          ") during a call; dropping that connection");
      }
      // Wakes the thread blocked in libssh: its call fails and the connection is dropped.
      connection->MarkBroken();
      ::shutdown(fd, SHUT_RDWR);
      ++cut_;
      MarkStalledLocked("it sent nothing for request_timeout");
    }
  }
}

void SftpSessionPool::MarkStalledLocked(const std::string& why) {
  const auto pause = std::max<std::chrono::milliseconds>(options_.request_timeout,
                                                         std::chrono::milliseconds(1000));
  stalled_until_ = std::chrono::steady_clock::now() + pause;
  stalled_ = TransientError("SFTP server " + options_.user + "@" + HostPort(options_) +
                            " is not answering (" + why + "); not asked again for " +
                            std::to_string(pause.count()) + " ms");
}

void SftpSessionPool::SetWatched(SftpConnection* connection, bool watched) {
  MutexLock lock(&mu_);
  if (watched) {
    leased_[connection] = Watched{std::chrono::steady_clock::now(), /*logging_in=*/true};
  } else {
    leased_.erase(connection);
  }
}

void SftpSessionPool::AllowSilence(SftpConnection& connection, std::chrono::milliseconds allowed) {
  MutexLock lock(&mu_);
  auto it = leased_.find(&connection);
  if (it != leased_.end()) it->second.silence_allowed = allowed;
}

void SftpSessionPool::DropIdle() {
  std::vector<std::unique_ptr<SftpConnection>> dropped;
  {
    MutexLock lock(&mu_);
    dropped.swap(idle_);
  }
  // Closed outside the lock.
}

SftpSessionPool::Lease::~Lease() {
  if (pool_ != nullptr && connection_ != nullptr) pool_->Release(std::move(connection_));
}

Result<SftpSessionPool::Lease> SftpSessionPool::Acquire(
    std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::chrono::steady_clock::time_point not_before;
  {
    MutexLock lock(&mu_);
    while (idle_.empty() && leased_or_connecting_ >= size_) {
      if (!deadline) {
        cv_.Wait(&mu_);
      } else if (!cv_.WaitUntil(&mu_, *deadline) && idle_.empty() &&
                 leased_or_connecting_ >= size_) {
        return TimedOutError("no SFTP connection to " + HostPort(options_) +
                             " became free in time (operation_timeout)");
      }
    }
    if (!idle_.empty()) {
      std::unique_ptr<SftpConnection> c = std::move(idle_.back());
      idle_.pop_back();
      ++leased_or_connecting_;
      leased_[c.get()] = Watched{std::chrono::steady_clock::now()};
      return Lease(this, std::move(c));
    }
    // Refused credentials (or host key) are not tried again for a while: a password that
    // no longer works must not be sent on every request (account lockouts, fail2ban).
    if (!refused_.ok() && std::chrono::steady_clock::now() < refused_until_) return refused_;
    // A server that just let a call or a login wait out request_timeout is not asked again
    // for a while: each of the reads of one read(2) would otherwise wait as long again.
    if (!stalled_.ok() && std::chrono::steady_clock::now() < stalled_until_) return stalled_;
    ++leased_or_connecting_;
    not_before = next_attempt_;
  }
  // Back off while connecting keeps failing for transient reasons.
  std::this_thread::sleep_until(deadline ? std::min(not_before, *deadline) : not_before);
  const auto connect_start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<SftpConnection>> c = SftpConnection::Connect(
      options_,
      [this](SftpConnection* connection, bool watched) { SetWatched(connection, watched); });
  MutexLock lock(&mu_);
  if (!c.ok()) {
    --leased_or_connecting_;
    cv_.Signal();
    Status status = c.status();
    if (status.code() == StatusCode::kPermissionDenied && ever_connected_) {
      const auto now = std::chrono::steady_clock::now();
      if (!first_refusal_) first_refusal_ = now;
      if (now - *first_refusal_ < kRefusalGrace) {
        status = TransientError(status.message() + " (after logging in before: will try again)");
      }
    }
    if (status.code() == StatusCode::kTimedOut) {
      // A login the server let wait: not asked again for a while, as after a stalled call.
      MarkStalledLocked(status.message());
    } else if (status.code() == StatusCode::kTransient) {
      // Refused or reset connections fail fast; one that used up its time is a stalled server.
      const auto now = std::chrono::steady_clock::now();
      if (now - connect_start >=
          std::min<std::chrono::milliseconds>(options_.connect_timeout, options_.request_timeout) -
              std::chrono::milliseconds(100)) {
        MarkStalledLocked(status.message());
      }
      consecutive_failures_ = std::min(consecutive_failures_ + 1, 6);
      next_attempt_ = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(50) * (1 << consecutive_failures_);
    } else if (status.code() == StatusCode::kPermissionDenied) {
      refused_ = status;
      refused_until_ = std::chrono::steady_clock::now() + kRefusedRetryDelay;
    }
    // A server that let us in before now offers a host key that is refused (it changed): the
    // calls fail, so the log must say why, once per reason.
    if (ever_connected_ && c.status().code() == StatusCode::kPermissionDenied &&
        c.status().message().rfind("host key of ", 0) == 0 &&
        c.status().message() != last_logged_refusal_) {
      last_logged_refusal_ = c.status().message();
      if (options_.log) options_.log(LogLevel::kError, c.status().message());
    }
    return status;
  }
  consecutive_failures_ = 0;
  next_attempt_ = {};
  stalled_ = Status::Ok();
  refused_ = Status::Ok();
  ever_connected_ = true;
  first_refusal_.reset();
  last_logged_refusal_.clear();
  leased_[c->get()] = Watched{std::chrono::steady_clock::now()};
  return Lease(this, std::move(c).value());
}

void SftpSessionPool::Release(std::unique_ptr<SftpConnection> connection) {
  MutexLock lock(&mu_);
  leased_.erase(connection.get());
  --leased_or_connecting_;
  if (connection->healthy()) idle_.push_back(std::move(connection));
  cv_.Signal();
}

}  // namespace objfs::sftp
