// Authenticated SSH connections to one SFTP server, shared by the threads of an SftpStore.
//
// An SSH session (and the SFTP sessions on it) must be used by one thread at a time, and a
// connection costs a TCP and key exchange round trip, so the store borrows a connection per call
// from this pool. A connection that failed at the transport level is dropped and a fresh one is
// made on the next borrow, after a back-off when connecting keeps failing. Host keys are checked
// against a known_hosts file; unknown or changed keys are refused with their fingerprint.
//
// libssh's blocking calls can wait forever on a peer that stopped answering (its SFTP layer
// retries a timed-out read without end), so a watchdog thread shuts down the socket of any
// borrowed connection that has received nothing for request_timeout: every call on it then
// fails at once, and the broken connection is dropped rather than reused. For request_timeout
// after that (or after a login that timed out) no new connection is tried: calls fail at once.
// A login cut this way fails with TimedOut, never as a refusal of the credentials. A call that
// waits on the server's work (copy-data, an fsync) may be silent longer: see SilenceAllowance.
#pragma once

#include <libssh/libssh.h>
#include <libssh/sftp.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/log.h"
#include "backend/mutex.h"
#include "backend/sftp/sftp_wire.h"
#include "backend/status.h"

namespace objfs::sftp {

struct SftpConnectOptions {
  std::string host;
  int port = 22;
  std::string user;
  // Private keys to offer, in order, and nothing else; empty: ssh-agent (if SSH_AUTH_SOCK is
  // set), then libssh's defaults ~/.ssh/id_ed25519, id_ecdsa, id_rsa.
  std::vector<std::string> identity_files;
  std::string known_hosts;  // empty: libssh's default (~/.ssh/known_hosts)
  // Checked after known_hosts, as ssh checks /etc/ssh/ssh_known_hosts; empty: none.
  std::string global_known_hosts;
  bool accept_new_host_key = false;  // record an unknown host key instead of refusing it
  std::chrono::seconds connect_timeout{10};
  // A command whose standard input and output are the connection to the server (ProxyCommand,
  // or ProxyJump made into one; see ssh_config.h), run by /bin/sh; empty: a TCP connection to
  // host and port.
  std::string proxy_command;
  // A session holding what the ssh configuration files say of the host (ReadSshConfig, read
  // once at mount), copied into every session before the settings above, which win: what they
  // say of keys (IdentityFile, offered when identity_files is empty), algorithms and the like
  // is honoured. Null: none read.
  std::shared_ptr<ssh_session_struct> config;
  // Tried (as "password", or as the answer to keyboard-interactive prompts) only after the
  // keys, and only when set. Never logged.
  std::optional<std::string> password;
  // Cipher preference, comma-separated in OpenSSH's names; empty: DefaultCiphers().
  std::string ciphers;
  // A borrowed connection that receives nothing for this long is cut (see above).
  std::chrono::milliseconds request_timeout{30000};
  // The least a connection's wire waits for a reply before it gives the channel up by itself
  // (SftpWire::set_reply_timeout): raised to stay above request_timeout and any silence
  // allowance, so that the watchdog, which logs why, always cuts first.
  std::chrono::milliseconds reply_timeout{SftpWire::kDefaultReplyTimeout};
  // Told (one line each) about cut connections and about refusals of a server that let us in
  // before (a host key that changed during the mount); may be empty.
  LogFunction log;
};

// The wire's reply timeout for a call that may be silent for `allowed` (0: request_timeout):
// reply_timeout, or request_timeout more than the watchdog's limit if that is longer.
std::chrono::milliseconds ReplyTimeoutFor(const SftpConnectOptions& options,
                                          std::chrono::milliseconds allowed);

// AES-GCM first on a CPU with AES and carry-less multiply instructions, where it costs both
// ends less per byte than chacha20-poly1305 (libssh's and OpenSSH's first choice); elsewhere
// libssh's own order (empty).
std::string DefaultCiphers();
// Whether this CPU has the AES and carry-less multiply instructions (x86 only; false elsewhere).
bool CpuHasAesGcm();

// One authenticated connection: libssh's SFTP session for most requests and an SftpWire on a
// second channel for the OpenSSH extensions.
class SftpConnection {
 public:
  // `watch`, when set, is told (connection, true) once the TCP connection is up and
  // (connection, false) before Connect returns, so that the setup can be watched like a call.
  using WatchFn = std::function<void(SftpConnection*, bool)>;
  static Result<std::unique_ptr<SftpConnection>> Connect(const SftpConnectOptions& options,
                                                         const WatchFn& watch = {});
  ~SftpConnection();
  SftpConnection(const SftpConnection&) = delete;
  SftpConnection& operator=(const SftpConnection&) = delete;

  sftp_session sftp() const { return sftp_; }
  ssh_session ssh() const { return ssh_; }
  // The cipher the server sends with, e.g. "aes128-gcm@openssh.com".
  std::string cipher() const;
  SftpWire& wire() const { return *wire_; }
  // False after a transport failure on either channel.
  bool healthy() const;
  void MarkBroken() { broken_ = true; }
  bool marked_broken() const { return broken_; }
  // A descriptor of the connection's TCP socket of its own (-1 before it connected), for the
  // watchdog: libssh closes its descriptor when the connection fails, and that number may then
  // be reused by any other file while this one stays valid, so the watchdog never acts on
  // another file's descriptor.
  int watch_socket() const { return watch_socket_; }
  pid_t proxy_pid() const { return proxy_pid_; }

