// A small SFTP v3 client on an SSH channel of its own, for what libssh 0.10's sftp API lacks.
//
// libssh 0.10 cannot send arbitrary SSH_FXP_EXTENDED requests and has no pipelined writes, so the
// OpenSSH extensions objfs relies on (posix-rename@openssh.com to replace a file atomically,
// copy-data to copy on the server, limits@openssh.com for the server's packet sizes,
// fsync@openssh.com) and streaming uploads go through this client. It speaks just the requests
// it needs; everything else stays on libssh's sftp_session of the same connection.
#pragma once

#include <libssh/libssh.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/status.h"

namespace objfs::sftp {

// SSH_FXF_* open flags of SFTP v3.
inline constexpr uint32_t kOpenRead = 0x01;
inline constexpr uint32_t kOpenWrite = 0x02;
inline constexpr uint32_t kOpenCreate = 0x08;
inline constexpr uint32_t kOpenTruncate = 0x10;
inline constexpr uint32_t kOpenExclusive = 0x20;

// The server's limits (limits@openssh.com), or conservative defaults when it does not say.
struct SftpLimits {
  uint64_t max_packet = 34000;
  uint64_t max_read = 32768;
  uint64_t max_write = 32768;
};

// Turns an SSH_FX_* status code and the server's message into a Status; `what` names the
// operation and path for the message.
Status StatusFromSftpCode(uint32_t code, std::string_view server_message, std::string_view what);

class SftpWire {
 public:
  // Opens a channel on `session` (connected and authenticated, not owned), starts the "sftp"
  // subsystem and negotiates version 3. The session must outlive the client.
  static Result<std::unique_ptr<SftpWire>> Open(ssh_session session);
  ~SftpWire();
  SftpWire(const SftpWire&) = delete;
  SftpWire& operator=(const SftpWire&) = delete;

  // Whether the server's VERSION reply listed extension `name` with version `data`.
  bool HasExtension(std::string_view name, std::string_view data) const;
  const SftpLimits& limits() const { return limits_; }

  // An open remote file handle; opaque bytes.
  using Handle = std::string;

  // SFTP v3 ATTRS as a server reports them; `flags` (SSH_FILEXFER_ATTR_*) says which are set.
  struct FileAttrs {
    uint32_t flags = 0;
    uint64_t size = 0;
    uint32_t uid = 0;
    uint32_t gid = 0;
    uint32_t permissions = 0;
    int64_t atime_s = 0;
    int64_t mtime_s = 0;
  };
  // Attributes to set: the mtime, the atime (when not given: the mtime) and, if given, the
  // permissions and the owner (uid, gid).
  struct NewAttrs {
    uint32_t mtime_s = 0;
    std::optional<uint32_t> atime_s;
    std::optional<uint32_t> permissions;
    std::optional<std::pair<uint32_t, uint32_t>> owner;
  };

  Result<Handle> OpenFile(std::string_view path, uint32_t flags, uint32_t permissions);
  Status Close(const Handle& handle);
  Result<FileAttrs> Fstat(const Handle& handle);
  // FSTAT of `handle` and LSTAT of `path` (which does not follow a link) in one round trip,
  // which the server answers one right after the other: what the handle opened by `path` is,
  // and what the name itself is now.
  struct OpenedAndNamed {
    FileAttrs opened;
    FileAttrs named;
  };
  Result<OpenedAndNamed> FstatAndLStat(const Handle& handle, std::string_view path);
  // Reads up to buf.size() bytes at `offset` with up to `in_flight` READ requests of at most
  // `chunk` bytes outstanding. Each reply's data is read from the channel straight into `buf`,
  // with no copy in between. Returns the bytes read, fewer only at the end of the file;
  // `requests` (may be null) counts the READ requests sent.
  Result<size_t> Read(const Handle& handle, uint64_t offset, std::span<std::byte> buf,
                      uint32_t chunk, int in_flight, std::atomic<uint64_t>* requests);
  // Writes `data` at `offset` with up to `in_flight` WRITE requests outstanding, each at most
  // limits().max_write bytes, and no more of them than hold 1 MiB (at least one). `sent`, if
  // set, is given each request's bytes, in order, once the request is on its way: work done
  // there overlaps the server's.
  Status WriteAll(const Handle& handle, uint64_t offset, std::span<const std::byte> data,
                  int in_flight,
                  const std::function<void(std::span<const std::byte>)>& sent = nullptr);
  // Finishes a file written through `handle` in one round trip: FSETSTAT `attrs`, fsync@openssh
  // (when `sync`), FSTAT and CLOSE, all in flight at once. The server runs them in order, so the
  // FSTAT shows what it made of the attributes. Returns that, or the first failure; the handle
  // is closed either way. `attributes_refused`: only the FSETSTAT failed (some servers refuse it
  // and take a SETSTAT of the path instead); the file is complete and closed. With `lstat_path`,
  // an LSTAT of it goes last in the same round trip, its answer in `*named`.
  Result<FileAttrs> Finish(const Handle& handle, const NewAttrs& attrs, bool sync,
                           bool* attributes_refused, std::string_view lstat_path = {},
                           Result<FileAttrs>* named = nullptr);
  // FSETSTAT `attrs` on the file open as `handle` and FSTAT it, in one round trip.
  Result<FileAttrs> SetAttrs(const Handle& handle, const NewAttrs& attrs);
  // SETSTAT `attrs` on `path` and STAT it, in one round trip (both follow links).
  Result<FileAttrs> SetStat(std::string_view path, const NewAttrs& attrs);
  // LSTAT of `path`: what the name itself is, a link included.
  Result<FileAttrs> LStat(std::string_view path);
  // lsetstat@openssh.com `attrs` on the link `path` itself and LSTAT it, in one round trip.
  Result<FileAttrs> LSetStat(std::string_view path, const NewAttrs& attrs);
  // FSETSTAT of the size alone: cuts (or extends) the file open as `handle` to `size` bytes.
  Status Truncate(const Handle& handle, uint64_t size);
  // posix-rename@openssh.com: replaces `to` atomically.
  Status PosixRename(std::string_view from, std::string_view to);
  // copy-data: copies `length` bytes (0: to the end) of `from` at `from_offset` into `to` at
  // `to_offset`, on the server.
  Status CopyData(const Handle& from, uint64_t from_offset, uint64_t length, const Handle& to,
                  uint64_t to_offset);

