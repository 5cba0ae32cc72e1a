#include "backend/sftp/ssh_config.h"

#include <libssh/libssh.h>
#include <sys/stat.h>

#include <memory>

#include "backend/small_file.h"

namespace objfs::sftp {
namespace {

// The string value of `option` in `ssh`, or "" when it has none.
std::string Get(ssh_session ssh, enum ssh_options_e option) {
  char* value = nullptr;
  if (ssh_options_get(ssh, option, &value) != SSH_OK || value == nullptr) return "";
  std::string out(value);
  ssh_string_free_char(value);
  return out;
}

// "~/x" and "%d/x" in a file name the configuration gave.
std::string ExpandHomeIn(std::string path, const std::string& home) {
  if (home.empty()) return path;
  if (path == "~" || path.rfind("~/", 0) == 0) return home + path.substr(1);
  if (path.rfind("%d/", 0) == 0) return home + path.substr(2);
  return path;
}

// `text` quoted for /bin/sh.
std::string ShellQuoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

Result<SshHostConfig> ReadSshConfig(const std::string& alias, const std::vector<std::string>& files,
                                    const std::string& home) {
  SshHostConfig out;
  out.host = alias;
  if (files.empty()) return out;
  std::shared_ptr<ssh_session_struct> ssh(ssh_new(), [](ssh_session s) {
    if (s != nullptr) ssh_free(s);
  });
  if (!ssh) return InternalError("ssh_new failed");
  int no = 0;
  ssh_options_set(ssh.get(), SSH_OPTIONS_PROCESS_CONFIG, &no);
  if (ssh_options_set(ssh.get(), SSH_OPTIONS_HOST, alias.c_str()) != SSH_OK) {
    return InvalidArgumentError("'" + alias + "' is not a host name libssh accepts");
  }
  for (const std::string& file : files) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) continue;
    // libssh would block for ever opening a FIFO, or read a device without end.
    OBJFS_RETURN_IF_ERROR(CheckRegularFileIfExists(file, "ssh configuration"));
    if (ssh_options_parse_config(ssh.get(), file.c_str()) != SSH_OK) {
      return InvalidArgumentError("cannot read the ssh configuration " + file + ": " +
                                  ssh_get_error(ssh.get()));
    }
  }
  if (std::string host = Get(ssh.get(), SSH_OPTIONS_HOST); !host.empty()) out.host = host;
  unsigned int port = 0;
  if (ssh_options_get_port(ssh.get(), &port) == SSH_OK && port > 0) {
    out.port = static_cast<int>(port);
  }
  out.user = Get(ssh.get(), SSH_OPTIONS_USER);
  out.proxy_command = Get(ssh.get(), SSH_OPTIONS_PROXYCOMMAND);
  if (out.proxy_command == "none") out.proxy_command.clear();
  // libssh turns "ProxyJump [user@]host[:port]" into "ssh [-l user] [-p port] -W '[%h]:%p' host".
  out.proxy_jump = out.proxy_command.rfind("ssh ", 0) == 0 &&
                   out.proxy_command.find(" -W '[%h]:%p' ") != std::string::npos;
  out.known_hosts = ExpandHomeIn(Get(ssh.get(), SSH_OPTIONS_KNOWNHOSTS), home);
  out.global_known_hosts = ExpandHomeIn(Get(ssh.get(), SSH_OPTIONS_GLOBAL_KNOWNHOSTS), home);
  out.session = std::move(ssh);
  return out;
}

bool SafeForProxyCommand(const std::string& name) {
  if (name.empty() || name[0] == '-') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || c == '@' || c == ':' || c == '%' ||
                    c == '+' || c == '[' || c == ']';
    if (!ok) return false;
  }
  return true;
}

std::string ExpandProxyCommand(std::string_view command, bool proxy_jump, const std::string& host,
                               int port, const std::string& user, const std::string& config_file,
                               int connect_timeout_s) {
  std::string out;
  if (proxy_jump && command.rfind("ssh ", 0) == 0) {
    out = "ssh -o BatchMode=yes -o ConnectTimeout=" + std::to_string(connect_timeout_s);
    if (!config_file.empty()) out += " -F " + ShellQuoted(config_file);
    command.remove_prefix(3);  // keeps the space before the rest
  }
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] != '%' || i + 1 == command.size()) {
      out += command[i];
      continue;
    }
    switch (command[++i]) {
      case 'h':
        out += host;
        break;
      case 'p':
        out += std::to_string(port);
        break;
      case 'r':
        out += user;
        break;
      case '%':
        out += '%';
        break;
      default:  // unknown: kept, as ssh would refuse it and the command will say so
        out += '%';
        out += command[i];
    }
  }
  return out;
}

}  // namespace objfs::sftp
