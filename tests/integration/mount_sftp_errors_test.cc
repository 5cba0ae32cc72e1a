// sftp:// mounts that must not come up, and one whose server dies under it: an unknown or
// changed host key, a key the server does not accept, no server at all, a missing root
// directory each make objfs exit 1 before mounting with one line on stderr; trust on first use
// records the host key; a server killed during a read gives EIO, and a new mount works once the
// server is back. Hosts resolve through the OpenSSH client configuration: aliases, the URL and
// -o options winning over it, known-hosts files, ProxyJump and ProxyCommand.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/sftp/session_pool.h"
#include "backend/sftp/sftp_wire.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/free_port.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A fresh ed25519 key pair at `path` (and path.pub); returns `path`.
std::string NewKey(const std::string& path) {
  CommandResult r =
      RunCommand({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "objfs-test", "-f", path});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return path;
}

// A mount that cannot work: objfs (without -f, so a wrong success would go to the background)
// must exit 1 within seconds with one line on stderr that contains every one of `reasons`, and
// leave nothing mounted. Returns that line.
std::string ExpectMountFails(const std::string& url, const std::string& options,
                             const std::vector<std::string>& reasons) {
  ScratchDir temp;
  std::string mnt = temp.path() + "/mnt";
  EXPECT_TRUE(fs::create_directory(mnt));
  auto start = Clock::now();
  CommandResult result =
      RunObjfs({url, mnt, "-o", options + ",cache_dir=" + temp.path() + "/cache"});
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (IsFuseMountPoint(mnt)) {
    ADD_FAILURE() << "objfs mounted " << url << " although it should have failed";
    RunCommand({"fusermount3", "-uz", mnt});
  }
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_LT(seconds, 15.0);
  EXPECT_EQ(result.out, "");
  EXPECT_FALSE(result.err.empty());
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << "not one line: " << result.err;
  EXPECT_EQ(result.err.rfind("objfs: ", 0), 0u) << result.err;
  for (const std::string& reason : reasons) {
    EXPECT_NE(result.err.find(reason), std::string::npos)
        << "expected '" << reason << "' in: " << result.err;
  }
  return result.err;
}

std::string HostPort(const SftpTestServer& server) {
  return server.host + ":" + std::to_string(server.port);
}

TEST(MountSftpErrorsTest, UnknownHostKeyIsRefusedNamingTheHost) {
  const SftpTestServer& server = SharedSftpServer();
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir temp;
  std::string known_hosts = temp.path() + "/known_hosts";
  std::ofstream(known_hosts).close();
  ExpectMountFails(dir.url, "identity=" + server.key_path + ",known_hosts=" + known_hosts,
                   {"host key of " + HostPort(server) + " is not in " + known_hosts +
                    "; add it with ssh-keyscan or use -o accept_new_host_key"});
  EXPECT_EQ(ReadLocal(known_hosts), "") << "a refused key must not be recorded";
}

TEST(MountSftpErrorsTest, AcceptNewHostKeyRecordsTheKeyAndMounts) {
  const SftpTestServer& server = SharedSftpServer();
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/hello", "hello");
  ScratchDir temp;
  std::string known_hosts = temp.path() + "/ssh/known_hosts";  // neither file nor directory yet
  ObjfsMount::Options options;
  options.use_shared_server = false;
  options.extra_options =
      "identity=" + server.key_path + ",known_hosts=" + known_hosts + ",accept_new_host_key";
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, options);
    ASSERT_TRUE(mount);
    EXPECT_EQ(ReadFile(mount->path() + "/hello"), "hello");
  }
  // The recorded key is the server's: the pinned one of the test server.
  std::string pinned = ReadLocal(server.known_hosts);
  std::string key = pinned.substr(pinned.find(' ') + 1);
  while (!key.empty() && key.back() == '\n') key.pop_back();
  std::string recorded = ReadLocal(known_hosts);
  EXPECT_NE(recorded.find(key), std::string::npos) << recorded << "\nwanted: " << key;

  // Now known, it mounts without accept_new_host_key.
  options.extra_options = "identity=" + server.key_path + ",known_hosts=" + known_hosts;
  std::unique_ptr<ObjfsMount> again = ObjfsMount::Start(dir.url, options);
  ASSERT_TRUE(again);
  EXPECT_EQ(ReadFile(again->path() + "/hello"), "hello");
}

TEST(MountSftpErrorsTest, ChangedHostKeyIsRefusedEvenWithAcceptNewHostKey) {
  const SftpTestServer& server = SharedSftpServer();
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir temp;
  std::string other = NewKey(temp.path() + "/other_host_key");
  std::istringstream fields(ReadLocal(other + ".pub"));
  std::string type, blob;
  fields >> type >> blob;
  std::string known_hosts = temp.path() + "/known_hosts";
  std::string line =
      "[" + server.host + "]:" + std::to_string(server.port) + " " + type + " " + blob + "\n";
  std::ofstream(known_hosts) << line;
  for (std::string accept : {"", ",accept_new_host_key"}) {
    SCOPED_TRACE(accept);
    ExpectMountFails(dir.url,
                     "identity=" + server.key_path + ",known_hosts=" + known_hosts + accept,
                     {"host key of " + HostPort(server) + " has CHANGED", known_hosts});
    EXPECT_EQ(ReadLocal(known_hosts), line) << "known_hosts must not be touched";
  }
}

// A key marked "@revoked" is refused, as ssh refuses it, though another line accepts it (libssh
// alone skips the marked line), and accept_new_host_key does not take it either.
TEST(MountSftpErrorsTest, RevokedHostKeyIsRefusedThoughAnotherLineListsIt) {
  const SftpTestServer& server = SharedSftpServer();
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir temp;
  const std::string pinned = ReadLocal(server.known_hosts);
  std::istringstream fields(pinned);
  std::string hosts, type, blob;
  fields >> hosts >> type >> blob;
  const std::string known_hosts = temp.path() + "/known_hosts";
  const std::string text = "@revoked * " + type + " " + blob + "\n" + pinned;
  std::ofstream(known_hosts) << text;
  for (std::string accept : {"", ",accept_new_host_key"}) {
    SCOPED_TRACE(accept);
    ExpectMountFails(dir.url,
                     "identity=" + server.key_path + ",known_hosts=" + known_hosts + accept,
                     {"host key of " + HostPort(server), "is marked @revoked in " + known_hosts});
    EXPECT_EQ(ReadLocal(known_hosts), text);
  }
}

// A private key others may read or write is refused, as ssh refuses an unprotected one.
TEST(MountSftpErrorsTest, IdentityFileOthersMayReadIsRefused) {
  const SftpTestServer& server = SharedSftpServer();
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir temp;
  const std::string key = temp.path() + "/key";
  WriteFile(key, ReadLocal(server.key_path));
  for (const mode_t mode : {0644, 0660, 0606}) {
    ASSERT_EQ(::chmod(key.c_str(), mode), 0);
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    ExpectMountFails(dir.url, "identity=" + key + ",known_hosts=" + server.known_hosts,
                     {"identity file '" + key + "' is open to others (mode " + octal +
                      "), which ssh refuses too: chmod 600 it"});
  }
}

TEST(MountSftpErrorsTest, KeyTheServerDoesNotAcceptIsRefused) {
  const SftpTestServer& server = SharedSftpServer();
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir temp;
  std::string wrong = NewKey(temp.path() + "/wrong_key");
  ExpectMountFails(dir.url, "identity=" + wrong + ",known_hosts=" + server.known_hosts,
                   {"authentication as " + server.user + "@" + server.host + " failed", wrong});
  ExpectMountFails(dir.url,
                   "identity=" + temp.path() + "/missing,known_hosts=" + server.known_hosts,
                   {"cannot read identity file '" + temp.path() + "/missing'"});
}

TEST(MountSftpErrorsTest, UnreachableServerIsReported) {
  const SftpTestServer& server = SharedSftpServer();
  int port = FreePort();
  ASSERT_GT(port, 0);
  std::string url = "sftp://" + server.user + "@127.0.0.1:" + std::to_string(port) + "/tmp";
  ExpectMountFails(url, SftpServerOptions(),
                   {"cannot connect to " + server.user + "@127.0.0.1:" + std::to_string(port),
                    "onnection refused"});
}

TEST(MountSftpErrorsTest, RootThatIsMissingOrNotADirectoryIsReported) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ExpectMountFails(dir.url + "/missing", SftpServerOptions(),
                   {"directory " + dir.path + "/missing does not exist on " +
                    SharedSftpServer().user + "@" + HostPort(SharedSftpServer())});
  WriteFile(dir.path + "/file", "not a directory");
  ExpectMountFails(dir.url + "/file", SftpServerOptions(), {"is not a directory"});
}

