#include "backend/sftp/sftp_wire.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <utility>

namespace objfs::sftp {
namespace {

constexpr uint8_t kFxpInit = 1;
constexpr uint8_t kFxpVersion = 2;
constexpr uint8_t kFxpOpen = 3;
constexpr uint8_t kFxpClose = 4;
constexpr uint8_t kFxpRead = 5;
constexpr uint8_t kFxpWrite = 6;
constexpr uint8_t kFxpFstat = 8;
constexpr uint8_t kFxpLstat = 7;
constexpr uint8_t kFxpSetstat = 9;
constexpr uint8_t kFxpFsetstat = 10;
constexpr uint8_t kFxpStat = 17;
constexpr uint8_t kFxpStatus = 101;
constexpr uint8_t kFxpHandle = 102;
constexpr uint8_t kFxpData = 103;
constexpr uint8_t kFxpAttrs = 105;
constexpr uint8_t kFxpExtended = 200;
constexpr uint8_t kFxpExtendedReply = 201;

constexpr uint32_t kAttrSize = 0x1;
constexpr uint32_t kAttrUidGid = 0x2;
constexpr uint32_t kAttrPermissions = 0x4;
constexpr uint32_t kAttrAcModTime = 0x8;
constexpr uint32_t kFxEof = 1;
constexpr uint32_t kMaxReply = 1 << 20;
// The WRITE data a channel keeps outstanding. OpenSSH's sshd holds what the sftp subsystem has
// not taken yet in a buffer that it keeps copying and reallocating as it fills, at a cost that
// grows with what it holds: on a fast link, where the bytes in flight wait in that buffer rather
// than on the wire, its CPU per byte written more than doubles from ~1 MiB outstanding on (the
// window OpenSSH grants a channel, 2 MiB, bounds it). 1 MiB still fills a link of 1 MiB per
// round trip per connection, and a streamed upload sends its parts on several.
constexpr size_t kWriteBytesInFlight = 1 << 20;

void PutU32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
}
void PutU64(std::string& out, uint64_t v) {
  PutU32(out, static_cast<uint32_t>(v >> 32));
  PutU32(out, static_cast<uint32_t>(v));
}
void PutString(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// Reads big-endian fields from a reply body; any overrun makes ok() false.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint32_t U32() {
    if (data_.size() < 4) return Fail();
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(data_[i]);
    data_.remove_prefix(4);
    return v;
  }
  uint64_t U64() {
    uint64_t hi = U32();
    return (hi << 32) | U32();
  }
  std::string_view String() {
    uint32_t n = U32();
    if (!ok_ || data_.size() < n) {
      Fail();
      return {};
    }
    std::string_view s = data_.substr(0, n);
    data_.remove_prefix(n);
    return s;
  }
  bool ok() const { return ok_; }
  bool empty() const { return data_.empty(); }

 private:
  uint32_t Fail() {
    ok_ = false;
    data_ = {};
    return 0;
  }
  std::string_view data_;
  bool ok_ = true;
};

const char* SftpCodeName(uint32_t code) {
  static constexpr const char* kNames[] = {"SSH_FX_OK",
                                           "SSH_FX_EOF",
                                           "SSH_FX_NO_SUCH_FILE",
                                           "SSH_FX_PERMISSION_DENIED",
                                           "SSH_FX_FAILURE",
                                           "SSH_FX_BAD_MESSAGE",
                                           "SSH_FX_NO_CONNECTION",
                                           "SSH_FX_CONNECTION_LOST",
                                           "SSH_FX_OP_UNSUPPORTED"};
  return code < std::size(kNames) ? kNames[code] : "SSH_FX_UNKNOWN";
}

}  // namespace

