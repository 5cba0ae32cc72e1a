// Checks that the integration-test servers are real and usable: RGW verifies signatures and
// stores objects, sshd serves SFTP to the authorized key only and can be pinned by known_hosts.

#include "tests/fixtures/test_servers.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/fixtures/free_port.h"
#include "tests/fixtures/run_command.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Body and status of a curl run made with `-w "\n%{http_code}"`.
struct HttpReply {
  std::string body;
  std::string status;
};

HttpReply Curl(std::vector<std::string> argv, std::string_view stdin_data = {}) {
  argv.insert(argv.end() - 1, {"-w", "\n%{http_code}"});
  CommandResult r = RunCommand(argv, stdin_data);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  size_t nl = r.out.rfind('\n');
  if (nl == std::string::npos) return {r.out, ""};
  return {r.out.substr(0, nl), r.out.substr(nl + 1)};
}

std::string CurrentTestName() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "-" + info->name();
}

// A scratch directory on this machine, removed at the end of the test.
class LocalTempDir {
 public:
  LocalTempDir() {
    std::string tmpl = (fs::temp_directory_path() / "objfs-test-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~LocalTempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(RunCommandTest, PassesStdinAndCapturesBothStreams) {
  std::string big(3 << 20, 'a');  // larger than any pipe buffer: needs concurrent I/O
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>('a' + i % 26);
  CommandResult r = RunCommand({"sh", "-c", "cat; echo oops >&2; exit 3"}, big);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, big);
  EXPECT_EQ(r.err, "oops\n");
}

TEST(RunCommandTest, ReportsAProgramThatCannotStart) {
  CommandResult r = RunCommand({"/nonexistent/objfs-no-such-program"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;
}

TEST(RunCommandTest, ReportsTheKillingSignal) {
  CommandResult r = RunCommand({"sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
}

TEST(FreePortTest, ReturnsABindablePort) {
  int port = FreePort();
  ASSERT_GT(port, 0);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
}

TEST(S3TestServerTest, AnswersSignedRequests) {
  const S3TestServer& s3 = SharedS3Server();
  EXPECT_TRUE(s3.endpoint.starts_with("http://127.0.0.1:")) << s3.endpoint;
  std::vector<std::string> argv = SignedCurlArgs(s3, "");
  argv.push_back(s3.endpoint + "/");
  HttpReply reply = Curl(argv);
  EXPECT_EQ(reply.status, "200") << reply.body;
  EXPECT_NE(reply.body.find("<ListAllMyBucketsResult"), std::string::npos) << reply.body;
}

TEST(S3TestServerTest, BucketNamesAreValidAndUnique) {
  std::string a = CreateTestBucket("Some_Test.Name/With Odd*Chars");
  std::string b = CreateTestBucket("Some_Test.Name/With Odd*Chars");
  std::string long_name = CreateTestBucket(std::string(200, 'Q'));
  std::regex valid("[a-z0-9][a-z0-9-]{1,61}[a-z0-9]");
  for (const std::string& name : {a, b, long_name}) {
    EXPECT_TRUE(std::regex_match(name, valid)) << name;
    EXPECT_EQ(name.find("--"), std::string::npos) << name;
  }
  EXPECT_NE(a, b);
  EXPECT_TRUE(a.starts_with("t-some-test-name-with-odd-chars-")) << a;
}

TEST(S3TestServerTest, ObjectRoundTripsThroughATestBucket) {
  const S3TestServer& s3 = SharedS3Server();
  std::string bucket = CreateTestBucket(CurrentTestName());
  std::string data = "objfs round trip\n";
  data.push_back('\0');
  data += std::string(100000, '\xff');
  std::string url = s3.endpoint + "/" + bucket + "/dir/object.bin";

  std::vector<std::string> put = SignedCurlArgs(s3, data);
  put.insert(put.end(), {"-X", "PUT", "--data-binary", "@-", url});
  HttpReply put_reply = Curl(put, data);
  ASSERT_EQ(put_reply.status, "200") << put_reply.body;

  std::vector<std::string> get = SignedCurlArgs(s3, "");
  get.push_back(url);
  HttpReply get_reply = Curl(get);
  EXPECT_EQ(get_reply.status, "200");
  EXPECT_EQ(get_reply.body, data);

  std::vector<std::string> list = SignedCurlArgs(s3, "");
  list.push_back(s3.endpoint + "/" + bucket + "?list-type=2");
  HttpReply list_reply = Curl(list);
  EXPECT_EQ(list_reply.status, "200");
  EXPECT_NE(list_reply.body.find("<Key>dir/object.bin</Key>"), std::string::npos)
      << list_reply.body;
}

TEST(S3TestServerTest, RejectsAWrongSecret) {
  S3TestServer wrong = SharedS3Server();
  wrong.secret_key += "-wrong";
  std::vector<std::string> argv = SignedCurlArgs(wrong, "");
  argv.push_back(wrong.endpoint + "/");
  HttpReply reply = Curl(argv);
  EXPECT_EQ(reply.status, "403");
  // With STS on (as in the test RGW) a wrong secret is a plain AccessDenied.
  EXPECT_TRUE(reply.body.find("SignatureDoesNotMatch") != std::string::npos ||
              reply.body.find("<Code>AccessDenied</Code>") != std::string::npos)
      << reply.body;
}

// sftp in batch mode against the shared server with `key` and `known_hosts`.
CommandResult Sftp(const std::string& key, const std::string& known_hosts, std::string_view batch) {
  const SftpTestServer& server = SharedSftpServer();
  return RunCommand({"sftp",
                     "-b",
                     "-",
                     "-P",
                     std::to_string(server.port),
                     "-i",
                     key,
                     "-o",
                     "IdentitiesOnly=yes",
                     "-o",
                     "BatchMode=yes",
                     "-o",
                     "StrictHostKeyChecking=yes",
                     "-o",
                     "UserKnownHostsFile=" + known_hosts,
                     "-o",
                     "GlobalKnownHostsFile=/dev/null",
                     "-o",
                     "ConnectTimeout=10",
                     server.user + "@" + server.host},
                    batch);
}

TEST(SftpTestServerTest, PutAndGetRoundTrip) {
  const SftpTestServer& server = SharedSftpServer();
  EXPECT_EQ(server.host, "127.0.0.1");
  std::string remote = MakeTestDir(CurrentTestName());
  ASSERT_TRUE(remote.starts_with(server.root + "/")) << remote;
  ASSERT_TRUE(fs::is_directory(remote));

  LocalTempDir local;
  std::string data = "sftp round trip\n" + std::string(50000, 'z');
  WriteFile(local.path() / "in", data);
  std::string batch = "put " + (local.path() / "in").string() + " " + remote + "/file\n" + "get " +
                      remote + "/file " + (local.path() / "out").string() + "\n";
  CommandResult r = Sftp(server.key_path, server.known_hosts, batch);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ReadFile(fs::path(remote) / "file"), data);
  EXPECT_EQ(ReadFile(local.path() / "out"), data);
}

TEST(SftpTestServerTest, TestDirsAreFresh) {
  std::string a = MakeTestDir("same name");
  std::string b = MakeTestDir("same name");
  EXPECT_NE(a, b);
  EXPECT_TRUE(fs::is_empty(a));
  EXPECT_TRUE(fs::is_empty(b));
}

TEST(SftpTestServerTest, RefusesAnUnauthorizedKey) {
  const SftpTestServer& server = SharedSftpServer();
  LocalTempDir local;
  std::string other_key = (local.path() / "other_key").string();
  CommandResult keygen =
      RunCommand({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other_key});
  ASSERT_EQ(keygen.exit_code, 0) << keygen.err;

  CommandResult r = Sftp(other_key, server.known_hosts, "pwd\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("Remote working directory"), std::string::npos) << r.out;
}

TEST(SftpTestServerTest, KnownHostsPinsTheHostKey) {
  const SftpTestServer& server = SharedSftpServer();
  CommandResult ok = Sftp(server.key_path, server.known_hosts, "pwd\n");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("Remote working directory"), std::string::npos) << ok.out;

  // The same server under a different pinned key must be refused.
  LocalTempDir local;
  std::string impostor = (local.path() / "impostor").string();
  ASSERT_EQ(RunCommand({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", impostor}).exit_code,
            0);
  std::string pub = ReadFile(impostor + ".pub");
  std::istringstream fields(pub);
  std::string type, key;
  fields >> type >> key;
  WriteFile(local.path() / "known_hosts",
            "[127.0.0.1]:" + std::to_string(server.port) + " " + type + " " + key + "\n");
  CommandResult bad = Sftp(server.key_path, (local.path() / "known_hosts").string(), "pwd\n");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("HOST IDENTIFICATION HAS CHANGED"), std::string::npos) << bad.err;
}

// A TCP socket bound to 127.0.0.1 on a port of the kernel's choosing and held (not listening),
// as an outgoing connection holds its local port: nothing else can bind that port meanwhile.
class HeldPort {
 public:
  HeldPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~HeldPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = -1;
};

// How many processes have `text` in their command line (a server's directory: its daemons).
int ProcessesNaming(const std::string& text) {
  int n = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadFile(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    n += cmdline.find(text) != std::string::npos ? 1 : 0;
  }
  return n;
}

// Starts SCRIPT (rgw.sh or sshd.sh) and stops it: it comes up on the first port it tries,
// and no daemon of it is left running after the stop.
void ExpectServerStartsAndStopsCleanly(const std::string& script, const std::string& log_name) {
  LocalTempDir local;
  std::string dir = (local.path() / "server").string();
  std::string path = ScriptDir() + "/" + script;
  CommandResult start = RunCommand({"/bin/bash", path, "start", dir});
  std::string log = ReadFile(dir + "/" + log_name);
  const int running = ProcessesNaming(dir + "/");
  CommandResult stop = RunCommand({"/bin/bash", path, "stop", dir});
  ASSERT_EQ(start.exit_code, 0) << start.out << start.err << log;
  EXPECT_EQ(stop.exit_code, 0) << stop.out << stop.err;
  EXPECT_EQ(log.find("was taken"), std::string::npos) << log;
  EXPECT_GE(running, 1);
  EXPECT_EQ(ProcessesNaming(dir + "/"), 0) << "left running after the stop";
}

TEST(SftpTestServerTest, StartsOnceAndStopsEverything) {
  ExpectServerStartsAndStopsCleanly("sshd.sh", "sshd.sh.log");
}

TEST(S3TestServerTest, StartsOnceAndStopsEverything) {
  ExpectServerStartsAndStopsCleanly("rgw.sh", "log/rgw.sh.log");
}

// Starts SCRIPT (rgw.sh or sshd.sh) told to try a port that is taken first, and checks that it
// comes up on another one, said so in its log, and stops again.
void ExpectServerStartsBesideATakenPort(const std::string& script, const std::string& env_name,
                                        const std::string& log_name) {
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  LocalTempDir local;
  std::string dir = (local.path() / "server").string();
  std::string path = ScriptDir() + "/" + script;
  CommandResult start = RunCommand({"env", "OBJFS_TEST_FIRST_PORT=" + std::to_string(held.port()),
                                    "/bin/bash", path, "start", dir});
  std::string log = ReadFile(dir + "/" + log_name);
  CommandResult stop = RunCommand({"/bin/bash", path, "stop", dir});
  ASSERT_EQ(start.exit_code, 0) << start.out << start.err << log;
  EXPECT_EQ(stop.exit_code, 0) << stop.out << stop.err;
  std::string env = ReadFile(dir + "/env");
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(env, m, std::regex(env_name + "=(?:http://127\\.0\\.0\\.1:)?(\\d+)")))
      << env;
  EXPECT_NE(std::stoi(m[1]), held.port()) << env;
  EXPECT_NE(log.find("port " + std::to_string(held.port()) + " was taken"), std::string::npos)
      << log;
  EXPECT_EQ(ProcessesNaming(dir + "/"), 0) << "left running after the stop";
}

// A server whose port is taken between the check and its bind (by another server starting at
// the same moment) starts again on another port instead of failing the run.
TEST(SftpTestServerTest, StartsOnAnotherPortWhenItsPortIsTaken) {
  ExpectServerStartsBesideATakenPort("sshd.sh", "OBJFS_TEST_SFTP_PORT", "sshd.sh.log");
}

TEST(S3TestServerTest, StartsOnAnotherPortWhenItsPortIsTaken) {
  ExpectServerStartsBesideATakenPort("rgw.sh", "OBJFS_TEST_S3_ENDPOINT", "log/rgw.sh.log");
}

}  // namespace
}  // namespace objfs::testing
