// The SFTP client: an ObjectStore over one directory of an SFTP server (OpenSSH's sftp-server or
// internal-sftp), so that objfs can mount a plain remote directory as well as a bucket.
//
// Keys are paths relative to the root directory; '/' in a key is a directory level, and a
// directory marker "x/" is the directory "x" itself (a marker cannot hold data; an empty
// directory is listed as its marker, and directories stay when their files are removed).
// SFTP has no ETags, content types or user metadata, and objfs stores nothing on the server
// besides the files themselves: head() and list() report a file's size, its mtime (whole
// seconds in SFTP v3) and its attributes (mode, uid, gid, mtime) as s3fs-style metadata. The
// ETag they report is the file's version, VersionTag(size, mtime) (backend/object_version.h),
// which is no content ETag; the If-Match of read(), put() and copy() is checked against it
// (read() checks the file handle it reads from). put() returns the MD5 of the bytes it wrote,
// computed while streaming them, and a copy by the server's copy-data extension returns the
// source's ETag when that is a plain MD5 (the bytes are the same). Content MD5s of files are
// kept on this machine by ContentEtagStore (cache/content_etag_store.h), which also translates
// an MD5 If-Match to the version it was recorded for; this store alone never matches an MD5.
// Uploads go to a temporary name and are renamed into place with posix-rename@openssh.com, so
// readers see the old or the new object, never a mix; copies use the server's copy-data
// extension when it has one. Names beginning with ".objfs-" are reserved (temporary names).
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <semaphore>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "backend/log.h"
#include "backend/metrics.h"
#include "backend/mutex.h"
#include "backend/object_store.h"
#include "backend/sftp/session_pool.h"
#include "backend/upload_journal.h"

