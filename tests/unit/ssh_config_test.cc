// The OpenSSH client configuration as objfs reads it (libssh's parser, asked what it found),
// and the proxy commands made of ProxyJump and ProxyCommand.

#include "backend/sftp/ssh_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/fixtures/mount.h"

namespace objfs::sftp {
namespace {

class SshConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  objfs::testing::ScratchDir scratch_;
  const std::string dir_ = scratch_.path();
};

TEST_F(SshConfigTest, AnAliasGivesHostPortUserKnownHostsAndAProxyJump) {
  std::string file = Write("config",
                           "# comment\n"
                           "Host nas backup\n"
                           "  HostName 192.0.2.7\n"
                           "  Port 2222\n"
                           "  User alice\n"
                           "  UserKnownHostsFile ~/kh\n"
                           "  GlobalKnownHostsFile /etc/kh\n"
                           "  ProxyJump bob@jump:2200\n"
                           "Host *\n"
                           "  User fallback\n"
                           "  Port 2000\n");
  Result<SshHostConfig> nas = ReadSshConfig("nas", {file}, "/home/a");
  ASSERT_TRUE(nas.ok()) << nas.status().ToString();
  EXPECT_EQ(nas->host, "192.0.2.7");
  EXPECT_EQ(nas->port, 2222);
  EXPECT_EQ(nas->user, "alice");  // the first value found wins, as in ssh
  EXPECT_EQ(nas->known_hosts, "/home/a/kh");
  EXPECT_EQ(nas->global_known_hosts, "/etc/kh");
  EXPECT_TRUE(nas->proxy_jump);
  EXPECT_EQ(ExpandProxyCommand(nas->proxy_command, nas->proxy_jump, nas->host, nas->port, nas->user,
                               "/cfg/it's", 7),
            "ssh -o BatchMode=yes -o ConnectTimeout=7 -F '/cfg/it'\\''s' -l bob -p 2200 -W "
            "'[192.0.2.7]:2222' jump");

  Result<SshHostConfig> other = ReadSshConfig("other.example", {file}, "/home/a");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->host, "other.example");
  EXPECT_EQ(other->port, 2000);
  EXPECT_EQ(other->user, "fallback");
  EXPECT_EQ(other->proxy_command, "");
  EXPECT_EQ(other->known_hosts, "");
}

TEST_F(SshConfigTest, TheFirstFileWinsAndMissingFilesAreSkipped) {
  std::string user = Write("user", "Host nas\n  Port 1111\n");
  std::string system = Write("system", "Host nas\n  Port 2222\n  User sys\n");
  Result<SshHostConfig> c = ReadSshConfig("nas", {dir_ + "/missing", user, system}, "");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->port, 1111);
  EXPECT_EQ(c->user, "sys");
  EXPECT_EQ(c->host, "nas");
}

TEST_F(SshConfigTest, NoFilesMeansTheNameAsGiven) {
  Result<SshHostConfig> c = ReadSshConfig("host.example", {}, "");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "host.example");
  EXPECT_EQ(c->port, 22);
  EXPECT_EQ(c->user, "");
  EXPECT_FALSE(c->proxy_jump);
}

TEST_F(SshConfigTest, MalformedAndUnknownLinesAreSkipped) {
  std::string file = Write("config",
                           "NoSuchKeyword yes\n"
                           "Host nas\n"
                           "  Port notanumber\n"
                           "  HostName real.example\n"
                           "  =\n");
  Result<SshHostConfig> c = ReadSshConfig("nas", {file}, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->host, "real.example");
  EXPECT_EQ(c->port, 22);
}

TEST_F(SshConfigTest, AProxyCommandIsExpandedAsSshDoes) {
  std::string file = Write("config", "Host nas\n  ProxyCommand nc -X 5 %h %p # %r %% %x\n");
  Result<SshHostConfig> c = ReadSshConfig("nas", {file}, "");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->proxy_jump);
  // A user's own command is run as written, with only the tokens expanded.
  EXPECT_EQ(ExpandProxyCommand(c->proxy_command, c->proxy_jump, "h.example", 22, "u", "/cfg", 5),
            "nc -X 5 h.example 22 # u % %x");
  Result<SshHostConfig> none =
      ReadSshConfig("nas", {Write("none", "Host nas\n  ProxyCommand none\n")}, "");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->proxy_command, "");
}

}  // namespace
}  // namespace objfs::sftp