TEST(MountSftpErrorsTest, OptionsOfTheOtherSchemeAreRefused) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ExpectMountFails(dir.url, SftpServerOptions() + ",endpoint=http://127.0.0.1:1",
                   {"option 'endpoint' applies to s3:// URLs, not to sftp://"});
  ExpectMountFails("s3://some-bucket", "sessions=2",
                   {"option 'sessions' applies to sftp:// URLs, not to s3://"});
}

// ---- A server of this test's own, killed while a file is being read ----

// The PIDs of the processes descending from `pid` (not `pid` itself).
std::vector<pid_t> Descendants(pid_t pid) {
  std::map<pid_t, std::vector<pid_t>> children;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = ReadLocal(e.path().string() + "/stat");
    size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 2));
    std::string state;
    pid_t parent = 0;
    rest >> state >> parent;
    children[parent].push_back(static_cast<pid_t>(std::stoi(name)));
  }
  std::vector<pid_t> out;
  std::vector<pid_t> todo = {pid};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    for (pid_t c : children[p]) {
      out.push_back(c);
      todo.push_back(c);
    }
  }
  return out;
}

// The state letter of `pid` in /proc (R, S, T, Z, ...), or 0 when it does not exist.
char State(pid_t pid) {
  std::string stat = ReadLocal("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

bool Alive(pid_t pid) {
  char state = State(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

bool Accepts(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// The names of the temporary upload files (".objfs-tmp-*") in server directory `dir`.
std::vector<std::string> TemporaryFiles(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(".objfs-tmp-", 0) == 0) names.push_back(name);
  }
  return names;
}

// An sshd started with sshd.sh in a temporary directory, stopped (with every connection
// process it started) and removed at destruction. The shared server is never touched.
class PrivateSshd {
 public:
  // With `password_auth`, the server also accepts the passwords of system accounts;
  // `sftp_flags` go to its sftp subsystem (internal-sftp); while the file `slow_login_flag`
  // (if given) exists, each login waits in silence until it is removed.
  explicit PrivateSshd(bool password_auth = false, const std::string& sftp_flags = "",
                       const std::string& slow_login_flag = "") {
    char dir_template[] = "/tmp/objfs-sshd-XXXXXX";
    if (::mkdtemp(dir_template) == nullptr) {
      ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
      return;
    }
    dir_ = dir_template;
    CommandResult r = RunCommand(
        {"env", std::string("OBJFS_SSHD_PASSWORD_AUTH=") + (password_auth ? "yes" : "no"),
         "OBJFS_SSHD_SFTP_FLAGS=" + sftp_flags, "OBJFS_SSHD_SLOW_LOGIN=" + slow_login_flag,
         "/bin/bash", Script(), "start", dir_});
    if (r.exit_code != 0) {
      ADD_FAILURE() << "sshd.sh start " << dir_ << " failed: " << r.out << r.err;
      return;
    }
    std::ifstream env(dir_ + "/env");
    std::string line;
    while (std::getline(env, line)) {
      if (line.rfind("export ", 0) == 0) line.erase(0, 7);
      size_t eq = line.find('=');
      if (eq != std::string::npos) vars_[line.substr(0, eq)] = line.substr(eq + 1);
    }
    port_ = std::atoi(vars_["OBJFS_TEST_SFTP_PORT"].c_str());
    started_ = port_ > 0;
  }

  ~PrivateSshd() {
    if (dir_.empty()) return;
    KillConnections();
    RunCommand({"/bin/bash", Script(), "stop", dir_});
    std::error_code ec;
    if (!::testing::Test::HasFailure()) fs::remove_all(dir_, ec);
  }

  bool started() const { return started_; }
  std::string var(const std::string& name) const {
    auto it = vars_.find(name);
    return it == vars_.end() ? "" : it->second;
  }
  std::string url() const {
    return "sftp://" + var("OBJFS_TEST_SFTP_USER") + "@127.0.0.1:" + std::to_string(port_) +
           var("OBJFS_TEST_SFTP_ROOT");
  }
  std::string options() const {
    return "identity=" + var("OBJFS_TEST_SFTP_KEY") +
           ",known_hosts=" + var("OBJFS_TEST_SFTP_KNOWN_HOSTS");
  }
  // A mount of this server's directory, with options() and `extra` ("" or ",opt=value...").
  std::unique_ptr<ObjfsMount> Mount(const std::string& extra = "") const {
    ObjfsMount::Options mount_options;
    mount_options.use_shared_server = false;
    mount_options.extra_options = options() + extra;
    return ObjfsMount::Start(url(), mount_options);
  }

  // SIGKILL to the listening sshd and every connection process: the server is gone as after
  // a crash. Each process is stopped before its children are looked for, so that none forks a
  // new one unseen. True when all of them are gone.
  bool Kill() {
    pid_t listener = ListenerPid();
    if (listener <= 0) return false;
    std::vector<pid_t> victims = {listener};
    for (size_t i = 0; i < victims.size(); ++i) {
      ::kill(victims[i], SIGSTOP);
      if (!WaitStopped(victims[i])) return false;
      for (pid_t child : Descendants(victims[i])) {
        if (std::find(victims.begin(), victims.end(), child) == victims.end()) {
          victims.push_back(child);
        }
      }
    }
    for (pid_t p : victims) ::kill(p, SIGKILL);
    return WaitGone(victims);
  }

  // SIGKILL to every connection's processes, the listener staying: connections drop as when
  // a network path breaks, and new ones are accepted.
  void KillConnections() {
    pid_t listener = ListenerPid();
    if (listener <= 0 || !Alive(listener)) return;
    std::vector<pid_t> connections = Descendants(listener);
    for (pid_t p : connections) ::kill(p, SIGKILL);
    WaitGone(connections);
  }

  // SIGSTOP (or, with `resume`, SIGCONT) to the listening sshd and every connection process:
  // a server that hangs, accepting connections into its backlog and answering nothing.
  // As in Kill(), each process is stopped before its children are looked for.
  bool StopAll(bool resume = false) {
    pid_t listener = ListenerPid();
    if (listener <= 0) return false;
    std::vector<pid_t> all = {listener};
    for (size_t i = 0; i < all.size(); ++i) {
      if (!resume) {
        ::kill(all[i], SIGSTOP);
        if (!WaitStopped(all[i])) return false;
      }
      for (pid_t child : Descendants(all[i])) {
        if (std::find(all.begin(), all.end(), child) == all.end()) all.push_back(child);
      }
    }
    if (resume) {
      for (pid_t p : all) ::kill(p, SIGCONT);
    }
    return true;
  }

  // The connection processes (children of the listener and theirs).
  std::vector<pid_t> ConnectionPids() const {
    pid_t listener = ListenerPid();
    return listener > 0 ? Descendants(listener) : std::vector<pid_t>{};
  }

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }

  // The same sshd (configuration, port, host key) again; true once it accepts connections.
  bool Restart() {
    CommandResult r =
        RunCommand({"/usr/sbin/sshd", "-f", dir_ + "/sshd_config", "-E", dir_ + "/sshd.log"});
    if (r.exit_code != 0) {
      ADD_FAILURE() << "sshd did not restart: " << r.out << r.err;
      return false;
    }
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (!Accepts(port_)) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

 private:
  std::string Script() const { return ScriptDir() + "/sshd.sh"; }

  pid_t ListenerPid() const {
    std::string pid = ReadLocal(dir_ + "/sshd.pid");
    return pid.empty() ? -1 : static_cast<pid_t>(std::atoi(pid.c_str()));
  }

  // Waits until `pid` is stopped (or gone).
  static bool WaitStopped(pid_t pid) {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Alive(pid) && State(pid) != 'T') {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  static bool WaitGone(const std::vector<pid_t>& pids) {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    for (pid_t p : pids) {
      while (Alive(p)) {
        if (Clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return true;
  }

  std::string dir_;
  std::map<std::string, std::string> vars_;
  int port_ = 0;
  bool started_ = false;
};

// "big", `size` pseudo-random bytes, on `sshd`, mounted with read-ahead of no more than 1 MiB
// (so that a read beyond what was read before reaches the server) and opened for reading.
struct BigFile {
  std::string data;
  std::unique_ptr<ObjfsMount> mount;
  int fd = -1;
};
BigFile MountAndOpenBigFile(PrivateSshd& sshd, size_t size, uint64_t seed) {
  BigFile big;
  big.data = PseudoRandomBytes(size, seed);
  WriteFile(sshd.var("OBJFS_TEST_SFTP_ROOT") + "/big", big.data);
  big.mount = sshd.Mount(",read_buffer=1M,max_readahead=1M");
  if (big.mount) big.fd = ::open((big.mount->path() + "/big").c_str(), O_RDONLY | O_CLOEXEC);
  return big;
}

TEST(MountSftpErrorsTest, ServerKilledDuringAReadGivesEioAndTheMountReconnects) {
  PrivateSshd sshd;
  ASSERT_TRUE(sshd.started());
  const size_t kSize = 48 << 20;
  // The read after the kill must reach the server.
  BigFile big = MountAndOpenBigFile(sshd, kSize, 21);
  ASSERT_TRUE(big.mount);
  ASSERT_GE(big.fd, 0) << std::strerror(errno);
  const std::string& data = big.data;
  std::unique_ptr<ObjfsMount>& mount = big.mount;
  const int fd = big.fd;
  std::string buf(1 << 20, '\0');
  ASSERT_EQ(::pread(fd, buf.data(), buf.size(), 0), static_cast<ssize_t>(buf.size()))
      << std::strerror(errno);
  EXPECT_TRUE(buf == data.substr(0, buf.size()));

  ASSERT_TRUE(sshd.Kill());
  const off_t kFar = 40 << 20;
  errno = 0;
  ssize_t n = ::pread(fd, buf.data(), buf.size(), kFar);
  int err = errno;
  EXPECT_EQ(n, -1);
  EXPECT_EQ(err, EIO) << std::strerror(err);
  ::close(fd);

  ASSERT_TRUE(sshd.Restart());
  // The old mount reconnects by itself once the server is back (within the time it lets a
  // server that failed rest before trying it again).
  std::string again;
  EXPECT_TRUE(WaitFor(60,
                      [&] {
                        again = ReadLocal(mount->path() + "/big");
                        return again.size() == kSize;
                      }))
      << "the old mount still reads " << again.size() << " bytes";
  EXPECT_TRUE(again == data) << "the old mount read other bytes after reconnecting";
  std::unique_ptr<ObjfsMount> fresh = sshd.Mount(",read_buffer=1M,max_readahead=1M");
  ASSERT_TRUE(fresh);
  std::string got = ReadFile(fresh->path() + "/big");
  EXPECT_EQ(got.size(), kSize);
  EXPECT_TRUE(got == data) << "the new mount read other bytes";
  EXPECT_EQ(fresh->Stop(), 0);
  EXPECT_EQ(mount->Stop(), 0);
}

// Connections that drop under a mount (the server stays): a read that finds its connection
// gone is retried on a new one, and succeeds with the right bytes.
TEST(MountSftpErrorsTest, ReadsRetryOnANewConnectionWhenOneDrops) {
  PrivateSshd sshd;
  ASSERT_TRUE(sshd.started());
  // Each read below reaches the server.
  BigFile big = MountAndOpenBigFile(sshd, 24 << 20, 41);
  ASSERT_TRUE(big.mount);
  ASSERT_GE(big.fd, 0) << std::strerror(errno);
  const std::string& data = big.data;
  std::unique_ptr<ObjfsMount>& mount = big.mount;
  const int fd = big.fd;
  std::string buf(1 << 20, '\0');
  for (off_t at : {off_t{0}, off_t{8} << 20, off_t{16} << 20}) {
    if (at != 0) sshd.KillConnections();
    ASSERT_EQ(::pread(fd, buf.data(), buf.size(), at), static_cast<ssize_t>(buf.size()))
        << "at " << at << ": " << std::strerror(errno);
    EXPECT_TRUE(buf == data.substr(static_cast<size_t>(at), buf.size())) << "at " << at;
  }
  ::close(fd);
  EXPECT_EQ(mount->Stop(), 0);
}

// The server gone while a file is being written: close() reports the upload that could not
// be confirmed, the data stays staged, the server has no partial file under the name, and
// once the server is back an fsync uploads it.
TEST(MountSftpErrorsTest, ServerKilledWhileWritingKeepsTheDataForARetry) {
  PrivateSshd sshd;
  ASSERT_TRUE(sshd.started());
  const std::string root = sshd.var("OBJFS_TEST_SFTP_ROOT");
  WriteFile(root + "/unsent", "the old content");
  std::unique_ptr<ObjfsMount> mount = sshd.Mount();
  ASSERT_TRUE(mount);
  const std::string file = mount->path() + "/unsent";
  const std::string data = PseudoRandomBytes(3 << 20, 31);
  int fd = ::open(file.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()))
      << std::strerror(errno);

  ASSERT_TRUE(sshd.Kill());
  errno = 0;
  EXPECT_NE(::close(fd), 0) << "close() succeeded with the server gone";
  EXPECT_EQ(errno, EIO) << std::strerror(errno);
  EXPECT_EQ(StagingFilesHolding(mount->cache_dir(), data).size(), 1u)
      << "no staging file with the written data in " << mount->cache_dir();
  EXPECT_EQ(ReadLocal(root + "/unsent"), "the old content");
  EXPECT_TRUE(ReadFile(file) == data) << "reading the unsent file gave other bytes";

  ASSERT_TRUE(sshd.Restart());
  int again = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(again, 0) << std::strerror(errno);
  EXPECT_EQ(::fsync(again), 0) << std::strerror(errno);
  EXPECT_EQ(::close(again), 0) << std::strerror(errno);
  EXPECT_TRUE(ReadLocal(root + "/unsent") == data) << "the server holds other bytes";
  EXPECT_TRUE(StagingFilesHolding(mount->cache_dir(), data).empty())
      << "the staging file stayed after the upload";
  // Nothing of objfs's own is left on the server.
  for (const auto& entry : fs::directory_iterator(root)) {
    EXPECT_EQ(entry.path().filename().string().rfind(".objfs-", 0), std::string::npos)
        << entry.path();
  }
  EXPECT_EQ(mount->Stop(), 0);
}

// A server that hangs while a file is streamed to it: close() gives EIO within its bounded
// wait, and the streamed upload's abort fails too. Once the server answers again the mount
// uploads the file by itself, with nothing but the passing of its retry time (an sftp:// mount
// has no write-back window to start a thread for it), and then removes the temporary file whose
// abort failed, instead of leaving it for the unmount or a next mount.
TEST(MountSftpErrorsTest, AHungServerGetsTheFileByItselfAndKeepsNoTemporaryFile) {
  PrivateSshd sshd;
  ASSERT_TRUE(sshd.started());
  const std::string root = sshd.var("OBJFS_TEST_SFTP_ROOT");
  auto temporary_files = [&root] { return TemporaryFiles(root); };
  auto abandoned_uploads = [](ObjfsMount& mount) {
    return StatsCounter(GetXattr(mount.path(), "user.objfs.stats"), "abandoned_uploads");
  };
  // Writes `data` to `name` in `mount`, hangs the server while the upload is streamed, and
  // resumes it once close() has failed and the streamed upload's abort has failed too (a part
  // may fail first, its connection still logging in, or the close's whole put: either way the
  // abort waits for the server).
  auto write_while_hung = [&](ObjfsMount& mount, const std::string& name, const std::string& data) {
    int fd =
        ::open((mount.path() + "/" + name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()))
        << std::strerror(errno);
    // The upload starts in the background once the file passes its first part.
    ASSERT_TRUE(WaitFor(30, [&] { return !temporary_files().empty(); }))
        << "the write was not streamed";
    ASSERT_TRUE(sshd.StopAll());
    errno = 0;
    EXPECT_NE(::close(fd), 0) << "close() succeeded with the server hung";
    EXPECT_EQ(errno, EIO) << std::strerror(errno);
    // (The close's own whole put, cut by the hang, may leave its temporary file too.)
    EXPECT_TRUE(WaitFor(60, [&] { return abandoned_uploads(mount) >= 1; }))
        << "the streamed upload's abort did not fail with the server hung; log:\n"
        << mount.log();
    ASSERT_TRUE(sshd.StopAll(/*resume=*/true));
  };

  std::unique_ptr<ObjfsMount> mount = sshd.Mount(",request_timeout=2,operation_timeout=6");
  ASSERT_TRUE(mount);
  const std::string data = PseudoRandomBytes(32 << 20, 37);
  ASSERT_NO_FATAL_FAILURE(write_while_hung(*mount, "retried", data));
  EXPECT_TRUE(WaitFor(60, [&] { return ReadLocal(root + "/retried") == data; }))
      << "the file did not reach the server while mounted; log:\n"
      << mount->log();
  EXPECT_TRUE(WaitFor(30, [&] { return temporary_files().empty(); }))
      << "the temporary file stayed while mounted; log:\n"
      << mount->log();
  EXPECT_NE(mount->log().find("by this mount's failed aborts"), std::string::npos) << mount->log();
  EXPECT_EQ(abandoned_uploads(*mount), 0);

  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_EQ(temporary_files(), std::vector<std::string>{}) << mount->log();
}

// A copy on the server (cp within the mount: copy-data into a temporary file) whose connection
// breaks midway, its server process killed: the temporary file could not be removed then. The
// mount removes it once the server answers again, at the latest at its unmount, rather than
// leaving gigabytes on the server for a next mount over the same cache_dir that may never come.
TEST(MountSftpErrorsTest, ACopyCutMidwayLeavesNoTemporaryFileOnTheServer) {
  PrivateSshd sshd;
  ASSERT_TRUE(sshd.started());
  const std::string root = sshd.var("OBJFS_TEST_SFTP_ROOT");
  auto temporary_files = [&root] { return TemporaryFiles(root); };
  auto temporary_bytes = [&] {
    uint64_t bytes = 0;
    for (const std::string& name : temporary_files()) {
      struct stat st {};
      if (::stat((root + "/" + name).c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_size);
    }
    return bytes;
  };
  // Sparse here; copy-data writes every byte of it, which takes a while.
  { std::ofstream big(root + "/big", std::ios::binary); }
  ASSERT_EQ(::truncate((root + "/big").c_str(), 1LL << 30), 0) << std::strerror(errno);
  std::unique_ptr<ObjfsMount> mount = sshd.Mount(",no_server_cp");
  ASSERT_TRUE(mount);
  CommandResult cp;
  std::thread copying([&] {
    cp = RunCommand({"cp", mount->path() + "/big", mount->path() + "/copy"});
  });
  const bool started = WaitFor(60, [&] { return temporary_bytes() > 0; });
  sshd.KillConnections();
  copying.join();
  ASSERT_TRUE(started) << "no copy on the server was seen; log:\n" << mount->log();
  // Whatever cp made of it (EIO, or a copy through the mount), the cut copy's file is gone by
  // the end of the mount, and the log says so.
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_EQ(temporary_files(), std::vector<std::string>{}) << cp.err << mount->log();
  EXPECT_NE(mount->log().find("by this mount's failed aborts"), std::string::npos) << mount->log();
}

// A server that refuses the OpenSSH extensions objfs uses when offered (sftp-server -P):
// reads fall back to 32 KiB requests, df to the constants of an object store, and a link's own
// times cannot be set (EOPNOTSUPP), never its target's instead.
TEST(MountSftpErrorsTest, AServerThatRefusesLimitsStatvfsAndLsetstat) {
  PrivateSshd sshd(/*password_auth=*/false, "-P limits,statvfs,lsetstat");
  ASSERT_TRUE(sshd.started());
  const std::string root = sshd.var("OBJFS_TEST_SFTP_ROOT");
  const std::string data = PseudoRandomBytes(4 << 20, 51);
  WriteFile(root + "/f", data);
  ASSERT_EQ(::symlink("f", (root + "/link").c_str()), 0) << std::strerror(errno);
  struct stat target_before {};
  ASSERT_EQ(::stat((root + "/f").c_str(), &target_before), 0);
  std::unique_ptr<ObjfsMount> mount = sshd.Mount();
  ASSERT_TRUE(mount);

  const std::string before = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_TRUE(ReadFile(mount->path() + "/f") == data);
  const std::string after = GetXattr(mount->path(), "user.objfs.stats");
  const int64_t requests =
      StatsCounter(after, "sftp_read_requests") - StatsCounter(before, "sftp_read_requests");
  EXPECT_GE(requests, (4 << 20) / 32768) << after;
  EXPECT_LE(requests, (4 << 20) / 32768 + 3) << after;

  struct statvfs st {};
  EXPECT_EQ(::statvfs(mount->path().c_str(), &st), 0) << std::strerror(errno);
  EXPECT_GE(static_cast<double>(st.f_bavail) * st.f_frsize, 1e15);

  CommandResult touch = RunCommand({"touch", "-h", "-d", "@1500000000", mount->path() + "/link"});
  EXPECT_NE(touch.exit_code, 0);
  EXPECT_NE(touch.err.find("not supported"), std::string::npos) << touch.err;
  struct stat target_after {};
  ASSERT_EQ(::stat((root + "/f").c_str(), &target_after), 0);
  EXPECT_EQ(target_after.st_mtime, target_before.st_mtime);
  EXPECT_EQ(mount->Stop(), 0);
}

// A system account with a password, for logging in to a PrivateSshd by password; removed at
// scope end.
class TemporaryAccount {
 public:
  TemporaryAccount()
      : name_("objfs-pw-" + std::to_string(::getpid())),
        password_("Pw-" + std::to_string(::getpid()) + "-x7q") {
    CommandResult add = RunCommand({"useradd", "--no-create-home", "--home-dir", "/nonexistent",
                                    "--shell", "/usr/sbin/nologin", name_});
    if (add.exit_code != 0) {
      ADD_FAILURE() << "useradd " << name_ << ": " << add.out << add.err;
      return;
    }
    created_ = true;
    CommandResult pw = RunCommand({"chpasswd"}, name_ + ":" + password_ + "\n");
    if (pw.exit_code != 0) {
      ADD_FAILURE() << "chpasswd: " << pw.out << pw.err;
      return;
    }
    struct passwd* entry = ::getpwnam(name_.c_str());
    if (entry == nullptr) {
      ADD_FAILURE() << "no passwd entry for " << name_;
      return;
    }
    uid_ = entry->pw_uid;
    gid_ = entry->pw_gid;
    ok_ = true;
  }
  ~TemporaryAccount() {
    if (created_) RunCommand({"userdel", name_});
  }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  const std::string& password() const { return password_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

 private:
  std::string name_;
  std::string password_;
  bool created_ = false;
  bool ok_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

// An account that may not chown (not root) rewrites a file of another owner it may write: the
// server refuses to give the new file that owner back, and the upload goes on without it; the
// file is the account's, the log says so once, and later uploads do not ask again. With
// FSETSTAT refused too (sftp-server -P fsetstat), the SETSTAT of the path takes that way.
TEST(MountSftpErrorsTest, AnAccountThatMayNotChownStillReplacesAnotherOwnersFile) {
  TemporaryAccount account;
  ASSERT_TRUE(account.ok());
  for (const char* flags : {"", "-P fsetstat"}) {
    SCOPED_TRACE(std::string("sftp flags: '") + flags + "'");
    PrivateSshd sshd(/*password_auth=*/true, flags);
    ASSERT_TRUE(sshd.started());
    const std::string dir = sshd.var("OBJFS_TEST_SFTP_ROOT") + "/" + account.name();
    ASSERT_TRUE(fs::create_directories(dir));
    for (fs::path p = fs::path(dir).parent_path(); p != "/tmp" && p != "/"; p = p.parent_path()) {
      ASSERT_EQ(::chmod(p.c_str(), 0711), 0) << p << ": " << std::strerror(errno);
    }
    ASSERT_EQ(::chown(dir.c_str(), account.uid(), account.gid()), 0) << std::strerror(errno);
    for (const char* name : {"theirs", "again"}) {
      WriteFile(dir + "/" + name, "old");
      ASSERT_EQ(::chmod((dir + "/" + name).c_str(), 0666), 0);
      ASSERT_EQ(::chown((dir + "/" + name).c_str(), 1234, 2345), 0);
    }
    ScratchDir temp;
    WriteFile(temp.path() + "/password", account.password() + "\n");
    ObjfsMount::Options options;
    options.use_shared_server = false;
    options.extra_options = "known_hosts=" + sshd.var("OBJFS_TEST_SFTP_KNOWN_HOSTS") +
                            ",password_file=" + temp.path() + "/password";
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(
        "sftp://" + account.name() + "@127.0.0.1:" + sshd.var("OBJFS_TEST_SFTP_PORT") + dir,
        options);
    ASSERT_TRUE(mount);
    WriteFile(mount->path() + "/theirs", "rewritten");
    WriteFile(mount->path() + "/again", "rewritten too");
    EXPECT_EQ(mount->Stop(), 0) << mount->log();
    EXPECT_EQ(ReadLocal(dir + "/theirs"), "rewritten");
    EXPECT_EQ(ReadLocal(dir + "/again"), "rewritten too");
    struct stat st {};
    ASSERT_EQ(::stat((dir + "/theirs").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, account.uid());
    const std::string log = mount->log();
    const std::string said = "refused to give";
    EXPECT_NE(log.find(said), std::string::npos) << log;
    EXPECT_EQ(log.find(said), log.rfind(said)) << "said more than once:\n" << log;
  }
}

// objfs sets an upload's mode and mtime with FSETSTAT on its open handle and flushes it with
// fsync@openssh.com, in one batch of requests. A server that refuses FSETSTAT (sftp-server
// -P fsetstat) gets a SETSTAT of the path instead; one without fsync@openssh.com (sftp-server
// does not offer what -P refuses) gets the batch without it.
TEST(MountSftpErrorsTest, AServerThatRefusesFsetstatAndFsyncStillTakesUploads) {
  PrivateSshd sshd(/*password_auth=*/false, "-P fsetstat,fsync");
  ASSERT_TRUE(sshd.started());
  std::unique_ptr<ObjfsMount> mount = sshd.Mount();
  ASSERT_TRUE(mount);
  const std::string file = mount->path() + "/file";
  WriteFile(file, "content");
  CommandResult chmod = RunCommand({"chmod", "640", file});
  ASSERT_EQ(chmod.exit_code, 0) << chmod.err;
  CommandResult touch = RunCommand({"touch", "-d", "@1296705906", file});
  ASSERT_EQ(touch.exit_code, 0) << touch.err;
  WriteFile(mount->path() + "/second", "second");
  // A copy within the mount (copy-data) is finished the same way.
  CommandResult cp = RunCommand({"cp", "--preserve=mode,timestamps", file, file + ".copy"});
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  // A rewrite keeps a chmod another client made meanwhile, by a SETSTAT of the path too.
  const std::string root = sshd.var("OBJFS_TEST_SFTP_ROOT");
  WriteFile(mount->path() + "/private", "old");
  const int fd = ::open((mount->path() + "/private").c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "new", 3), 3);
  ASSERT_EQ(::chmod((root + "/private").c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(::close(fd), 0) << std::strerror(errno);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();

  // On the server: the uploads are complete and have their attributes (the temporary files
  // were created 0600).
  struct stat st {};
  ASSERT_EQ(::stat((root + "/private").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(ReadLocal(root + "/private"), "new");
  ASSERT_EQ(::stat((root + "/file").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtime, 1296705906);
  EXPECT_EQ(ReadLocal(root + "/file"), "content");
  ASSERT_EQ(::stat((root + "/file.copy").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtime, 1296705906);
  EXPECT_EQ(ReadLocal(root + "/file.copy"), "content");
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ASSERT_EQ(::stat((root + "/second").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0644u & ~mask);
  EXPECT_EQ(ReadLocal(root + "/second"), "second");
}

// An edit that keeps bytes of the version it opened (an append) commits under a lock beside
// the file, a symbolic link SYMLINK makes only where the name is free, and whose target tells
// whose it is. A server that makes no links (sftp-server -P symlink), or does not read them
// back (-P readlink), gets the lock as a file made with O_EXCL, and its edits are stored as
// before; the log says so once.
TEST(MountSftpErrorsTest, AServerThatMakesOrReadsNoLinksStillTakesEdits) {
  for (const char* refused : {"-P symlink", "-P readlink"}) {
    SCOPED_TRACE(refused);
    PrivateSshd sshd(/*password_auth=*/false, refused);
    ASSERT_TRUE(sshd.started());
    std::unique_ptr<ObjfsMount> mount = sshd.Mount();
    ASSERT_TRUE(mount);
    const std::string file = mount->path() + "/log";
    WriteFile(file, "line 1\n");
    for (const char* line : {"line 2\n", "line 3\n"}) {
      const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
      ASSERT_GE(fd, 0) << std::strerror(errno);
      ASSERT_EQ(::write(fd, line, 7), 7);
      ASSERT_EQ(::close(fd), 0) << std::strerror(errno);
    }
    EXPECT_EQ(mount->Stop(), 0) << mount->log();
    const std::string root = sshd.var("OBJFS_TEST_SFTP_ROOT");
    EXPECT_EQ(ReadLocal(root + "/log"), "line 1\nline 2\nline 3\n");
    EXPECT_EQ(TemporaryFiles(root), std::vector<std::string>());
    const std::string log = mount->log();
    const std::string said = "commit locks are files";
    EXPECT_NE(log.find(said), std::string::npos) << log;
    EXPECT_EQ(log.find(said), log.rfind(said)) << "said more than once:\n" << log;
  }
}

// While the server does not answer, the mount's root shows the mode the server last gave (or
// EIO), never the mount's defaults (0755): a 0700 directory does not open to every local user
// of a shared mount during an outage.
TEST(MountSftpErrorsTest, TheRootOfAServerThatDoesNotAnswerKeepsItsModeNotTheDefaults) {
  PrivateSshd sshd;
  ASSERT_TRUE(sshd.started());
  std::unique_ptr<ObjfsMount> mount =
      sshd.Mount(",attr_timeout=1,request_timeout=1,operation_timeout=2");
  ASSERT_TRUE(mount);
  struct stat st {};
  ASSERT_EQ(::stat(mount->path().c_str(), &st), 0) << std::strerror(errno);
  ASSERT_EQ(st.st_mode & 07777, 0755u);
  // Changed through the mount, and not looked at since: what the mount made it counts, also
  // once the attributes the chmod left in the caches are out of date (attr_timeout: the time
  // under test, not a wait for an event).
  ASSERT_EQ(::chmod(mount->path().c_str(), 0700), 0) << std::strerror(errno);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(sshd.StopAll());
  errno = 0;
  const int stated = ::stat(mount->path().c_str(), &st);
  const int error = errno;
  ASSERT_TRUE(sshd.StopAll(/*resume=*/true));
  if (stated == 0) {
    EXPECT_EQ(st.st_mode & 07777, 0700u);
  } else {
    EXPECT_EQ(error, EIO) << std::strerror(error);
  }
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

TEST(MountSftpErrorsTest, PasswordFromAFileOrStandardInput) {
  TemporaryAccount account;
  ASSERT_TRUE(account.ok());
  PrivateSshd sshd(/*password_auth=*/true);
  ASSERT_TRUE(sshd.started());
  const std::string dir = sshd.var("OBJFS_TEST_SFTP_ROOT") + "/" + account.name();
  ASSERT_TRUE(fs::create_directories(dir));
  // The account may pass through the server's directories (mkdtemp made them private).
  for (fs::path p = fs::path(dir).parent_path(); p != "/tmp" && p != "/"; p = p.parent_path()) {
    ASSERT_EQ(::chmod(p.c_str(), 0711), 0) << p << ": " << std::strerror(errno);
  }
  ASSERT_EQ(::chown(dir.c_str(), account.uid(), account.gid()), 0) << std::strerror(errno);
  const std::string url =
      "sftp://" + account.name() + "@127.0.0.1:" + sshd.var("OBJFS_TEST_SFTP_PORT") + dir;
  const std::string known_hosts = "known_hosts=" + sshd.var("OBJFS_TEST_SFTP_KNOWN_HOSTS");
  ScratchDir temp;
  WriteFile(temp.path() + "/password", account.password() + "\n");
  WriteFile(temp.path() + "/wrong", "not-the-password\n");

  // The right password from a file: the files are written as that account.
  ObjfsMount::Options options;
  options.use_shared_server = false;
  options.extra_options = known_hosts + ",password_file=" + temp.path() + "/password";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/hello", "written after a password login");
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_EQ(ReadLocal(dir + "/hello"), "written after a password login");
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/hello").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, account.uid());
  EXPECT_EQ(mount->log().find(account.password()), std::string::npos);

  // A wrong one is refused in one line, which does not show it.
  std::string err =
      ExpectMountFails(url, known_hosts + ",password_file=" + temp.path() + "/wrong",
                       {"authentication as " + account.name() + "@127.0.0.1 failed", "password"});
  EXPECT_EQ(err.find("not-the-password"), std::string::npos) << err;
  // Without a password option the login fails (the keys on offer are not the account's).
  ExpectMountFails(url, known_hosts, {"authentication as " + account.name()});

  // From standard input, as one line; objfs goes to the background once mounted.
  const std::string mnt = temp.path() + "/mnt";
  ASSERT_TRUE(fs::create_directory(mnt));
  CommandResult wrong =
      RunCommand({"env", "-u", "SSH_AUTH_SOCK", ObjfsBinary(), url, mnt, "-o",
                  known_hosts + ",password_stdin,cache_dir=" + temp.path() + "/cache"},
                 "not-the-password\n");
  EXPECT_EQ(wrong.exit_code, 1) << wrong.err;
  EXPECT_NE(wrong.err.find("password"), std::string::npos) << wrong.err;
  EXPECT_EQ(wrong.err.find("not-the-password"), std::string::npos) << wrong.err;
  CommandResult right =
      RunCommand({"env", "-u", "SSH_AUTH_SOCK", ObjfsBinary(), url, mnt, "-o",
                  known_hosts + ",password_stdin,cache_dir=" + temp.path() + "/cache"},
                 account.password() + "\n");
  ASSERT_EQ(right.exit_code, 0) << right.err;
  // Unmounted at scope end even when a check below fails.
  struct Unmount {
    std::string path;
    ~Unmount() { RunCommand({"fusermount3", "-u", path}); }
  } unmount{mnt};
  EXPECT_TRUE(IsFuseMountPoint(mnt));
  EXPECT_EQ(ReadLocal(mnt + "/hello"), "written after a password login");
}

// ---- Bounded waits: a server that hangs, connections killed mid-call, a changed host key ----

// Bytes waiting, unread, in the receive queues of the server's side of connections to `port`
// (/proc/net/tcp): a request has reached a server that is not reading.
uint64_t ServerUnreadBytes(int port) {
  std::istringstream table(ReadLocal("/proc/net/tcp") + ReadLocal("/proc/net/tcp6"));
  std::string line;
  uint64_t total = 0;
  char port_hex[8];
  std::snprintf(port_hex, sizeof port_hex, "%04X", port);
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    fields >> slot >> local >> remote >> state >> queues;
    if (local.size() < 5 || local.substr(local.size() - 4) != port_hex) continue;
    size_t colon = queues.find(':');
    if (colon == std::string::npos) continue;
    total += std::stoull(queues.substr(colon + 1), nullptr, 16);
  }
  return total;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Reads 1 MiB at each of `offsets` at once, so that the mount holds several connections.
void ReadConcurrently(int fd, const std::string& data, const std::vector<off_t>& offsets) {
  std::vector<std::thread> readers;
  std::vector<int> ok(offsets.size(), 0);
  for (size_t i = 0; i < offsets.size(); ++i) {
    readers.emplace_back([&, i] {
      std::string buf(1 << 20, '\0');
      ok[i] = ::pread(fd, buf.data(), buf.size(), offsets[i]) == static_cast<ssize_t>(buf.size()) &&
              buf == data.substr(static_cast<size_t>(offsets[i]), buf.size());
    });
  }
  for (auto& t : readers) t.join();
  for (size_t i = 0; i < offsets.size(); ++i) EXPECT_TRUE(ok[i]) << "at " << offsets[i];
}

// sshd's connection processes killed while a read waits for its reply (every connection of
// the pool dies with them, idle ones included): the read is repeated on a new connection and
// returns the right bytes.
TEST(MountSftpErrorsTest, InFlightReadWhoseConnectionIsKilledSucceedsOnANewOne) {
  PrivateSshd sshd;
  ASSERT_TRUE(sshd.started());
  const std::string data = PseudoRandomBytes(24 << 20, 61);
  WriteFile(sshd.var("OBJFS_TEST_SFTP_ROOT") + "/big", data);
  std::unique_ptr<ObjfsMount> mount = sshd.Mount(",read_buffer=1M,max_readahead=1M");
  ASSERT_TRUE(mount);
  const int fd = ::open((mount->path() + "/big").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ReadConcurrently(fd, data, {0, 4 << 20, 8 << 20, 12 << 20});

  // Stop every connection process, start a read, and once its request waits unread at the
  // server, kill them all. Each attempt starts with the mount idle: a read-ahead still in flight
  // or a connection still logging in would otherwise take the read (seen on a loaded machine:
  // the read waited 20 s for a read-ahead whose request the stopped server had already taken,
  // so no byte of it ever waited unread). Processes that appear while others are stopped are
  // stopped too. An attempt that proves nothing is repeated 3 MiB further on, beyond the
  // read-ahead (one 1 MiB buffer) of the one before, up to 3 times.
  const std::string root = mount->path();
  auto requests_in_flight = [&root] {
    return StatsCounter(GetXattr(root, "user.objfs.stats"), "in_flight_requests");
  };
  const off_t kFirst = 16 << 20;
  std::string buf(1 << 20, '\0');
  std::vector<pid_t> connections;
  std::atomic<bool> done{false};
  ssize_t n = 0;
  int err = 0;
  off_t at = kFirst;
  std::thread reader;
  bool waiting = false;
  std::string attempts;
  for (int attempt = 0; attempt < 3 && !waiting; ++attempt) {
    at = kFirst + (static_cast<off_t>(3 * attempt) << 20);
    ASSERT_TRUE(WaitFor(20, [&] { return requests_in_flight() == 0; }))
        << "the mount never went idle: " << requests_in_flight() << " requests in flight";
    connections.clear();
    for (;;) {
      std::vector<pid_t> more;
      for (pid_t p : sshd.ConnectionPids()) {
        if (std::find(connections.begin(), connections.end(), p) == connections.end()) {
          more.push_back(p);
        }
      }
      if (more.empty()) break;
      for (pid_t p : more) ::kill(p, SIGSTOP);
      connections.insert(connections.end(), more.begin(), more.end());
    }
    ASSERT_FALSE(connections.empty());
    const uint64_t unread_before = ServerUnreadBytes(sshd.port());
    done = false;
    reader = std::thread([&, at] {
      n = ::pread(fd, buf.data(), buf.size(), at);
      err = errno;
      done = true;
    });
    WaitFor(20, [&] { return ServerUnreadBytes(sshd.port()) > unread_before || done.load(); });
    waiting = !done.load() && ServerUnreadBytes(sshd.port()) > unread_before;
    if (!waiting) {
      attempts += "\n  at " + std::to_string(at >> 20) + " MiB: " +
                  (done.load() ? "answered while the server was stopped"
                               : "neither answered nor sent within 20 s");
      for (pid_t p : connections) ::kill(p, SIGCONT);
      reader.join();
      EXPECT_EQ(n, static_cast<ssize_t>(buf.size())) << std::strerror(err);
    }
  }
  if (!waiting) ::close(fd);  // so that the mount can be unmounted
  ASSERT_TRUE(waiting) << "the read's request never waited at the stopped server:" << attempts
                       << "\n"
                       << mount->log();
  for (pid_t p : connections) ::kill(p, SIGKILL);
  for (pid_t p : connections) ::kill(p, SIGCONT);
  const bool finished = WaitFor(60, [&] { return done.load(); });
  if (!finished) mount->KillAndWait(SIGKILL);  // ends the read
  reader.join();
  EXPECT_TRUE(finished) << "the read still waits";
  EXPECT_EQ(n, static_cast<ssize_t>(buf.size())) << std::strerror(err) << "\n" << mount->log();
  EXPECT_TRUE(buf == data.substr(static_cast<size_t>(at), buf.size()))
      << "the retried read returned other bytes";
  ::close(fd);
  EXPECT_EQ(mount->Stop(), 0);
}

// The server's host key replaced while a mount is up: calls fail, and the log has one line
// naming the host, saying the key changed and giving the new key's fingerprint.
TEST(MountSftpErrorsTest, HostKeyChangedDuringAMountIsRefusedAndLogged) {
  PrivateSshd sshd;
  ASSERT_TRUE(sshd.started());
  const std::string root = sshd.var("OBJFS_TEST_SFTP_ROOT");
  WriteFile(root + "/before", "seen before the change");
  std::unique_ptr<ObjfsMount> mount = sshd.Mount();
  ASSERT_TRUE(mount);
  EXPECT_EQ(ReadFile(mount->path() + "/before"), "seen before the change");

  ASSERT_TRUE(sshd.Kill());
  const std::string key = sshd.dir() + "/host_ed25519_key";
  fs::remove(key);
  fs::remove(key + ".pub");
  NewKey(key);
  CommandResult fingerprint = RunCommand({"ssh-keygen", "-l", "-f", key + ".pub"});
  ASSERT_EQ(fingerprint.exit_code, 0) << fingerprint.err;
  std::istringstream words(fingerprint.out);
  std::string bits, sha;
  words >> bits >> sha;
  ASSERT_EQ(sha.rfind("SHA256:", 0), 0u) << fingerprint.out;
  ASSERT_TRUE(sshd.Restart());

  WriteFile(root + "/after", "must not be served");
  struct stat st {};
  EXPECT_NE(::stat((mount->path() + "/after").c_str(), &st), 0) << "a changed host key was used";
  const std::string log = mount->log();
  EXPECT_NE(log.find("host key of 127.0.0.1:" + std::to_string(sshd.port()) + " has CHANGED"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(sha), std::string::npos) << log;
  mount->Stop();
}

// A call waiting on the server's work (copy-data, an fsync) gets its reply however long its
// silence allowance lets it be silent, past the wire's own reply timeout. That timeout was a
// fixed 120 s that cut every call first: a server-side copy taking longer (12 GiB at 100 MB/s:
// cp within the mount, or the unchanged bytes of an edit) failed on every try, whatever its
// allowance said. Here the wire's floor is 1 s and the server answers nothing (SIGSTOP) for 3 s
// in the middle of a call that may be silent for 10 s.
TEST(MountSftpErrorsTest, ServerWorkOutlastsTheWiresReplyTimeoutWithinItsAllowance) {
  PrivateSshd sshd;
  ASSERT_TRUE(sshd.started());
  sftp::SftpConnectOptions options;
  options.host = "127.0.0.1";
  options.port = sshd.port();
  options.user = sshd.var("OBJFS_TEST_SFTP_USER");
  options.identity_files = {sshd.var("OBJFS_TEST_SFTP_KEY")};
  options.known_hosts = sshd.var("OBJFS_TEST_SFTP_KNOWN_HOSTS");
  options.request_timeout = std::chrono::milliseconds(500);
  options.reply_timeout = std::chrono::seconds(1);
  sftp::SftpSessionPool pool(options, 1);
  Result<sftp::SftpSessionPool::Lease> lease = pool.Acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  sftp::SftpConnection& c = **lease;
  Result<sftp::SftpWire::Handle> handle =
      c.wire().OpenFile(sshd.var("OBJFS_TEST_SFTP_ROOT"), SSH_FXF_READ, 0);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ(c.wire().reply_timeout(), std::chrono::seconds(1));
  {
    sftp::SftpSessionPool::SilenceAllowance allowance(pool, c, std::chrono::seconds(10));
    EXPECT_GT(c.wire().reply_timeout(), std::chrono::seconds(10));
    ASSERT_TRUE(sshd.StopAll());
    const Clock::time_point stopped = Clock::now();
    // The server's silence, not a wait for something: it answers again 3 s on.
    std::thread resume([&] {
      std::this_thread::sleep_until(stopped + std::chrono::seconds(3));
      sshd.StopAll(/*resume=*/true);
    });
    Result<sftp::SftpWire::FileAttrs> attrs = c.wire().Fstat(*handle);
    resume.join();
    EXPECT_TRUE(attrs.ok()) << attrs.status().ToString();
    EXPECT_GE(Clock::now() - stopped, std::chrono::seconds(3));
  }
  EXPECT_EQ(pool.cut_connections(), 0);
  EXPECT_TRUE(c.healthy());
  // Back to the floor once the server's work is over.
  EXPECT_EQ(c.wire().reply_timeout(), std::chrono::seconds(1));
  EXPECT_TRUE(c.wire().Close(*handle).ok());
}

// A server that lets a login wait (slow or stuck, the credentials fine) is a timeout, never a
// refusal: a mount fails with "timed out", not "accepted none of the credentials"; during a
// mount the calls fail with EIO, not EACCES, however long it lasts, and they work again soon
// after the server answers, not a minute later.
TEST(MountSftpErrorsTest, ALoginTheServerLetsWaitIsATimeoutNotARefusal) {
  ScratchDir flags;
  const std::string slow = flags.path() + "/slow-login";
  PrivateSshd sshd(/*password_auth=*/false, "", slow);
  ASSERT_TRUE(sshd.started());
  const std::string timeouts = ",request_timeout=2,operation_timeout=5";

  WriteFile(slow, "");
  const std::string error =
      ExpectMountFails(sshd.url(), sshd.options() + timeouts,
                       {"login to " + sshd.var("OBJFS_TEST_SFTP_USER") +
                            "@127.0.0.1:" + std::to_string(sshd.port()) + " timed out after ",
                        " s: the server did not answer"});
  EXPECT_EQ(error.find("accepted none"), std::string::npos) << error;

  ASSERT_TRUE(fs::remove(slow));
  std::unique_ptr<ObjfsMount> mount = sshd.Mount(timeouts);
  ASSERT_TRUE(mount);
  WriteFile(sshd.var("OBJFS_TEST_SFTP_ROOT") + "/here", "here");
  EXPECT_EQ(ReadFile(mount->path() + "/here"), "here");

  // Logins wait from now on, and the pool's connections are gone: every call needs a login.
  WriteFile(slow, "");
  sshd.KillConnections();
  // Each stat looks up a new name, so that it reaches the server. Long enough for the pool to
  // hold a refusal for good, were it one: it forgives refusals within 10 s of the first after a
  // good login, and each login attempt here takes request_timeout, followed by as long a pause.
  int probe = 0;
  auto stat_new_name = [&] {
    struct stat st {};
    const std::string name = mount->path() + "/probe-" + std::to_string(probe++);
    return ::stat(name.c_str(), &st) == 0 ? 0 : errno;
  };
  std::map<int, int> errors;  // errno -> how often
  const Clock::time_point start = Clock::now();
  WaitFor(
      40,
      [&] {
        ++errors[stat_new_name()];
        return Clock::now() - start > std::chrono::seconds(22);
      },
      std::chrono::milliseconds(100));
  EXPECT_GT(errors[EIO], 0);
  for (const auto& [err, count] : errors) {
    EXPECT_EQ(err, EIO) << count << " calls failed with " << std::strerror(err);
  }
  EXPECT_NE(mount->log().find(" timed out after "), std::string::npos) << mount->log();

  // The server answers logins again: so does the mount, within request_timeout and a login.
  ASSERT_TRUE(fs::remove(slow));
  const Clock::time_point answering = Clock::now();
  EXPECT_TRUE(WaitFor(20, [&] { return stat_new_name() == ENOENT; }))
      << "still failing " << SecondsSince(answering)
      << " s after the server answers again: " << std::strerror(stat_new_name());
  EXPECT_LT(SecondsSince(answering), 10.0);
  EXPECT_EQ(ReadFile(mount->path() + "/here"), "here");
  EXPECT_EQ(mount->Stop(), 0);
}

// ---- The OpenSSH client configuration (-o ssh_config, ~/.ssh/config) ----

// An ssh configuration file at `path` holding `text`; returns `path`.
std::string WriteSshConfig(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// "Host NAME" with the shared server's address, port, user, key and known_hosts.
std::string SharedServerHostBlock(const std::string& name) {
  const SftpTestServer& server = SharedSftpServer();
  return "Host " + name + "\n  HostName " + server.host + "\n  Port " +
         std::to_string(server.port) + "\n  User " + server.user + "\n  IdentityFile " +
         server.key_path + "\n  UserKnownHostsFile " + server.known_hosts + "\n";
}

TEST(MountSftpErrorsTest, AHostAliasOfTheSshConfigGivesAddressPortUserKeyAndKnownHosts) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/hello", "hello");
  ScratchDir temp;
  std::string config = WriteSshConfig(temp.path() + "/config", SharedServerHostBlock("nas"));
  ObjfsMount::Options options;
  options.use_shared_server = false;  // no identity=, no known_hosts=: the file gives them
  options.extra_options = "ssh_config=" + config;
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start("sftp://nas" + dir.path, options);
  ASSERT_TRUE(mount);
  EXPECT_EQ(ReadFile(mount->path() + "/hello"), "hello");
  WriteFile(mount->path() + "/written", "through the alias");
  ASSERT_EQ(mount->Stop(), 0);
  EXPECT_EQ(ReadLocal(dir.path + "/written"), "through the alias");

  // Without the file the alias means nothing.
  ExpectMountFails("sftp://nas" + dir.path, "ssh_config=none", {"cannot connect to"});
}

TEST(MountSftpErrorsTest, HomesSshConfigIsReadWhenNoneIsNamed) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/hello", "hello");
  ScratchDir home;
  fs::create_directory(home.path() + "/.ssh");
  WriteSshConfig(home.path() + "/.ssh/config", SharedServerHostBlock("homealias"));
  ObjfsMount::Options options;
  options.use_shared_server = false;
  options.env["HOME"] = home.path();
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start("sftp://homealias" + dir.path, options);
  ASSERT_TRUE(mount);
  EXPECT_EQ(ReadFile(mount->path() + "/hello"), "hello");
}

TEST(MountSftpErrorsTest, TheUrlAndOptionsWinOverTheSshConfig) {
  const SftpTestServer& server = SharedSftpServer();
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/hello", "hello");
  ScratchDir temp;
  std::string empty_known_hosts = temp.path() + "/empty_known_hosts";
  std::ofstream(empty_known_hosts).close();
  std::string wrong_key = NewKey(temp.path() + "/wrong_key");
  // Everything the file says is wrong but the address.
  std::string config = WriteSshConfig(
      temp.path() + "/config", "Host wrong\n  HostName " + server.host +
                                   "\n  Port 1\n  User nobody-here\n  IdentityFile " + wrong_key +
                                   "\n  UserKnownHostsFile " + empty_known_hosts + "\n");
  // The file alone fails (so it is read) ...
  ExpectMountFails("sftp://wrong" + dir.path, "ssh_config=" + config,
                   {"cannot connect to nobody-here@" + server.host + ":1"});
  // ... and the URL's user and port, identity= and known_hosts= each win over it.
  ObjfsMount::Options options;
  options.use_shared_server = false;
  options.extra_options = "ssh_config=" + config + ",identity=" + server.key_path +
                          ",known_hosts=" + server.known_hosts;
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(
      "sftp://" + server.user + "@wrong:" + std::to_string(server.port) + dir.path, options);
  ASSERT_TRUE(mount);
  EXPECT_EQ(ReadFile(mount->path() + "/hello"), "hello");
}

TEST(MountSftpErrorsTest, AGlobalKnownHostsFileIsCheckedAfterTheUsersOne) {
  const SftpTestServer& server = SharedSftpServer();
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/hello", "hello");
  ScratchDir temp;
  std::string empty_known_hosts = temp.path() + "/empty_known_hosts";
  std::ofstream(empty_known_hosts).close();
  std::string block = "Host g\n  HostName " + server.host + "\n  Port " +
                      std::to_string(server.port) + "\n  User " + server.user +
                      "\n  IdentityFile " + server.key_path + "\n  UserKnownHostsFile " +
                      empty_known_hosts + "\n  GlobalKnownHostsFile ";
  ObjfsMount::Options options;
  options.use_shared_server = false;
  options.extra_options =
      "ssh_config=" + WriteSshConfig(temp.path() + "/good", block + server.known_hosts + "\n");
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start("sftp://g" + dir.path, options);
    ASSERT_TRUE(mount);
    EXPECT_EQ(ReadFile(mount->path() + "/hello"), "hello");
  }
  EXPECT_EQ(ReadLocal(empty_known_hosts), "") << "a key found globally is not recorded";

  // Another key for the server in the global file is a changed key.
  std::string other = NewKey(temp.path() + "/other_host_key");
  std::istringstream fields(ReadLocal(other + ".pub"));
  std::string type, blob;
  fields >> type >> blob;
  std::string global = temp.path() + "/global_known_hosts";
  std::ofstream(global) << "[" << server.host << "]:" << server.port << " " << type << " " << blob
                        << "\n";
  ExpectMountFails("sftp://g" + dir.path,
                   "ssh_config=" + WriteSshConfig(temp.path() + "/bad", block + global + "\n"),
                   {"has CHANGED"});
}

TEST(MountSftpErrorsTest, AProxyJumpReachesTheServerThroughAJumpHost) {
  PrivateSshd jump;
  ASSERT_TRUE(jump.started());
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/hello", "hello");
  ScratchDir temp;
  std::string config = WriteSshConfig(
      temp.path() + "/config",
      "Host jumphost\n  HostName 127.0.0.1\n  Port " + std::to_string(jump.port()) + "\n  User " +
          jump.var("OBJFS_TEST_SFTP_USER") + "\n  IdentityFile " + jump.var("OBJFS_TEST_SFTP_KEY") +
          "\n  UserKnownHostsFile " + jump.var("OBJFS_TEST_SFTP_KNOWN_HOSTS") +
          "\n  StrictHostKeyChecking yes\n" + SharedServerHostBlock("behind") +
          "  ProxyJump jumphost\n");
  ObjfsMount::Options options;
  options.use_shared_server = false;
  options.extra_options = "ssh_config=" + config;
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start("sftp://behind" + dir.path, options);
    ASSERT_TRUE(mount);
    EXPECT_EQ(ReadFile(mount->path() + "/hello"), "hello");
    WriteFile(mount->path() + "/via-jump", "data");
    ASSERT_EQ(mount->Stop(), 0);
  }
  EXPECT_EQ(ReadLocal(dir.path + "/via-jump"), "data");
  // The jump host let the proxy in: nothing else logs in there.
  EXPECT_NE(ReadLocal(jump.dir() + "/sshd.log").find("Accepted publickey"), std::string::npos);
  // Every proxy process is gone with the mount (none left as a zombie or orphan).
  CommandResult ps = RunCommand({"pgrep", "-f", "-a", "W \\[127.0.0.1\\]:"});
  EXPECT_EQ(ps.out, "");
}

TEST(MountSftpErrorsTest, AProxyCommandThatFailsFailsTheMountAtOnce) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir temp;
  std::string config = WriteSshConfig(temp.path() + "/config",
                                      SharedServerHostBlock("broken") + "  ProxyCommand false\n");
  ExpectMountFails("sftp://broken" + dir.path, "ssh_config=" + config, {"cannot connect to"});
}

// The URL's user and host reach a shell in a proxy command: a name with anything a shell reads
// is refused before any command runs (OpenSSH's CVE-2023-51385).
TEST(MountSftpErrorsTest, AUrlNameWithShellCharactersNeverReachesAProxyCommand) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir temp;
  const std::string marker = temp.path() + "/ran";
  std::string config = WriteSshConfig(
      temp.path() + "/config", SharedServerHostBlock("proxied") + "  ProxyCommand touch " + marker +
                                   "; exec nc %h %p # %r\n");
  ExpectMountFails("sftp://x;id@proxied" + dir.path, "ssh_config=" + config,
                   {"'x;id' cannot be given to the proxy command of proxied"});
  EXPECT_FALSE(fs::exists(marker)) << "the proxy command ran";
}

// A proxy that never answers is cut (request_timeout, though a socket pair has no TCP_INFO),
// and it goes with everything it started, none left behind.
TEST(MountSftpErrorsTest, ASilentProxyIsCutAndLeavesNoProcessBehind) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir temp;
  std::string config = WriteSshConfig(
      temp.path() + "/config",
      SharedServerHostBlock("silent") + "  ProxyCommand sh -c 'sleep 9872 & exec sleep 9873'\n");
  ExpectMountFails("sftp://silent" + dir.path,
                   "ssh_config=" + config + ",request_timeout=2,operation_timeout=4", {});
  EXPECT_TRUE(WaitFor(10,
                      [] {
                        return RunCommand({"pgrep", "-f", "sleep 987[23]"}).out.empty();
                      }))
      << "left behind: " << RunCommand({"pgrep", "-a", "-f", "sleep 987[23]"}).out;
}

// A proxy that stops answering after login is cut like a silent TCP connection: the socket
// pair has no TCP_INFO, so the watchdog reads the proxy's progress from /proc/PID/io. The read
// that was waiting on it goes through a new connection, and so a new proxy.
TEST(MountSftpErrorsTest, AProxyThatStopsAnsweringIsCutAndTheReadGoesThroughANewOne) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/before", "before");
  ScratchDir temp;
  const std::string pids = temp.path() + "/pids";
  // A relay in bash alone: one cat each way, in the process group objfs gives the proxy.
  std::string config =
      WriteSshConfig(temp.path() + "/config",
                     SharedServerHostBlock("stopping") + "  ProxyCommand bash -c 'echo $$ >> " +
                         pids + "; exec 3<>/dev/tcp/%h/%p; cat <&3 & exec cat >&3'\n");
  ObjfsMount::Options options;
  options.use_shared_server = false;
  // Without the watchdog the read below would wait out the 120 s operation_timeout.
  options.extra_options = "ssh_config=" + config + ",request_timeout=2,operation_timeout=120";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start("sftp://stopping" + dir.path, options);
  ASSERT_TRUE(mount);
  ASSERT_EQ(ReadFile(mount->path() + "/before"), "before");
  const std::string stopped = ReadLocal(pids);
  std::vector<std::string> stopped_pids;
  std::istringstream lines(stopped);
  for (std::string pid; std::getline(lines, pid);) stopped_pids.push_back(pid);
  ASSERT_FALSE(stopped_pids.empty());
  for (const std::string& pid : stopped_pids) {
    ASSERT_EQ(RunCommand({"kill", "-STOP", "--", "-" + pid}).exit_code, 0) << pid;
  }
  WriteFile(dir.path + "/after", "after");
  CommandResult cat = RunCommand({"timeout", "-s", "KILL", "30", "cat", mount->path() + "/after"});
  for (const std::string& pid : stopped_pids) RunCommand({"kill", "-CONT", "--", "-" + pid});
  EXPECT_EQ(cat.exit_code, 0) << cat.err;
  EXPECT_EQ(cat.out, "after");
  EXPECT_GT(ReadLocal(pids).size(), stopped.size()) << "no new proxy was started";
  ASSERT_EQ(mount->Stop(), 0);
  // Every proxy's process group, the stopped ones included, went with its connection.
  std::istringstream all(ReadLocal(pids));
  for (std::string pid; std::getline(all, pid);) {
    EXPECT_TRUE(WaitFor(10, [&] { return kill(-std::stoi(pid), 0) != 0; })) << "left: " << pid;
  }
}

TEST(MountSftpErrorsTest, AMissingSshConfigFileIsRefused) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir temp;
  ExpectMountFails(dir.url, SftpServerOptions() + ",ssh_config=" + temp.path() + "/missing",
                   {"cannot read ssh_config file '" + temp.path() + "/missing'"});
}

}  // namespace
}  // namespace objfs::testing