namespace objfs::sftp {

struct SftpStoreOptions {
  std::string host;
  int port = 22;
  std::string user;
  std::string root;  // absolute directory on the server that keys are relative to
  std::vector<std::string> identity_files;
  std::string known_hosts;         // empty: ~/.ssh/known_hosts
  std::string global_known_hosts;  // see SftpConnectOptions::global_known_hosts
  // See SftpConnectOptions: a proxy command, and the ssh configuration read at mount.
  std::string proxy_command;
  std::shared_ptr<ssh_session_struct> config;
  bool accept_new_host_key = false;
  std::optional<std::string> password;  // see SftpConnectOptions::password
  std::string ciphers;                  // see SftpConnectOptions::ciphers
  int sessions = 4;                     // SSH connections in the pool, i.e. calls served at once
  // READ requests in flight for one read() and WRITE requests for one put().
  int requests_in_flight = 32;
  // Copy with the server's copy-data extension when it has one; false streams every copy
  // through this machine (for servers whose copy-data is broken).
  bool use_copy_data = true;
  // Replace files with the server's posix-rename@openssh.com when it has one; false uses plain
  // SFTP RENAME (as on servers without the extension).
  bool use_posix_rename = true;
  // Ask the server for the MD5 of a file nobody hashed yet (server_md5: `md5sum` over an SSH
  // exec channel); false reads and hashes every such file here.
  bool server_md5 = true;
  // Smaller files are read and hashed here: one read costs less than starting a command (the
  // account's shell reads its start-up files first).
  uint64_t server_md5_min_size = 4 << 20;
  // A streamed upload (a file written past its first part) is not hashed where md5sum on the
  // server may give its MD5 (server_md5, and not found unable to; a name any shell takes as it
  // is; sessions >= 2, so that a connection may hash): its MD5 is left unknown, for the server
  // to compute when it is first asked for. On two cores shared with the server, hashing every
  // byte on its way up cost cp into the mount half of the daemon's CPU; most files' MD5 is
  // never asked for. The first such upload of a mount, once complete, starts the check of md5sum (a
  // probe, in the directory it uploaded to); once it fails, uploads are hashed again. false: hashed
  // on the way up, as whole puts always are.
  bool leave_upload_md5_to_server = false;
  // The command server_md5 runs, the file's quoted path after it (tests name one that is not
  // there, to stand for a server that cannot run md5sum).
  std::string server_md5_command = "md5sum --";
  // Copy a file on the server (a copy within the mount, and the unchanged bytes of an edit)
  // by running `cp` there over an SSH exec channel. Where the server has copy-data, only
  // `cp --reflink=always`, which a file system that can (XFS, Btrfs) answers with a clone that
  // reads and writes no data block, and only for files that copy-data would take longer to
  // copy than the account's shell takes to start; elsewhere `cp --reflink=auto`, which beats
  // streaming the file through this machine. false: never.
  bool server_cp = true;
  // Smaller files are never copied with cp.
  uint64_t server_cp_min_size = 4 << 20;
  // The program server_cp runs, its options and the quoted source and destination after it.
  std::string server_cp_command = "cp";
  // What copy-data is taken to reach, in bytes per second: where the server has it, cp clones
  // only files that copy-data would take longer on than the fastest clone took (0: all).
  uint64_t server_cp_copy_data_rate = 1ull << 30;
  Metrics* metrics = nullptr;  // not owned; may be null
  std::chrono::seconds connect_timeout{10};
  // Notes each upload's temporary file from before it is created until it is renamed into
  // place or removed, so that the next mount can remove the ones a crash left. May be null.
  std::shared_ptr<UploadJournal> journal;
  // See SftpConnectOptions::request_timeout: a call that receives nothing this long is cut.
  std::chrono::milliseconds request_timeout{30000};
  // One call's attempts together; after it the call fails with TimedOut. 0: no limit.
  std::chrono::milliseconds operation_timeout{120000};
  // How long a conditional commit waits for another objfs client's commit of the same name
  // (see SftpStore::TakeCommitLock) before it fails as transient, and how long such a client's
  // lock must stand unchanged, as this mount sees it, to be taken for one a crash left.
  std::chrono::milliseconds commit_lock_wait{5000};
  std::chrono::milliseconds stale_commit_lock{30000};
  // Told (one line) about calls that ran out of time, cut connections and refusals.
  LogFunction log;
  // The owner the mount shows for files the server reports none for, and gives the new files
  // it makes (its uid= and gid=). An upload replaces a file by renaming a new one over it,
  // which the account logged in owns: when the metadata names another owner (the replaced
  // file's, as the server reported it, or one a chown gave the file before its upload), the
  // new file gets it back where the server lets the account chown. Unset: never.
  std::optional<std::pair<uint32_t, uint32_t>> mount_owner;
  // A shared mount (allow_other): a new file, directory or link gets the owner its metadata
  // names, its creator's (capabilities().stores_owner), where the server lets the account
  // chown; elsewhere the account's.
  bool owner_from_caller = false;
};

// What a store's commit locks point to (SftpStore::TakeCommitLock): 128 random bits, so that no
// other client's is the same; then, where /proc tells them, this machine's boot ID, the PID
// namespace of process `pid` and that PID. Another mount on this machine that finds the lock
// can tell from them that the process that took it is gone (CommitLockHolderGone).
std::string CommitLockToken(pid_t pid);
// Whether a commit lock pointing to `token` was left by a process of this machine, this boot and
// this PID namespace that no longer runs (no process has its PID): killed while it stored the
// file, its lock protects nothing, and is taken over at once rather than after
// stale_commit_lock. False for any other token: another machine's, an older objfs's, a live
// process's or one this process cannot see.
bool CommitLockHolderGone(std::string_view token);

class SftpStore : public ObjectStore {
 public:
  // Checks the options; the first connection is made by the first call (or by CheckRoot).
  static Result<std::unique_ptr<SftpStore>> Create(SftpStoreOptions options);
  ~SftpStore() override;  // waits for the check of md5sum, if one runs

  // Connects and checks that the root is a directory: the errors a user should see at mount.
  Status CheckRoot();

