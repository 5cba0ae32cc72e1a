#include "backend/s3/aws_config.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/small_file.h"

namespace objfs::s3 {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string Lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
  }
  return out;
}

std::string Env(const GetEnvFn& getenv, const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// The file's text; empty when it does not exist.
Result<std::string> ReadIfExists(const std::string& path) {
  if (path.empty()) return std::string();
  Result<std::string> text = ReadSmallFile(path, 16 << 20, "AWS configuration file");
  if (text.ok()) return text;
  if (text.status().code() == StatusCode::kNotFound) return std::string();
  return PermissionDeniedError(text.status().message());
}

std::string ExpandTilde(std::string path, const std::string& home) {
  if (path.starts_with("~/") && !home.empty()) path = home + path.substr(1);
  return path;
}

const std::map<std::string, std::string>* Section(const IniSections& sections,
                                                  const std::string& name) {
  auto it = sections.find(name);
  return it == sections.end() ? nullptr : &it->second;
}

}  // namespace

IniSections ParseIni(std::string_view text) {
  IniSections out;
  std::map<std::string, std::string>* section = nullptr;
  std::string parent;  // the key whose indented sub-section we are in
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view raw = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    const bool indented = !raw.empty() && (raw.front() == ' ' || raw.front() == '\t');
    const std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      parent.clear();
      const size_t close = line.find(']');
      section = close == std::string_view::npos
                    ? nullptr
                    : &out[std::string(Trim(line.substr(1, close - 1)))];
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos || section == nullptr) continue;
    const std::string key = Lowercase(Trim(line.substr(0, eq)));
    const std::string value(Trim(line.substr(eq + 1)));
    if (key.empty()) continue;
    if (indented && !parent.empty()) {
      std::string name = parent;
      name.append(".").append(key);
      (*section)[name] = value;
      continue;
    }
    parent = value.empty() ? key : std::string();
    if (!value.empty()) (*section)[key] = value;
  }
  return out;
}

std::string HomeDirectory(const GetEnvFn& getenv) {
  std::string home = Env(getenv, "HOME");
  if (!home.empty()) return home;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr) {
    return found->pw_dir;
  }
  return "";
}

std::string AwsProfile::Get(std::string_view key) const {
  auto it = values.find(std::string(key));
  return it == values.end() ? std::string() : it->second;
}

std::string AwsProfile::Where() const {
  std::string files = credentials_path;
  if (!config_path.empty()) files += (files.empty() ? "" : " or ") + config_path;
  return "profile '" + name + "' in " + (files.empty() ? "no shared file" : files);
}

AwsProfile ProfileOf(const AwsProfile& files, std::string_view name) {
  AwsProfile p;
  p.name = std::string(name);
  p.credentials_path = files.credentials_path;
  p.config_path = files.config_path;
  p.config = files.config;
  p.credentials = files.credentials;
  // The config file names profiles "[profile x]", and the default one "[default]" (or
  // "[profile default]").
  for (const std::string& section :
       {std::string(name) == "default" ? std::string("default") : std::string(),
        "profile " + std::string(name)}) {
    if (section.empty()) continue;
    if (const auto* s = Section(files.config, section)) {
      p.found = true;
      for (const auto& [k, v] : *s) p.values[k] = v;
    }
  }
  if (const auto* s = Section(files.credentials, std::string(name))) {
    p.found = true;
    for (const auto& [k, v] : *s) p.values[k] = v;
  }
  return p;
}

Result<AwsProfile> LoadAwsProfile(std::string_view profile, std::string_view credentials_file,
                                  const GetEnvFn& getenv) {
  const std::string home = HomeDirectory(getenv);
  std::string credentials_path(credentials_file);
  if (credentials_path.empty()) credentials_path = Env(getenv, "AWS_SHARED_CREDENTIALS_FILE");
  if (credentials_path.empty() && !home.empty()) credentials_path = home + "/.aws/credentials";
  std::string config_path = Env(getenv, "AWS_CONFIG_FILE");
  if (config_path.empty() && !home.empty()) config_path = home + "/.aws/config";
  credentials_path = ExpandTilde(credentials_path, home);
  config_path = ExpandTilde(config_path, home);

  AwsProfile files;
  files.credentials_path = credentials_path;
  files.config_path = config_path;
  OBJFS_ASSIGN_OR_RETURN(std::string credentials_text, ReadIfExists(credentials_path));
  OBJFS_ASSIGN_OR_RETURN(std::string config_text, ReadIfExists(config_path));
  files.credentials = ParseIni(credentials_text);
  files.config = ParseIni(config_text);

  std::string name(profile);
  if (name.empty()) name = Env(getenv, "AWS_PROFILE");
  if (name.empty()) name = "default";
  return ProfileOf(files, name);
}

std::string ServiceEndpointOf(const AwsProfile& profile, std::string_view service) {
  const std::string services = profile.Get("services");
  if (!services.empty()) {
    if (const auto* s = Section(profile.config, "services " + services)) {
      auto it = s->find(std::string(service) + ".endpoint_url");
      if (it != s->end()) return it->second;
    }
  }
  return profile.Get("endpoint_url");
}

S3ProfileSettings S3SettingsOf(const AwsProfile& profile) {
  S3ProfileSettings s;
  s.region = profile.Get("region");
  s.endpoint = ServiceEndpointOf(profile, "s3");
  const std::string style = Lowercase(profile.Get("s3.addressing_style"));
  if (style == "path") s.addressing = Addressing::kPath;
  if (style == "virtual") s.addressing = Addressing::kVirtualHost;
  return s;
}

}  // namespace objfs::s3