Status StatusFromSftpCode(uint32_t code, std::string_view server_message, std::string_view what) {
  std::string message(what);
  message += ": ";
  message += server_message.empty() ? SftpCodeName(code) : server_message;
  StatusCode status_code;
  switch (code) {
    case 0:
      return Status::Ok();
    case 2:  // SSH_FX_NO_SUCH_FILE
      status_code = StatusCode::kNotFound;
      break;
    case 3:  // SSH_FX_PERMISSION_DENIED
      status_code = StatusCode::kPermissionDenied;
      break;
    case 6:  // SSH_FX_NO_CONNECTION
    case 7:  // SSH_FX_CONNECTION_LOST
      status_code = StatusCode::kTransient;
      break;
    case 8:  // SSH_FX_OP_UNSUPPORTED
      status_code = StatusCode::kUnsupported;
      break;
    default:
      status_code = StatusCode::kIoError;
      break;
  }
  return Status(status_code, std::move(message), SftpCodeName(code));
}

Result<std::unique_ptr<SftpWire>> SftpWire::Open(ssh_session session) {
  ssh_channel channel = ssh_channel_new(session);
  if (channel == nullptr) return TransientError("cannot create an SSH channel");
  if (ssh_channel_open_session(channel) != SSH_OK ||
      ssh_channel_request_subsystem(channel, "sftp") != SSH_OK) {
    std::string error = ssh_get_error(session);
    ssh_channel_free(channel);
    return TransientError("cannot start the sftp subsystem: " + error);
  }
  std::unique_ptr<SftpWire> wire(new SftpWire(channel));
  std::string init;
  PutU32(init, 3);
  std::string packet;
  PutU32(packet, static_cast<uint32_t>(init.size() + 1));
  packet.push_back(static_cast<char>(kFxpInit));
  packet += init;
  if (ssh_channel_write(channel, packet.data(), static_cast<uint32_t>(packet.size())) !=
      static_cast<int>(packet.size())) {
    return TransientError("sending SFTP INIT failed: " + std::string(ssh_get_error(session)));
  }
  OBJFS_ASSIGN_OR_RETURN(Reply version, wire->Receive());
  if (version.type != kFxpVersion) return InternalError("SFTP server did not answer VERSION");
  // Receive() took the first 4 bytes of the body as an id: it is the version number.
  Reader reader(version.body);
  while (!reader.empty() && reader.ok()) {
    std::string name(reader.String());
    std::string data(reader.String());
    if (reader.ok()) wire->extensions_[name] = data;
  }
  if (wire->HasExtension("limits@openssh.com", "1")) {
    OBJFS_ASSIGN_OR_RETURN(Reply reply, wire->Call(kFxpExtended, [] {
      std::string body;
      PutString(body, "limits@openssh.com");
      return body;
    }()));
    if (reply.type == kFxpExtendedReply) {
      Reader limits(reply.body);
      uint64_t packet_len = limits.U64();
      uint64_t read_len = limits.U64();
      uint64_t write_len = limits.U64();
      if (limits.ok()) {
        if (packet_len > 0) wire->limits_.max_packet = packet_len;
        if (read_len > 0) wire->limits_.max_read = read_len;
        if (write_len > 0) wire->limits_.max_write = write_len;
      }
    }
  }
  return wire;
}

SftpWire::~SftpWire() {
  ssh_channel_close(channel_);
  ssh_channel_free(channel_);
}

bool SftpWire::HasExtension(std::string_view name, std::string_view data) const {
  auto it = extensions_.find(name);
  return it != extensions_.end() && it->second == data;
}

Status SftpWire::Broken(std::string message) {
  healthy_ = false;
  return TransientError(std::move(message));
}

Status SftpWire::Send(uint8_t type, uint32_t id, std::string_view body) {
  std::string packet = StartPacket(type, id, body.size());
  packet.append(body);
  return SendPacket(packet);
}

std::string SftpWire::StartPacket(uint8_t type, uint32_t id, size_t body_size) {
  std::string packet;
  packet.reserve(9 + body_size);
  PutU32(packet, static_cast<uint32_t>(body_size + 5));
  packet.push_back(static_cast<char>(type));
  PutU32(packet, id);
  return packet;
}