  Result<ObjectInfo> head(std::string_view key) override;
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override;
  Result<Listing> list(const ListOptions& options) override;
  Result<ObjectInfo> put(std::string_view key, const ByteSource& source,
                         const PutOptions& options) override;
  Result<ObjectInfo> copy(const ObjectInfo& src, std::string_view dst,
                          const CopyOptions& options) override;
  // SETSTAT of the file (LSETSTAT of a link): atomic on the server, no byte moved.
  Result<ObjectInfo> set_attributes(std::string_view key, const Metadata& metadata,
                                    const SetAttributesOptions& options) override;
  Status remove(std::string_view key) override;
  Status remove_if_match(std::string_view key, const ETag& etag, bool known_current) override;
  Status remove_many(const std::vector<std::string>& keys) override;
  Status rename(std::string_view from, std::string_view to) override;
  // A link on the server (SSH_FXP_SYMLINK); head() and list() report links as links.
  Result<ObjectInfo> symlink(std::string_view key, std::string_view target,
                             const PutOptions& options) override;
  Result<std::string> read_link(std::string_view key) override;
  // statvfs@openssh.com of the root; Unsupported when the server lacks it.
  Result<StoreSpace> space() override;
  // `md5sum` of the file, run on the server over an SSH exec channel, as rclone's SFTP backend
  // does: no byte of the file comes here. Its first answer is checked against the file's
  // bytes, read here. nullopt (the caller reads and hashes) for a small file, for a name with
  // a character a shell might take for something else, while half the connections hash, and
  // for the rest of the mount once md5sum could not run (no shell access, `ForceCommand
  // internal-sftp`, no md5sum, a shell that prints more) or its first answer was wrong.
  Result<OptionalMd5> server_md5(std::string_view key, uint64_t size) override;
  // Whether a streamed upload to `path` may leave its MD5 to the server
  // (leave_upload_md5_to_server), and what the check of md5sum found.
  bool MayLeaveMd5ToServer(std::string_view path) const;
  bool Md5sumTrusted() const { return server_md5_state_.load() == kServerCommandTrusted; }
  bool Md5sumOff() const { return server_md5_state_.load() == kServerCommandOff; }
  // The check StartMd5Probe started has ended (whatever it decided).
  bool Md5ProbeDone() const { return md5_probe_done_.load(); }
  // The commands server_md5 ran on the server.
  uint64_t server_md5_runs() const { return server_md5_runs_.load(); }
  // The cp commands CopyWithCp ran on the server.
  uint64_t server_cp_runs() const { return server_cp_runs_.load(); }
  // A temporary file, as put() makes it, filled by pipelined WRITEs of ranges and by copy-data
  // of ranges of existing files (checked against the base's version on the handle copied
  // from), cut to its final size, fsynced and renamed into place by complete().
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override;
  Capabilities capabilities() const override;
  std::string describe() const override;

  // What this store's commit locks point to now: its random part, then (CommitLockToken) the
  // PID this process has now, which a fork (objfs going to the background) changes.
  std::string lock_token() const;

  // Removes the temporary file `path` of an upload (a name TempName made; anything else is
  // refused); ok also when there is no such file.
  Status RemoveTemporary(const std::string& path);

  // The server's packet limits, as learnt from the first connection.
  SftpLimits server_limits() const {
    MutexLock lock(&server_mu_);
    return limits_;
  }
  // Before and after a fork(2): see SftpSessionPool::StopWatchdog.
  void StopThreads() { pool_.StopWatchdog(); }
  void StartThreads() { pool_.StartWatchdog(); }

  // The cipher the first connection negotiated.
  std::string cipher() const {
    MutexLock lock(&server_mu_);
    return cipher_;
  }

 private:
  explicit SftpStore(SftpStoreOptions options);
  class Session;

  // The paths on the server that hold `key`.
  struct KeyPaths {
    std::string dir;   // the directory holding the data file
    std::string data;  // dir + "/" + name
    std::string name;  // the data file's name
  };
  Result<KeyPaths> PathsOf(std::string_view key) const;

  // Runs `fn` on a borrowed connection; when it fails because the connection broke (sshd died,
  // or the connection was cut for sending nothing), runs it again on a fresh one, within
  // operation_timeout. For operations that are safe to repeat.
  template <typename Fn>
  auto WithRetry(Fn&& fn) -> decltype(fn(std::declval<SftpConnection&>()));

