#include "backend/s3/credentials.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

namespace objfs::s3 {
namespace {

constexpr std::string_view kNoCredentials =
    "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or create "
    "~/.aws/credentials";

std::string_view Trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string Lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
  }
  return out;
}

// An environment variable's value, or empty when unset.
std::string_view Env(const GetEnvFn& getenv, const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? std::string_view() : std::string_view(v);
}

struct FileText {
  bool missing = false;
  std::string text;
};

Result<FileText> ReadWholeFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    if (errno == ENOENT || errno == ENOTDIR) return FileText{.missing = true, .text = {}};
    return PermissionDeniedError("cannot read credentials file " + path + ": " +
                                 std::strerror(errno));
  }
  FileText out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) out.text.append(buf, n);
  if (std::ferror(f.get())) {
    return PermissionDeniedError("cannot read credentials file " + path + ": " +
                                 std::strerror(errno));
  }
  return out;
}

}  // namespace

Result<Credentials> ParseCredentialsFile(std::string_view text, std::string_view profile,
                                         std::string_view path) {
  // Lowercase key -> value for the wanted profile; a profile may appear in several sections.
  std::map<std::string, std::string> keys;
  bool found = false;
  bool in_profile = false;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = Trim(text.substr(0, eol));
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);

    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      const size_t close = line.find(']');
      // A broken section header ends the current section: the keys after it belong to no
      // profile we can name, so they are ignored rather than credited to the previous one.
      if (close == std::string_view::npos) {
        in_profile = false;
        continue;
      }
      in_profile = Trim(line.substr(1, close - 1)) == profile;
      found = found || in_profile;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos || !in_profile) continue;
    keys[Lowercase(Trim(line.substr(0, eq)))] = std::string(Trim(line.substr(eq + 1)));
  }

  const std::string where = "profile '" + std::string(profile) + "' in " + std::string(path);
  if (!found) {
    return PermissionDeniedError("no profile '" + std::string(profile) + "' in " +
                                 std::string(path));
  }
  Credentials creds;
  creds.access_key = keys["aws_access_key_id"];
  creds.secret_key = keys["aws_secret_access_key"];
  creds.session_token = keys["aws_session_token"];
  if (creds.access_key.empty()) return PermissionDeniedError(where + " has no aws_access_key_id");
  if (creds.secret_key.empty()) {
    return PermissionDeniedError(where + " has no aws_secret_access_key");
  }
  return creds;
}

Result<Credentials> LoadCredentials(std::string_view profile, const GetEnvFn& getenv) {
  // A profile named on the command line beats the environment's keys, as the AWS CLI's
  // --profile does.
  const std::string_view id = profile.empty() ? Env(getenv, "AWS_ACCESS_KEY_ID") : "";
  const std::string_view secret = profile.empty() ? Env(getenv, "AWS_SECRET_ACCESS_KEY") : "";
  if (!id.empty() && !secret.empty()) {
    return Credentials{.access_key = std::string(id),
                       .secret_key = std::string(secret),
                       .session_token = std::string(Env(getenv, "AWS_SESSION_TOKEN"))};
  }
  if (!id.empty()) {
    return PermissionDeniedError("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
  }
  if (!secret.empty()) {
    return PermissionDeniedError("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
  }

  const std::string_view home = Env(getenv, "HOME");
  std::string path(Env(getenv, "AWS_SHARED_CREDENTIALS_FILE"));
  const bool explicit_path = !path.empty();
  if (explicit_path) {
    if (path.starts_with("~/") && !home.empty()) path = std::string(home) + path.substr(1);
  } else {
    if (home.empty()) return PermissionDeniedError(std::string(kNoCredentials));
    path = std::string(home) + "/.aws/credentials";
  }

  OBJFS_ASSIGN_OR_RETURN(FileText file, ReadWholeFile(path));
  if (file.missing) {
    std::string message(kNoCredentials);
    if (explicit_path) message += " (AWS_SHARED_CREDENTIALS_FILE names " + path + ", not found)";
    return PermissionDeniedError(std::move(message));
  }

  std::string chosen(profile);
  if (chosen.empty()) chosen = std::string(Env(getenv, "AWS_PROFILE"));
  if (chosen.empty()) chosen = "default";
  return ParseCredentialsFile(file.text, chosen, path);
}

}  // namespace objfs::s3