Status SftpWire::SendPacket(std::string_view packet) {
  if (!healthy_) return TransientError("SFTP channel is broken");
  size_t done = 0;
  while (done < packet.size()) {
    int n = ssh_channel_write(channel_, packet.data() + done,
                              static_cast<uint32_t>(packet.size() - done));
    if (n <= 0) return Broken("writing to the SFTP channel failed");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

void SftpWire::set_reply_timeout(std::chrono::milliseconds timeout) {
  // libssh takes an int of milliseconds.
  reply_timeout_ms_ =
      static_cast<int>(std::clamp<int64_t>(timeout.count(), 1, std::numeric_limits<int>::max()));
}

Status SftpWire::ReadExact(void* dst, size_t n) {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    int got = ssh_channel_read_timeout(channel_, out + done, static_cast<uint32_t>(n - done), 0,
                                       reply_timeout_ms_);
    if (got == 0 && ssh_channel_is_eof(channel_) == 0) {
      return Broken("no SFTP reply within " + std::to_string(reply_timeout_ms_ / 1000) + " s");
    }
    if (got <= 0) return Broken("the SFTP channel closed or failed while reading");
    done += static_cast<size_t>(got);
  }
  return Status::Ok();
}

Status SftpWire::ReceiveHeader(uint32_t* length, uint8_t* type, uint32_t* id) {
  if (!healthy_) return TransientError("SFTP channel is broken");
  unsigned char header[9];
  OBJFS_RETURN_IF_ERROR(ReadExact(header, 4));
  *length = (uint32_t{header[0]} << 24) | (uint32_t{header[1]} << 16) | (uint32_t{header[2]} << 8) |
            header[3];
  if (*length < 5 || *length > kMaxReply) return Broken("malformed SFTP reply length");
  OBJFS_RETURN_IF_ERROR(ReadExact(header + 4, 5));
  *type = header[4];
  *id = (uint32_t{header[5]} << 24) | (uint32_t{header[6]} << 16) | (uint32_t{header[7]} << 8) |
        header[8];
  return Status::Ok();
}

Result<SftpWire::Reply> SftpWire::Receive() {
  uint32_t length = 0;
  Reply reply;
  OBJFS_RETURN_IF_ERROR(ReceiveHeader(&length, &reply.type, &reply.id));
  reply.body.resize(length - 5);
  OBJFS_RETURN_IF_ERROR(ReadExact(reply.body.data(), reply.body.size()));
  return reply;
}

Result<SftpWire::Reply> SftpWire::Call(uint8_t type, std::string_view body) {
  uint32_t id = next_id_++;
  OBJFS_RETURN_IF_ERROR(Send(type, id, body));
  OBJFS_ASSIGN_OR_RETURN(Reply reply, Receive());
  if (reply.id != id) return Broken("SFTP reply for an unexpected request");
  return reply;
}

Status SftpWire::StatusOf(const Reply& reply, std::string_view what) {
  if (reply.type != kFxpStatus) {
    return InternalError(std::string(what) + ": unexpected SFTP reply type " +
                         std::to_string(reply.type));
  }
  Reader reader(reply.body);
  uint32_t code = reader.U32();
  std::string_view message = reader.String();
  if (!reader.ok()) return InternalError(std::string(what) + ": malformed SFTP status");
  return StatusFromSftpCode(code, message, what);
}

namespace {

// A request body that starts with string `s` (a handle, a path, an extension's name).
std::string StringBody(std::string_view s) {
  std::string body;
  PutString(body, s);
  return body;
}

std::string OpenBody(std::string_view path, uint32_t flags, uint32_t permissions) {
  std::string body;
  PutString(body, path);
  PutU32(body, flags);
  PutU32(body, kAttrPermissions);
  PutU32(body, permissions);
  return body;
}

}  // namespace

Result<SftpWire::Handle> SftpWire::HandleOf(const Reply& reply, std::string_view path) {
  if (reply.type == kFxpHandle) {
    Reader reader(reply.body);
    std::string handle(reader.String());
    if (!reader.ok()) return InternalError("malformed SFTP handle");
    return handle;
  }
  Status status = StatusOf(reply, "open " + std::string(path));
  if (status.ok()) return InternalError("SFTP open returned no handle");
  return status;
}

Result<SftpWire::Handle> SftpWire::OpenFile(std::string_view path, uint32_t flags,
                                            uint32_t permissions) {
  OBJFS_ASSIGN_OR_RETURN(Reply reply, Call(kFxpOpen, OpenBody(path, flags, permissions)));
  return HandleOf(reply, path);
}

Result<SftpWire::OpenedAndNamed> SftpWire::FstatAndLStat(const Handle& handle,
                                                         std::string_view path) {
  std::vector<std::pair<uint8_t, std::string>> requests;
  requests.emplace_back(kFxpFstat, StringBody(handle));
  requests.emplace_back(kFxpLstat, StringBody(path));
  OBJFS_ASSIGN_OR_RETURN(std::vector<Reply> replies, CallPipelined(requests));
  OBJFS_ASSIGN_OR_RETURN(FileAttrs opened, AttrsOf(replies[0], "fstat"));
  OBJFS_ASSIGN_OR_RETURN(FileAttrs named, AttrsOf(replies[1], "stat " + std::string(path)));
  return OpenedAndNamed{opened, named};
}

Status SftpWire::Close(const Handle& handle) {
  std::string body;
  PutString(body, handle);
  OBJFS_ASSIGN_OR_RETURN(Reply reply, Call(kFxpClose, body));
  return StatusOf(reply, "close");
}

namespace {

void PutNewAttrs(std::string& out, const SftpWire::NewAttrs& attrs) {
  PutU32(out, kAttrAcModTime | (attrs.permissions ? kAttrPermissions : 0) |
                  (attrs.owner ? kAttrUidGid : 0));
  if (attrs.owner) {
    PutU32(out, attrs.owner->first);
    PutU32(out, attrs.owner->second);
  }
  if (attrs.permissions) PutU32(out, *attrs.permissions);
  PutU32(out, attrs.atime_s.value_or(attrs.mtime_s));
  PutU32(out, attrs.mtime_s);
}

}  // namespace

Result<SftpWire::FileAttrs> SftpWire::AttrsOf(const Reply& reply, std::string_view what) {
  if (reply.type != kFxpAttrs) {
    Status status = StatusOf(reply, what);
    if (status.ok()) return InternalError(std::string(what) + ": no attributes in the reply");
    return status;
  }
  Reader reader(reply.body);
  FileAttrs attrs;
  attrs.flags = reader.U32();
  if (attrs.flags & kAttrSize) attrs.size = reader.U64();
  if (attrs.flags & kAttrUidGid) {
    attrs.uid = reader.U32();
    attrs.gid = reader.U32();
  }
  if (attrs.flags & kAttrPermissions) attrs.permissions = reader.U32();
  if (attrs.flags & kAttrAcModTime) {
    attrs.atime_s = reader.U32();
    attrs.mtime_s = reader.U32();
  }
  if (!reader.ok()) return InternalError(std::string(what) + ": malformed SFTP attributes");
  return attrs;
}

Result<SftpWire::FileAttrs> SftpWire::Fstat(const Handle& handle) {
  OBJFS_ASSIGN_OR_RETURN(Reply reply, Call(kFxpFstat, StringBody(handle)));
  return AttrsOf(reply, "fstat");
}

Result<std::vector<SftpWire::Reply>> SftpWire::CallPipelined(
    std::span<const std::pair<uint8_t, std::string>> requests) {
  const uint32_t first = next_id_;
  for (const auto& [type, body] : requests) OBJFS_RETURN_IF_ERROR(Send(type, next_id_++, body));
  std::vector<Reply> replies;
  replies.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    OBJFS_ASSIGN_OR_RETURN(Reply reply, Receive());
    if (reply.id != static_cast<uint32_t>(first + i)) return Broken("SFTP replies out of order");
    replies.push_back(std::move(reply));
  }
  return replies;
}