  Result<ObjectInfo> HeadOn(SftpConnection& c, std::string_view key);
  Status MakeDirs(SftpConnection& c, const std::string& dir);
  // put() of a directory marker "x/": the directory x (made with its parents), no file.
  // `before`: for new attributes of an existing directory, the metadata the caller saw (see
  // ApplyAttributes).
  Result<ObjectInfo> PutDirectory(std::string_view key, const KeyPaths& paths, uint64_t size,
                                  const Metadata& metadata, const PutOptions& options,
                                  const Metadata* before = nullptr);
  // Applies mode and mtime from `metadata` to the file at `path`, and its owner when `before`
  // (the metadata the caller saw) names another; a link (by `before`'s mode) gets its own times
  // and owner. Returns what head() will report for `key` once the file is in place (without its
  // ETag).
  Result<ObjectInfo> ApplyAttributes(SftpConnection& c, std::string_view key,
                                     const std::string& path, const Metadata& metadata,
                                     const Metadata* before = nullptr);
  // `attrs` on the existing file `path` (not a directory) by name, never through a link put in
  // its place (lsetstat@openssh.com, which the caller checked the server has); `kind`: its
  // S_IFMT type as the caller saw it (a regular file, a FIFO, ...). Returns what the name is
  // then.
  Result<SftpWire::FileAttrs> SetStatOfTheFile(SftpConnection& c, std::string_view key,
                                               const std::string& path,
                                               const SftpWire::NewAttrs& attrs, uint32_t kind);
  // What remove() of the marker `key` says when the SFTP RMDIR of its directory `dir` failed:
  // ok when the directory is gone or holds other objects (kept, as an object store keeps a
  // prefix), NotEmpty when it holds only objfs's temporary files, else the server's refusal.
  Status DirectoryKept(SftpConnection& c, std::string_view key, const std::string& dir);
  // A new (staged) file's owner (see SftpStoreOptions::mount_owner): set in `attrs` when
  // `metadata` names another owner than the mount's and no chown was refused yet.
  void KeepOwner(const Metadata& metadata, SftpWire::NewAttrs* attrs) const;
  // The server refused the chown of a new file (`why`): said once, and not tried again.
  void OwnerRefused(const std::string& key, const Status& why);
  // Finishes a staged file written through `handle` (put and copy): mode and mtime from
  // `metadata`, fsync when the server offers it, and close, in one round trip; a server that
  // refuses FSETSTAT gets a SETSTAT of the path. Returns what head() will report for `key` once
  // the file is in place (without its ETag), after checking that `size` bytes arrived. The
  // handle is closed either way. With `replacing` (the path the file goes to) and `replaced`
  // (PutOptions), the same round trip LSTATs that path; where it is still that file (size and
  // mtime) and another client changed its permissions since while the put's are still those,
  // the staged file takes theirs (never a set-ID bit that was not there before) before it goes
  // into place.
  Result<ObjectInfo> FinishStaged(SftpConnection& c, const SftpWire::Handle& handle,
                                  std::string_view key, const std::string& path,
                                  const Metadata& metadata, uint64_t size,
                                  const std::string& replacing = {},
                                  const std::optional<ReplacedFile>& replaced = std::nullopt);
  // Renames the staged file into place, after checking the preconditions, holding the key's
  // lock.
  // `staged_version` is the staged file's (the version it has once in place), `content` the
  // MD5 of its bytes where known.
  Status Commit(SftpConnection& c, std::string_view key, const KeyPaths& paths,
                const std::string& staged_data, const ETag& staged_version,
                const std::optional<ETag>& content, const PutOptions& preconditions);
  // Whether the file found by a conditional commit, `found`, is the one a commit of `key`
  // before it renamed into place while the reply was lost. The lock that commit took was found
  // left in place (`ours_left`), so no other objfs client has stored the file since, `found`
  // is the version that commit renamed, and `content` (the MD5 of this commit's bytes) that
  // commit's: a later edit of the mount's may make a file of the same size and second.
  bool RenamedBeforeItsReplyWasLost(std::string_view key, bool ours_left, const ETag& found,
                                    const std::optional<ETag>& content);
  Status Rename(SftpConnection& c, const std::string& from, const std::string& to);
  // The name beside `paths` that serialises conditional commits of it among objfs clients.
  static std::string CommitLockName(const KeyPaths& paths);
  // SFTP has no rename that checks the version it replaces, so a STAT then a rename leaves a
  // round trip in which another client's rename comes between them. objfs clients close it for
  // one another: a conditional commit first makes CommitLockName(paths), a symbolic link to
  // this store's lock_token() (SYMLINK fails where the name exists: one client at a time), and
  // removes it after its rename. Waits for another client's lock up to commit_lock_wait (then
  // Transient, and the upload is tried again later); one this mount has seen stand unchanged
  // for stale_commit_lock (by its own monotonic clock, across those tries: a commit holds it for
  // a few round trips), left by a client that died while committing, is taken over; at once, one
  // whose holder was a process of this machine that no longer runs (CommitLockHolderGone). One that
  // points to lock_token() is this store's own, left by a commit whose connection broke before
  // it removed it (no commit of the key runs meanwhile: KeyLock): taken at once. Returns the
  // lock's path.
  // `*ours_left` says whether the lock found was this store's own, left by a commit before.
  // `op` ("put", "remove") leads its errors and log lines.
  Result<std::string> TakeCommitLock(SftpConnection& c, const KeyPaths& paths, std::string_view key,
                                     std::string_view op, bool* ours_left);
  // Makes the lock: a link to lock_token() or, on a server that makes none, a file (O_EXCL).
  Status MakeCommitLock(SftpConnection& c, const std::string& lock);
  Status MakeLockFile(SftpConnection& c, const std::string& lock);
  // Whether `lock` still points to lock_token() (exists, where locks are files): false once
  // another client took it over (this mount stalled for stale_commit_lock).
  Result<bool> CheckCommitLock(SftpConnection& c, const std::string& lock);
  // From now on, commit locks are files; logs `why` once.
  void UseLockFiles(const std::string& why);
  void ReleaseCommitLock(SftpConnection& c, const std::string& lock);
  // Who holds a lock found in the way: its mtime and, for a link, its target (another client's
  // token; empty for a lock of a file, as objfs made them before).
  struct LockHolder {
    int64_t mtime_s = 0;
    std::string token;
    bool operator==(const LockHolder&) const = default;
  };
  // The holder of the lock at `path`; NotFound once it is gone.
  Result<LockHolder> LockHolderOf(SftpConnection& c, const std::string& path);
  // Whether `lock`, held by `holder`, has stood unchanged for stale_commit_lock since this
  // mount first saw it so; notes it if not seen so before.
  bool LockLeftBehind(const std::string& lock, const LockHolder& holder);
  // What an upload's temporary file showed when it was made. SFTP has no O_NOFOLLOW, and
  // whoever may write its directory may put something else in its place between two opens of
  // its name: a link to a file of the account's elsewhere, or a file of their own. Each open of
  // the name after the first is checked against this before a byte is written through it.
  struct StagedIdentity {
    uint32_t uid = 0;
    // The file's mtime when it was made, by the server's clock: later files (cp's clone) have
    // one at least as late, which an older file of the account's, linked there, lacks.
    int64_t made_s = 0;
    // A random atime given at creation, which writes leave alone: another file of the same
    // owner (a link's target) has its own. Unset where the server does not keep the one given.
    std::optional<int64_t> atime_s;
  };
  // Gives the temporary file open as `handle`, just made by this mount, a secret atime (its
  // mtime stays), and returns what identifies it.
  static Result<StagedIdentity> MarkStaged(SftpWire& wire, const SftpWire::Handle& handle);
  // Opens the temporary file `path` for writing again (and reading: a FIFO put there opens at
  // once); fails, having written nothing, unless it is a regular file that `identity` describes
  // (and, if given, of `size` bytes).
  static Result<SftpWire::Handle> OpenStaged(SftpWire& wire, const std::string& path,
                                             const StagedIdentity& identity,
                                             std::optional<uint64_t> size = std::nullopt);
  // Whether CopyWithCp may run cp for a file of `size` bytes (it may still decide not to).
  bool MayRunCp(uint64_t size) const;
  std::string TempName(const std::string& dir);
  // Notes the temporary file `path` in the journal before it is created.
  Status NoteTemporary(const std::string& path, std::string_view what);
  // Starts ProbeServerMd5(dir) on a thread of its own, once per mount, when the first streamed
  // upload left unhashed has completed (into `dir`, which it changed anyway), while md5sum is
  // untried.
  void StartMd5Probe(const std::string& dir);
  // The check of md5sum in a mount before any file is asked of it, on a probe file of 4 KiB of
  // random bytes made for it (as an upload's temporary file, and removed) in `dir`: never a
  // file read back here, which may be gigabytes. Trusted: md5sum runs and sees the files SFTP
  // shows. Off: it could not run or answered wrongly (logged). NoAnswer: it did not answer in
  // time, or the connection failed (not asked for the file either). NoProbe: none could be made
  // (a directory the account may not write): the file's own bytes, read here, decide.
  enum class Md5Probe { kTrusted, kOff, kNoAnswer, kNoProbe };
  Md5Probe ProbeServerMd5(const std::string& dir);
  // Turns server_md5 off for the rest of the mount, once, saying why.
  void TurnServerMd5Off(const std::string& why);
  // Removes the temporary file `path` after a failed upload or copy, and its note once it is
  // gone. What it cannot remove now (a broken connection) it marks abandoned in the journal,
  // for the mount to remove once the server answers again.
  void DropTemporary(SftpConnection& c, const std::string& path);
  // Copies the file at `from` (a regular file of `size` bytes) to the temporary file `to`,
  // which this mount made, by running cp on the server over `c` (server_cp; `copy_data`:
  // whether the server has copy-data, so that cp is there only to clone). cp removes `to` and
  // makes its own. kCopied: `to` is a regular file of `size` bytes (the caller checks that the
  // source kept its version). kNotRun: cp is not used for this file. kFailed: cp ended without
  // copying (turned off for the mount if it never worked), and `to` is made again, empty.
  // kCopied and kFailed set `identity` (whose uid the file must have) to the new file's. An
  // error: the connection failed, cp ran past its time or its shell talked without end; it
  // may still be writing `to`, which must not be used or removed (the journal's note stays, so
  // that the next mount removes it), and cp is off for the mount, unless only the connection
  // broke under a cp that has worked in this mount.
  enum class CpOutcome { kNotRun, kCopied, kFailed };
  Result<CpOutcome> CopyWithCp(SftpConnection& c, const std::string& from, const std::string& to,
                               uint64_t size, bool copy_data, StagedIdentity* identity);
  // copy() of a file, once, by cp where `may_cp` and MayRunCp allow: `cp_unknown` is set when
  // cp's end is unknown (see CopyWithCp).
  Result<ObjectInfo> CopyFile(const ObjectInfo& src, std::string_view dst,
                              const CopyOptions& options, bool may_cp, bool* cp_unknown);
  // Serialises the changes of one key (of the keys that hash alike): lock 8 of
  // fs/lock_order.h, held across calls to the server.
  Mutex& KeyLock(std::string_view key);

