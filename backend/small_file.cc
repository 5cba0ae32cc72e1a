#include "backend/small_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace objfs {
namespace {

std::string_view KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

Status NotRegular(std::string_view what, const std::string& path, mode_t mode) {
  std::string message(what);
  message.append(" '").append(path).append("' is not a regular file (").append(KindOf(mode));
  message += ")";
  return InvalidArgumentError(std::move(message));
}

Status TooLarge(std::string_view what, const std::string& path, size_t max_bytes) {
  std::string message(what);
  message.append(" '").append(path).append("' is larger than ");
  message.append(std::to_string(max_bytes)).append(" bytes");
  return InvalidArgumentError(std::move(message));
}

// /dev/null (under any name): an empty file, the usual way to say "none".
bool IsDevNull(const struct stat& st) { return S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3); }

}  // namespace

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes,
                                  std::string_view what) {
  // O_NONBLOCK: the open of a FIFO without a writer returns at once (and fstat refuses it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    std::string message = "cannot read ";
    message.append(what).append(" '").append(path).append("': ").append(std::strerror(err));
    if (err == ENOENT || err == ENOTDIR) return NotFoundError(std::move(message));
    if (err == EACCES || err == EPERM) return PermissionDeniedError(std::move(message));
    return InvalidArgumentError(std::move(message));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string message = "cannot read ";
    message.append(what).append(" '").append(path).append("': ").append(std::strerror(errno));
    return InvalidArgumentError(std::move(message));
  }
  if (IsDevNull(st)) return std::string();
  if (!S_ISREG(st.st_mode)) return NotRegular(what, path, st.st_mode);
  if (static_cast<unsigned long long>(st.st_size) > max_bytes) {
    return TooLarge(what, path, max_bytes);
  }
  // A regular file's reads do not block; the bound holds even if the file grows meanwhile.
  std::string text;
  char buf[16384];
  while (text.size() <= max_bytes) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string message = "cannot read ";
      message.append(what).append(" '").append(path).append("': ").append(std::strerror(errno));
      return InvalidArgumentError(std::move(message));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  if (text.size() > max_bytes) return TooLarge(what, path, max_bytes);
  return text;
}

Status CheckRegularFileIfExists(const std::string& path, std::string_view what) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return Status::Ok();
  if (S_ISREG(st.st_mode) || IsDevNull(st)) return Status::Ok();
  return NotRegular(what, path, st.st_mode);
}

}  // namespace objfs