Result<SftpWire::FileAttrs> SftpWire::Finish(const Handle& handle, const NewAttrs& attrs, bool sync,
                                             bool* attributes_refused, std::string_view lstat_path,
                                             Result<FileAttrs>* named) {
  *attributes_refused = false;
  const bool lstat = named != nullptr && !lstat_path.empty();
  std::vector<std::pair<uint8_t, std::string>> requests;
  requests.emplace_back(kFxpFsetstat, StringBody(handle));
  PutNewAttrs(requests.back().second, attrs);
  if (sync) {
    requests.emplace_back(kFxpExtended, StringBody("fsync@openssh.com"));
    PutString(requests.back().second, handle);
  }
  requests.emplace_back(kFxpFstat, StringBody(handle));
  requests.emplace_back(kFxpClose, StringBody(handle));
  if (lstat) requests.emplace_back(kFxpLstat, StringBody(lstat_path));
  OBJFS_ASSIGN_OR_RETURN(std::vector<Reply> replies, CallPipelined(requests));
  size_t i = 0;
  Status set = StatusOf(replies[i++], "set attributes");
  Status synced = sync ? StatusOf(replies[i++], "fsync") : Status::Ok();
  Result<FileAttrs> got = AttrsOf(replies[i++], "fstat");
  Status closed = StatusOf(replies[i++], "close");
  if (lstat) *named = AttrsOf(replies[i++], "stat " + std::string(lstat_path));
  // Only FSETSTAT failed (a server that refuses it): the file is complete and closed.
  *attributes_refused = !set.ok() && synced.ok() && got.ok() && closed.ok();
  if (!set.ok()) return set;
  if (!synced.ok()) return synced;
  if (!got.ok()) return got.status();
  if (!closed.ok()) return closed;
  return got;
}