  SftpStoreOptions options_;  // root resolved by CheckRoot, then unchanged
  std::atomic<bool> owner_refused_{false};
  // The states of a command run on the server. server_md5: untried; trusted once its first
  // answer matched the file's bytes; off for the rest of the mount once it did not, or md5sum
  // could not run.
  static constexpr int kServerCommandUntried = 0;
  static constexpr int kServerCommandTrusted = 1;
  static constexpr int kServerCommandOff = 2;
  std::atomic<int> server_md5_state_{kServerCommandUntried};
  // The connections that may be hashing on the server at once: half of them (none of one).
  using Md5Slots = std::counting_semaphore<32>;
  std::unique_ptr<Md5Slots> md5_slots_;
  std::atomic<uint64_t> server_md5_runs_{0};
  std::atomic<bool> md5_probe_started_{false};
  std::atomic<bool> md5_probe_done_{false};
  std::thread md5_probe_;  // set once, by the call that started it; joined by the destructor
  // server_cp: untried; trusted once a copy checked out; off once cp could not run or did not
  // copy before it ever had.
  std::atomic<int> server_cp_state_{kServerCommandUntried};
  // lsetstat refused a mode that SETSTAT then set on a file that was no link
  // (SetStatOfTheFile).
  std::atomic<bool> lsetstat_mode_refused_{false};
  std::atomic<uint64_t> server_cp_runs_{0};
  // The shortest time a clone by cp took, in ns (-1: none yet): what the account's shell takes
  // to start, on the whole.
  std::atomic<int64_t> cp_clone_ns_{-1};
  // False while Create checks the root: its error is the caller's to report.
  bool log_timeouts_ = true;
  SftpSessionPool pool_;
  std::array<Mutex, 64> key_locks_;
  // Learnt from the first connection.
  // Other clients' commit locks found in the way: path -> (their holder, when first seen
  // so). Forgotten once this mount takes the lock.
  Mutex commit_locks_mu_;  // lock 34 of fs/lock_order.h; a leaf
  std::map<std::string, std::pair<LockHolder, std::chrono::steady_clock::time_point>> seen_locks_
      GUARDED_BY(commit_locks_mu_);
  // Conditional commits whose rename got no reply (the connection broke), by key: the version
  // the renamed file has, and when their lock was taken (after stale_commit_lock another
  // client may have taken it over). Until the key's next commit.
  struct LostRename {
    ETag version;
    std::optional<ETag> content;  // the MD5 of its bytes, where known
    std::chrono::steady_clock::time_point locked;
  };
  std::map<std::string, LostRename, std::less<>> lost_renames_ GUARDED_BY(commit_locks_mu_);
  // The random part of what this store's commit locks point to (lock_token()).
  const std::string lock_id_;
  // The server refused to make a lock as a link, or to read one, and made it as a file.
  std::atomic<bool> lock_files_{false};
  // A link made was found at the lock's name.
  std::atomic<bool> links_checked_{false};
  mutable Mutex server_mu_;  // lock 12 of fs/lock_order.h
  bool server_known_ GUARDED_BY(server_mu_) = false;
  bool copy_data_ GUARDED_BY(server_mu_) = false;
  SftpLimits limits_ GUARDED_BY(server_mu_);
  std::string cipher_ GUARDED_BY(server_mu_);
};

}  // namespace objfs::sftp