 private:
  SftpConnection() = default;
  ssh_session ssh_ = nullptr;
  sftp_session sftp_ = nullptr;
  std::unique_ptr<SftpWire> wire_;
  std::atomic<bool> broken_{false};
  int socket_ = -1;  // libssh's, once handed over (ssh_connect): it closes it
  bool socket_handed_over_ = false;
  pid_t proxy_pid_ = -1;   // the proxy command's process, reaped at destruction
  int watch_socket_ = -1;  // ours, a dup of socket_
};

class SftpSessionPool {
 public:
  SftpSessionPool(SftpConnectOptions options, int size);
  ~SftpSessionPool();

  // A connection borrowed for one call; returned to the pool (or dropped if broken) on
  // destruction.
  class Lease {
   public:
    Lease(SftpSessionPool* pool, std::unique_ptr<SftpConnection> connection)
        : pool_(pool), connection_(std::move(connection)) {}
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    SftpConnection* operator->() const { return connection_.get(); }
    SftpConnection& operator*() const { return *connection_; }

   private:
    SftpSessionPool* pool_;
    std::unique_ptr<SftpConnection> connection_;
  };

  // Waits for a free slot and returns its connection, connecting first if needed. Gives up
  // with TimedOut at `deadline`, if any.
  Result<Lease> Acquire(
      std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

  // Drops the idle connections: after one broke, the others may be as dead (sshd restarted).
  void DropIdle();

  // Connections the watchdog has cut so far.
  int cut_connections() const { return cut_.load(); }

  // The watchdog is a thread, and a fork(2) copies only the thread that calls it: a process
  // that forks (to go to the background) stops the watchdog first, while no call is under
  // way, and starts it again in the process that goes on. Without that the child would have
  // no watchdog, and might inherit mu_ locked by it.
  void StopWatchdog() EXCLUDES(mu_);
  void StartWatchdog() EXCLUDES(mu_);

  // While it lives, the borrowed `connection` may receive nothing for `allowed` (when longer
  // than request_timeout) before the watchdog cuts it: a request the server works on before it
  // answers (a server-side copy, an fsync). The unmount's deadline (CapCallDeadlines) still
  // cuts it once it has been silent for request_timeout.
  class SilenceAllowance {
   public:
    SilenceAllowance(SftpSessionPool& pool, SftpConnection& connection,
                     std::chrono::milliseconds allowed)
        : pool_(pool), connection_(connection) {
      pool_.AllowSilence(connection_, allowed);
      // The caller holds the connection: its wire is this thread's to set.
      connection_.wire().set_reply_timeout(ReplyTimeoutFor(pool_.options(), allowed));
    }
    ~SilenceAllowance() {
      connection_.wire().set_reply_timeout(
          ReplyTimeoutFor(pool_.options(), std::chrono::milliseconds(0)));
      pool_.AllowSilence(connection_, std::chrono::milliseconds(0));
    }
    SilenceAllowance(const SilenceAllowance&) = delete;
    SilenceAllowance& operator=(const SilenceAllowance&) = delete;

   private:
    SftpSessionPool& pool_;
    SftpConnection& connection_;
  };

  const SftpConnectOptions& options() const { return options_; }

 private:
  void Release(std::unique_ptr<SftpConnection> connection);
  void Watch();
  // New connections fail at once with a Transient error for request_timeout.
  void MarkStalledLocked(const std::string& why) REQUIRES(mu_);
  // Adds `connection` to (or removes it from) the connections the watchdog looks after.
  void SetWatched(SftpConnection* connection, bool watched);
  void AllowSilence(SftpConnection& connection, std::chrono::milliseconds allowed);

  const SftpConnectOptions options_;
  const int size_;
  Mutex mu_;  // lock 11 of fs/lock_order.h
  CondVar cv_;
  std::vector<std::unique_ptr<SftpConnection>> idle_ GUARDED_BY(mu_);
  int leased_or_connecting_ GUARDED_BY(mu_) = 0;
  int consecutive_failures_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point next_attempt_ GUARDED_BY(mu_){};
  // The last refusal of our credentials or of the host key, answered without connecting
  // until refused_until_.
  static constexpr std::chrono::seconds kRefusedRetryDelay{60};
  Status refused_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point refused_until_ GUARDED_BY(mu_){};
  // A pool that has logged in before takes refusals within kRefusalGrace of the first one as a
  // hiccup (a server going down or restarting can refuse a login it would take a moment later):
  // they back off like transient errors. Later ones are held as above.
  static constexpr std::chrono::seconds kRefusalGrace{10};
  bool ever_connected_ GUARDED_BY(mu_) = false;
  std::optional<std::chrono::steady_clock::time_point> first_refusal_ GUARDED_BY(mu_);
  std::string last_logged_refusal_ GUARDED_BY(mu_);
  // The server let a call or a login wait out its time: new connections are not tried until
  // stalled_until_.
  Status stalled_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point stalled_until_ GUARDED_BY(mu_){};
  // What the watchdog looks after: borrowed connections, and connections logging in.
  struct Watched {
    std::chrono::steady_clock::time_point since;
    bool logging_in = false;
    // See SilenceAllowance; 0: request_timeout.
    std::chrono::milliseconds silence_allowed{0};
    // A proxied connection (a socket pair, which has no TCP_INFO): the bytes its proxy process
    // had read (/proc/PID/io rchar) when the watchdog last saw them change, and when.
    uint64_t proxy_read = 0;
    std::chrono::steady_clock::time_point proxy_read_changed{};
  };
  std::map<SftpConnection*, Watched> leased_ GUARDED_BY(mu_);
  std::atomic<int> cut_{0};
  bool stopping_ GUARDED_BY(mu_) = false;
  CondVar watch_cv_;
  std::thread watchdog_;
};

}  // namespace objfs::sftp
