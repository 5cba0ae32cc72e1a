#include "fs/kernel_readahead.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace objfs {
namespace {

// A mountinfo field with its octal escapes (\040 for a space, \011, \012, \134) undone.
std::string Unescape(std::string_view field) {
  std::string out;
  out.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && field[i + 1] >= '0' && field[i + 1] <= '3' &&
        field[i + 2] >= '0' && field[i + 2] <= '7' && field[i + 3] >= '0' && field[i + 3] <= '7') {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                                      (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

// The `index`th space-separated field of `line` (0-based), or empty.
std::string_view Field(std::string_view line, int index) {
  size_t start = 0;
  for (int i = 0; i < index; ++i) {
    start = line.find(' ', start);
    if (start == std::string_view::npos) return {};
    ++start;
  }
  const size_t end = line.find(' ', start);
  return line.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
}

}  // namespace

std::vector<MountEntry> ParseMountinfo(std::string_view mountinfo) {
  std::vector<MountEntry> entries;
  while (!mountinfo.empty()) {
    const size_t newline = mountinfo.find('\n');
    const std::string_view line = mountinfo.substr(0, newline);
    mountinfo =
        newline == std::string_view::npos ? std::string_view() : mountinfo.substr(newline + 1);
    // "ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE ..."
    const size_t separator = line.find(" - ");
    if (separator == std::string_view::npos) continue;
    entries.push_back(MountEntry{std::string(Field(line, 2)), Unescape(Field(line, 4)),
                                 std::string(Field(line.substr(separator + 3), 0))});
  }
  return entries;
}

std::string ReadMountinfo() {
  std::ifstream in("/proc/self/mountinfo");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string MountedDevice(std::string_view mountinfo, std::string_view mountpoint,
                          std::string_view fstype) {
  std::string device;
  for (const MountEntry& entry : ParseMountinfo(mountinfo)) {
    if (entry.fstype == fstype && entry.mountpoint == mountpoint) device = entry.device;
  }
  return device;
}

Status SetKernelReadahead(const std::string& mountpoint, std::string_view fstype, uint64_t bytes) {
  const std::string device = MountedDevice(ReadMountinfo(), mountpoint, fstype);
  if (device.empty()) {
    return Status(StatusCode::kNotFound, "no " + std::string(fstype) + " mount at '" + mountpoint +
                                             "' in /proc/self/mountinfo");
  }
  const std::string path = "/sys/class/bdi/" + device + "/read_ahead_kb";
  std::ofstream out(path);
  out << bytes / 1024 << '\n';
  out.flush();
  if (!out) {
    return Status(StatusCode::kIoError, "cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace objfs