Result<SftpWire::FileAttrs> SftpWire::SetAttrs(const Handle& handle, const NewAttrs& attrs) {
  std::vector<std::pair<uint8_t, std::string>> requests;
  requests.emplace_back(kFxpFsetstat, StringBody(handle));
  PutNewAttrs(requests.back().second, attrs);
  requests.emplace_back(kFxpFstat, StringBody(handle));
  OBJFS_ASSIGN_OR_RETURN(std::vector<Reply> replies, CallPipelined(requests));
  OBJFS_RETURN_IF_ERROR(StatusOf(replies[0], "set attributes"));
  return AttrsOf(replies[1], "fstat");
}

Result<SftpWire::FileAttrs> SftpWire::SetStat(std::string_view path, const NewAttrs& attrs) {
  std::vector<std::pair<uint8_t, std::string>> requests;
  requests.emplace_back(kFxpSetstat, StringBody(path));
  PutNewAttrs(requests.back().second, attrs);
  requests.emplace_back(kFxpStat, StringBody(path));
  OBJFS_ASSIGN_OR_RETURN(std::vector<Reply> replies, CallPipelined(requests));
  OBJFS_RETURN_IF_ERROR(StatusOf(replies[0], "set attributes of " + std::string(path)));
  return AttrsOf(replies[1], "stat " + std::string(path));
}

Result<SftpWire::FileAttrs> SftpWire::LStat(std::string_view path) {
  OBJFS_ASSIGN_OR_RETURN(Reply reply, Call(kFxpLstat, StringBody(path)));
  return AttrsOf(reply, "stat " + std::string(path));
}

Result<SftpWire::FileAttrs> SftpWire::LSetStat(std::string_view path, const NewAttrs& attrs) {
  std::vector<std::pair<uint8_t, std::string>> requests;
  requests.emplace_back(kFxpExtended, StringBody("lsetstat@openssh.com"));
  PutString(requests.back().second, path);
  PutNewAttrs(requests.back().second, attrs);
  requests.emplace_back(kFxpLstat, StringBody(path));
  OBJFS_ASSIGN_OR_RETURN(std::vector<Reply> replies, CallPipelined(requests));
  OBJFS_RETURN_IF_ERROR(
      StatusOf(replies[0], "set attributes of " + std::string(path) + " (not through a link)"));
  return AttrsOf(replies[1], "stat " + std::string(path));
}