  // False once a transport error was seen; the connection should then be dropped.
  bool healthy() const { return healthy_; }

  // How long a reply may keep the caller waiting before the channel is given up as broken: a
  // backstop behind the session pool's watchdog, which cuts a silent connection sooner
  // (request_timeout) or, for a server's own work, later (SilenceAllowance). The pool sets it
  // above both, so that it never cuts first.
  static constexpr std::chrono::milliseconds kDefaultReplyTimeout{120000};
  void set_reply_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds reply_timeout() const {
    return std::chrono::milliseconds(reply_timeout_ms_);
  }

 private:
  explicit SftpWire(ssh_channel channel) : channel_(channel) {}

  struct Reply {
    uint8_t type = 0;
    uint32_t id = 0;
    std::string body;  // after the id
  };

  Status Send(uint8_t type, uint32_t id, std::string_view body);
  // A packet's length, type and id, with room reserved for a body of `body_size` bytes that
  // the caller appends; SendPacket sends it whole.
  static std::string StartPacket(uint8_t type, uint32_t id, size_t body_size);
  Status SendPacket(std::string_view packet);
  Result<Reply> Receive();
  struct ReadResult {
    size_t bytes = 0;         // read from the start without a gap
    bool short_read = false;  // a reply (or end of file) ended the run before the buffer was full
    bool eof = false;         // the server said end of file where the run ends
  };
  // One pipelined run of READ requests (see Read), without reading on after a short reply.
  Result<ReadResult> ReadPipelined(const Handle& handle, uint64_t offset, std::span<std::byte> buf,
                                   uint32_t chunk, int in_flight, std::atomic<uint64_t>* requests);
  // Reads the length, type and id of the next reply.
  Status ReceiveHeader(uint32_t* length, uint8_t* type, uint32_t* id);
  // Sends one request and waits for its reply (no other requests may be outstanding).
  Result<Reply> Call(uint8_t type, std::string_view body);
  // Sends the requests, all before reading any reply, and returns their replies in order.
  Result<std::vector<Reply>> CallPipelined(
      std::span<const std::pair<uint8_t, std::string>> requests);
  // Expects an SSH_FXP_HANDLE reply (a STATUS one is the open's failure) and parses it.
  Result<Handle> HandleOf(const Reply& reply, std::string_view path);
  // Expects an SSH_FXP_STATUS reply and converts it.
  Status StatusOf(const Reply& reply, std::string_view what);
  // Expects an SSH_FXP_ATTRS reply (a STATUS one is its failure) and parses it.
  Result<FileAttrs> AttrsOf(const Reply& reply, std::string_view what);
  Status ReadExact(void* dst, size_t n);
  Status Broken(std::string message);

  ssh_channel channel_;
  uint32_t next_id_ = 1;
  bool healthy_ = true;
  int reply_timeout_ms_ = static_cast<int>(kDefaultReplyTimeout.count());
  std::map<std::string, std::string, std::less<>> extensions_;
  SftpLimits limits_;
};

}  // namespace objfs::sftp
