#include "cache/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace objfs {

Status ErrnoStatus(std::string_view what, const std::string& path, int err) {
  std::string m(what);
  m += " ";
  m += path;
  m += ": ";
  m += std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return NoSpaceError(std::move(m));
  // Past the process's file size limit (ulimit -f): its writer gets EFBIG, as on a local disk.
  if (err == EFBIG) return Status(StatusCode::kFileTooLarge, std::move(m));
  // objfs out of descriptors (its RLIMIT_NOFILE): the caller gets ENFILE, not an EIO that
  // reads as a failing disk.
  if (err == EMFILE || err == ENFILE) return Status(StatusCode::kOutOfDescriptors, std::move(m));
  return IoError(std::move(m));
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("create", tmp, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus("write", tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename", tmp, err);
  }
  return Status::Ok();
}

}  // namespace objfs