Result<size_t> SftpWire::Read(const Handle& handle, uint64_t offset, std::span<std::byte> buf,
                              uint32_t chunk, int in_flight, std::atomic<uint64_t>* requests) {
  OBJFS_ASSIGN_OR_RETURN(ReadResult first,
                         ReadPipelined(handle, offset, buf, chunk, in_flight, requests));
  size_t done = first.bytes;
  bool at_end = first.eof;
  // A short reply before the end of the file: read on from there, one request at a time, until
  // the buffer is full or the server says end of file (or sends nothing).
  while (first.short_read && !at_end && done > 0 && done < buf.size()) {
    OBJFS_ASSIGN_OR_RETURN(
        ReadResult more,
        ReadPipelined(handle, offset + done,
                      buf.subspan(done, std::min<size_t>(chunk, buf.size() - done)), chunk, 1,
                      requests));
    if (more.bytes == 0) break;
    done += more.bytes;
    at_end = more.eof;
  }
  return done;
}

Result<SftpWire::ReadResult> SftpWire::ReadPipelined(const Handle& handle, uint64_t offset,
                                                     std::span<std::byte> buf, uint32_t chunk,
                                                     int in_flight,
                                                     std::atomic<uint64_t>* requests) {
  // A reply carries the data plus 13 bytes of header, and must fit kMaxReply.
  chunk = std::clamp<uint32_t>(chunk, 1, kMaxReply - 13);
  struct Pending {
    uint32_t id;
    size_t at;
    uint32_t len;
  };
  std::deque<Pending> pending;
  size_t issued = 0;
  size_t contiguous = 0;  // bytes from `offset` read without a gap
  bool short_read = false;
  bool eof = false;
  Status error;
  while (true) {
    while (error.ok() && !short_read && issued < buf.size() &&
           pending.size() < static_cast<size_t>(std::max(1, in_flight))) {
      const uint32_t len = static_cast<uint32_t>(std::min<size_t>(chunk, buf.size() - issued));
      std::string body;
      PutString(body, handle);
      PutU64(body, offset + issued);
      PutU32(body, len);
      const uint32_t id = next_id_++;
      OBJFS_RETURN_IF_ERROR(Send(kFxpRead, id, body));
      if (requests != nullptr) requests->fetch_add(1, std::memory_order_relaxed);
      pending.push_back({id, issued, len});
      issued += len;
    }
    if (pending.empty()) break;
    const Pending p = pending.front();
    pending.pop_front();
    uint32_t length = 0;
    uint8_t type = 0;
    uint32_t id = 0;
    OBJFS_RETURN_IF_ERROR(ReceiveHeader(&length, &type, &id));
    if (id != p.id) return Broken("SFTP read replies out of order");
    size_t got = 0;
    if (type == kFxpData) {
      unsigned char n_bytes[4];
      OBJFS_RETURN_IF_ERROR(ReadExact(n_bytes, 4));
      const uint32_t n = (uint32_t{n_bytes[0]} << 24) | (uint32_t{n_bytes[1]} << 16) |
                         (uint32_t{n_bytes[2]} << 8) | n_bytes[3];
      if (n > p.len || length != n + 9) return Broken("malformed SFTP data reply");
      OBJFS_RETURN_IF_ERROR(ReadExact(buf.data() + p.at, n));
      got = n;
    } else if (type == kFxpStatus) {
      Reply reply;
      reply.type = type;
      reply.id = id;
      reply.body.resize(length - 5);
      OBJFS_RETURN_IF_ERROR(ReadExact(reply.body.data(), reply.body.size()));
      Reader reader(reply.body);
      const uint32_t code = reader.U32();
      if (!reader.ok()) return Broken("malformed SFTP status");
      if (code == 0) {
        // OK is no answer to READ: the bytes of this request would be missing.
        if (error.ok()) error = IoError("SFTP server answered READ with OK and no data");
        continue;
      }
      if (code != kFxEof) {
        // The remaining replies still arrive and are read, keeping the channel in step.
        if (error.ok()) error = StatusOf(reply, "read");
        continue;
      }
      if (error.ok() && !short_read) eof = true;
    } else {
      return Broken("unexpected SFTP reply type " + std::to_string(type) + " to READ");
    }
    if (error.ok() && !short_read) {
      contiguous += got;
      if (got < p.len) short_read = true;
    }
  }
  if (!error.ok()) return error;
  return ReadResult{contiguous, short_read, eof};
}

