#include "fs/cli/cache_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "backend/small_file.h"
#include "cache/file_io.h"
#include "cache/staging.h"
#include "cache/upload_records.h"

namespace objfs {

Status CreatePrivateDirectories(const std::string& dir) {
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      path = dir.substr(0, i);
      if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
        return IoError("cannot create cache directory '" + path + "': " + std::strerror(errno));
      }
    }
  }
  return Status::Ok();
}

std::string CacheScope::Text() const {
  return url + "\n" + (server.empty() ? "" : "server " + server + "\n");
}

std::string CacheScope::Describe() const { return server.empty() ? url : url + " on " + server; }

std::string ServerName(std::string_view endpoint) {
  if (endpoint.empty()) return "AWS";
  std::string name(endpoint);
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  const size_t scheme_end = name.find("://");
  const size_t host_start = scheme_end == std::string::npos ? 0 : scheme_end + 3;
  const size_t host_end = std::min(name.find('/', host_start), name.size());
  for (size_t i = 0; i < host_end; ++i) {
    name[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
  }
  const std::string_view scheme = std::string_view(name).substr(0, host_start);
  const std::string_view default_port = scheme == "http://"    ? ":80"
                                        : scheme == "https://" ? ":443"
                                                               : "";
  if (!default_port.empty() &&
      std::string_view(name).substr(host_start, host_end - host_start).ends_with(default_port)) {
    name.erase(host_end - default_port.size(), default_port.size());
  }
  return name;
}

Result<CacheScope> ReadCacheScope(const std::string& dir) {
  OBJFS_ASSIGN_OR_RETURN(std::string text,
                         ReadSmallFile(dir + "/.store", 64 << 10, "cache_dir's .store file"));
  CacheScope named;
  std::string_view rest = text;
  const size_t first_end = std::min(rest.find('\n'), rest.size());
  named.url = std::string(rest.substr(0, first_end));
  rest.remove_prefix(std::min(first_end + 1, rest.size()));
  if (rest.starts_with("server ")) {
    rest.remove_prefix(7);
    named.server = std::string(rest.substr(0, rest.find('\n')));
  }
  return named;
}

Status CheckCacheScope(const std::string& dir, const CacheScope& scope,
                       const UploadRecords* uploads, bool claim) {
  Result<CacheScope> named = ReadCacheScope(dir);
  if (!named.ok() && named.status().code() != StatusCode::kNotFound) return named.status();
  if (named.ok()) {
    if (named->url != scope.url) {
      return InvalidArgumentError("cache directory '" + dir + "' holds the staged writes of " +
                                  named->url + ", not of " + scope.url +
                                  ": mount that with it (what it staged is uploaded there), or "
                                  "give this mount its own -o cache_dir=");
    }
    if (!scope.server.empty() && !named->server.empty() && named->server != scope.server &&
        (StagingArea::HoldsRecords(dir) || (uploads != nullptr && uploads->HoldsLeftovers()))) {
      return InvalidArgumentError(
          "cache directory '" + dir + "' holds what a mount of " + named->Describe() +
          " left, not of " + scope.Describe() + ": mount it " +
          (named->server == "AWS" ? "without -o endpoint=" : "with -o endpoint=" + named->server) +
          " (what it left is uploaded there), or give this mount its own -o cache_dir=");
    }
  }
  if (!claim || (named.ok() && named->Text() == scope.Text())) return Status::Ok();
  return WriteFileAtomically(dir + "/.store", scope.Text());
}

Status CheckCacheDirectory(const std::string& dir, std::string_view option) {
  const uid_t uid = ::getuid();
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return IoError("cannot use cache directory '" + dir + "': " + std::strerror(errno));
  }
  if (S_ISLNK(st.st_mode) && st.st_uid != uid && st.st_uid != 0) {
    return PermissionDeniedError("cache directory '" + dir + "' is a symbolic link owned by uid " +
                                 std::to_string(st.st_uid) +
                                 ": replace it with a directory of "
                                 "your own, or give another -o " +
                                 std::string(option) + "=");
  }
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(dir, ec);
  if (ec) return IoError("cannot use cache directory '" + dir + "': " + ec.message());
  if (::stat(real.c_str(), &st) != 0) {
    return IoError("cannot use cache directory '" + dir + "': " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgumentError("cache directory '" + dir + "' is not a directory");
  }
  if (st.st_uid != uid) {
    return PermissionDeniedError("cache directory '" + real.string() + "' is owned by uid " +
                                 std::to_string(st.st_uid) + ", not by uid " + std::to_string(uid) +
                                 " who mounts: chown " + std::to_string(uid) + " " + real.string() +
                                 ", or give another -o " + std::string(option) + "=");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return PermissionDeniedError("cache directory '" + real.string() +
                                 "' is writable by group or others: chmod 700 " + real.string());
  }
  for (std::filesystem::path parent = real.parent_path();; parent = parent.parent_path()) {
    if (::stat(parent.c_str(), &st) != 0) break;
    const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if ((st.st_uid != uid && st.st_uid != 0) || (others_write && (st.st_mode & S_ISVTX) == 0)) {
      return PermissionDeniedError(
          "cache directory '" + real.string() + "' is in '" + parent.string() +
          "', which another user can change (owner uid " + std::to_string(st.st_uid) + ", mode " +
          std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
          std::to_string(st.st_mode & 7) + "): give a -o " + std::string(option) +
          "= in a directory only you can write");
    }
    if (parent == parent.parent_path()) break;
  }
  return Status::Ok();
}

}  // namespace objfs
