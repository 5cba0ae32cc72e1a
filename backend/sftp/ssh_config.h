// What OpenSSH's client configuration says about a host, so that sftp://nas/... reaches what
// `ssh nas` and `sshfs nas:` reach.
//
// The files (~/.ssh/config, /etc/ssh/ssh_config, or the one named by -o ssh_config) are read
// by libssh's own parser, which knows Host patterns, Match, Include and the keywords below; this
// file only asks it what it found and turns a ProxyJump or ProxyCommand into a command objfs
// can run. As with ssh(1), the first value found for a keyword wins, and what the command line
// says (a user or port in the URL, -o identity, -o known_hosts) wins over every file.
#pragma once

#include <libssh/libssh.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/status.h"

namespace objfs::sftp {

struct SshHostConfig {
  std::string host;  // HostName, or the name asked about when the files give none
  int port = 22;     // Port, or 22
  std::string user;  // User; empty when the files give none
  // ProxyCommand, or the `ssh -W` command libssh makes of a ProxyJump; %h, %p and %r are still
  // to be expanded (ExpandProxyCommand). Empty: connect directly.
  std::string proxy_command;
  bool proxy_jump = false;         // proxy_command was made from ProxyJump
  std::string known_hosts;         // UserKnownHostsFile; empty: none given
  std::string global_known_hosts;  // GlobalKnownHostsFile; empty: none given
  // The session the files were read into, for SftpConnectOptions::config; null without files.
  std::shared_ptr<ssh_session_struct> session;
};

// The configuration of `alias` in `files`, in order (missing files are skipped, as ssh does
// for its default ones). `home` expands "~" and "%d" in file names the files give. Fails with
// InvalidArgument naming the file when libssh cannot parse one.
Result<SshHostConfig> ReadSshConfig(const std::string& alias, const std::vector<std::string>& files,
                                    const std::string& home);

// Whether `name` (a user or host name) may be put in a proxy command run by a shell: letters,
// digits and . _ - @ : % + [ ] only.
bool SafeForProxyCommand(const std::string& name);

// `command` with OpenSSH's tokens expanded: %h the host, %p the port, %r the user, %% a '%'. A
// command made from a ProxyJump (`proxy_jump`) runs `ssh` for the jump: it is given
// `-o BatchMode=yes` (no prompt can be answered), the connect timeout, and `-F config_file`
// when the mount names one (as ssh -F passes it on to its jumps).
std::string ExpandProxyCommand(std::string_view command, bool proxy_jump, const std::string& host,
                               int port, const std::string& user, const std::string& config_file,
                               int connect_timeout_s);

}  // namespace objfs::sftp
