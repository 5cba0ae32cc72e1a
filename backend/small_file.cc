#include "backend/small_file.h"

#include <fcntl.h>
#include <poll.h>
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

std::string Duration(std::chrono::milliseconds wait) {
  if (wait.count() % 1000 == 0) return std::to_string(wait.count() / 1000) + " s";
  return std::to_string(wait.count()) + " ms";
}

// /dev/null (under any name): an empty file, the usual way to say "none".
bool IsDevNull(const struct stat& st) { return S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3); }

}  // namespace

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes, std::string_view what,
                                  std::chrono::milliseconds fifo_wait) {
  auto cannot_read = [&](int err) {
    std::string message = "cannot read ";
    message.append(what).append(" '").append(path).append("': ").append(std::strerror(err));
    if (err == ENOENT || err == ENOTDIR) return NotFoundError(std::move(message));
    if (err == EACCES || err == EPERM) return PermissionDeniedError(std::move(message));
    return InvalidArgumentError(std::move(message));
  };
  // Checked before the open: opening a device may act (/dev/watchdog arms the watchdog).
  struct stat named {};
  if (::stat(path.c_str(), &named) != 0) return cannot_read(errno);
  if (IsDevNull(named)) return std::string();
  if (!S_ISREG(named.st_mode) && !S_ISFIFO(named.st_mode)) {
    return NotRegular(what, path, named.st_mode);
  }
  // O_NONBLOCK: the open of a FIFO without a writer returns at once; its reads are then bounded
  // by poll.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return cannot_read(errno);
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
  // What was opened is what was checked, not a device swapped in meanwhile.
  if (st.st_dev != named.st_dev || st.st_ino != named.st_ino) {
    std::string message(what);
    message.append(" '").append(path).append("' was replaced while being opened");
    return InvalidArgumentError(std::move(message));
  }
  const bool fifo = S_ISFIFO(st.st_mode);
  if (!S_ISREG(st.st_mode) && !fifo) return NotRegular(what, path, st.st_mode);
  if (!fifo && static_cast<unsigned long long>(st.st_size) > max_bytes) {
    return TooLarge(what, path, max_bytes);
  }
  // A regular file's reads do not block; the bound holds even if the file grows meanwhile. A
  // FIFO's wait for its writer is bounded: poll reports neither data nor hang-up while no writer
  // has come, and a writer that never closes is waited on until the deadline only.
  const auto deadline = std::chrono::steady_clock::now() + fifo_wait;
  std::string text;
  char buf[16384];
  while (text.size() <= max_bytes) {
    if (fifo) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      struct pollfd pfd {
        fd, POLLIN, 0
      };
      const int ready = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        std::string message = text.empty() ? "nothing written to " : "no end written to ";
        message.append(what).append(" '").append(path).append("' within ");
        return InvalidArgumentError(message + Duration(fifo_wait));
      }
    }
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
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