Status SftpWire::WriteAll(const Handle& handle, uint64_t offset, std::span<const std::byte> data,
                          int in_flight,
                          const std::function<void(std::span<const std::byte>)>& sent_hook) {
  const size_t chunk = std::max<uint64_t>(1, limits_.max_write);
  // At most kWriteBytesInFlight of data outstanding, whatever the request count allows.
  in_flight = static_cast<int>(std::clamp<size_t>(kWriteBytesInFlight / chunk, 1,
                                                  static_cast<size_t>(std::max(1, in_flight))));
  std::deque<uint32_t> outstanding;
  Status first_error;
  size_t sent = 0;
  auto collect_one = [&]() -> Status {
    OBJFS_ASSIGN_OR_RETURN(Reply reply, Receive());
    if (reply.id != outstanding.front()) return Broken("SFTP write replies out of order");
    outstanding.pop_front();
    Status status = StatusOf(reply, "write");
    if (!status.ok() && first_error.ok()) first_error = status;
    return Status::Ok();
  };
  while (sent < data.size() || !outstanding.empty()) {
    if (sent < data.size() && first_error.ok() &&
        outstanding.size() < static_cast<size_t>(std::max(1, in_flight))) {
      size_t n = std::min(chunk, data.size() - sent);
      uint32_t id = next_id_++;
      // Framed as it is built: the data is copied once, into the packet.
      std::string packet = StartPacket(kFxpWrite, id, 4 + handle.size() + 8 + 4 + n);
      PutString(packet, handle);
      PutU64(packet, offset + sent);
      PutString(packet, std::string_view(reinterpret_cast<const char*>(data.data()) + sent, n));
      OBJFS_RETURN_IF_ERROR(SendPacket(packet));
      outstanding.push_back(id);
      if (sent_hook) sent_hook(data.subspan(sent, n));
      sent += n;
      continue;
    }
    if (outstanding.empty()) break;
    OBJFS_RETURN_IF_ERROR(collect_one());
  }
  return first_error;
}

Status SftpWire::PosixRename(std::string_view from, std::string_view to) {
  std::string body;
  PutString(body, "posix-rename@openssh.com");
  PutString(body, from);
  PutString(body, to);
  OBJFS_ASSIGN_OR_RETURN(Reply reply, Call(kFxpExtended, body));
  return StatusOf(reply, "rename " + std::string(from) + " to " + std::string(to));
}

Status SftpWire::Truncate(const Handle& handle, uint64_t size) {
  std::string body = StringBody(handle);
  PutU32(body, kAttrSize);
  PutU64(body, size);
  OBJFS_ASSIGN_OR_RETURN(Reply reply, Call(kFxpFsetstat, body));
  return StatusOf(reply, "truncate");
}

Status SftpWire::CopyData(const Handle& from, uint64_t from_offset, uint64_t length,
                          const Handle& to, uint64_t to_offset) {
  std::string body;
  PutString(body, "copy-data");
  PutString(body, from);
  PutU64(body, from_offset);
  PutU64(body, length);
  PutString(body, to);
  PutU64(body, to_offset);
  OBJFS_ASSIGN_OR_RETURN(Reply reply, Call(kFxpExtended, body));
  return StatusOf(reply, "copy-data");
}

}  // namespace objfs::sftp
