// What an operator runs and reads, through real objfs mounts on RGW and sshd: the log (its sink,
// levels and per-request debug lines, which must never show a secret), the counters of
// user.objfs.stats and `objfs stats`, the periodic stats line, the headers new objects get
// (Content-Type, storage class, ACL, SSE-C) as the server stores them, SSE-KMS kept through
// copies and edits, the refusal of a non-empty mount point, and --help and --version.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <span>
#include <string>
#include <vector>

#include "backend/base64.h"
#include "backend/s3/s3_store.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

// The response headers of a signed HEAD of `key` in `bucket` (lowercase names), with `extra`
// request headers; the status line first.
std::string HeadObject(const std::string& bucket, const std::string& key,
                       const std::vector<std::string>& extra = {}) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, "");
  argv.push_back("-I");
  for (const std::string& header : extra) {
    argv.push_back("-H");
    argv.push_back(header);
  }
  argv.push_back(server.endpoint + "/" + bucket + "/" + key);
  CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string out;
  for (char c : r.out) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A signed GET of `bucket`/`path` (a query such as "key?acl" allowed): the body.
std::string GetSigned(const std::string& bucket, const std::string& path) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, "");
  argv.push_back(server.endpoint + "/" + bucket + "/" + path);
  CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(MountOpsTest, DebugLogHasOneLinePerS3RequestAndNoSecret) {
  std::string bucket = CreateTestBucket(TestName());
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string log = scratch.path() + "/objfs.log";
  ObjfsMount::Options options;
  options.extra_options = "log=" + log + ",log_level=debug";
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/logged.txt", "a logged file");
  ASSERT_EQ(mount->Stop(), 0) << mount->log();

  const std::string text = ReadLocal(log);
  bool put_line = false;
  for (const std::string& line : Lines(text)) {
    // "2026-...Z objfs[PID] debug: s3 PUT logged.txt status=200 sent=13 received=0 1.2ms
    // request_id=tx..."
    if (Contains(line, " debug: s3 PUT logged.txt ") && Contains(line, "status=200") &&
        Contains(line, "sent=13") && Contains(line, "ms request_id=tx")) {
      put_line = true;
    }
  }
  EXPECT_TRUE(put_line) << text;
  EXPECT_TRUE(Contains(text, " debug: s3 HEAD ")) << text;
  const S3TestServer& server = SharedS3Server();
  EXPECT_FALSE(Contains(text, server.secret_key)) << text;
  EXPECT_FALSE(Contains(text, "Signature=")) << text;
  EXPECT_FALSE(Contains(text, "AWS4-HMAC-SHA256")) << text;
  // Nothing went to standard error but what came before the log file was chosen.
  EXPECT_FALSE(Contains(mount->log(), "s3 PUT")) << mount->log();
}

TEST(MountOpsTest, DebugLogHasOneLinePerSftpRequest) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string log = scratch.path() + "/objfs.log";
  ObjfsMount::Options options;
  options.extra_options = "log=" + log + ",log_level=debug";
  auto mount = ObjfsMount::Start(dir.url, options);
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/sftp-logged.txt", "over sftp");
  EXPECT_EQ(ReadFile(mount->path() + "/sftp-logged.txt"), "over sftp");
  ASSERT_EQ(mount->Stop(), 0) << mount->log();

  const std::string text = ReadLocal(log);
  EXPECT_TRUE(Contains(text, " debug: sftp HEAD sftp-logged.txt status=")) << text;
  bool written = false;
  for (const std::string& line : Lines(text)) {
    if (Contains(line, "sftp-logged.txt status=ok bytes=9 ")) written = true;
  }
  EXPECT_TRUE(written) << text;
}

// At log_level=info the request lines are not written; log_metrics=1 writes a stats line each
// second; log=syslog without /dev/log falls back to standard error, saying so.
TEST(MountOpsTest, LevelsMetricsLinesAndSyslogFallback) {
  std::string bucket = CreateTestBucket(TestName());
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string log = scratch.path() + "/objfs.log";
  {
    ObjfsMount::Options options;
    options.extra_options = "log=" + log + ",log_level=info,log_metrics=1";
    auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
    ASSERT_TRUE(mount);
    WriteFile(mount->path() + "/quiet.txt", "not logged");
    EXPECT_TRUE(WaitFor(10, [&] {
      return Contains(ReadLocal(log), " info: stats: ") &&
             Contains(ReadLocal(log), " put_requests=");
    })) << ReadLocal(log);
    ASSERT_EQ(mount->Stop(), 0) << mount->log();
    EXPECT_FALSE(Contains(ReadLocal(log), "s3 PUT")) << ReadLocal(log);
  }
  struct stat st {};
  if (::stat("/dev/log", &st) == 0) GTEST_SKIP() << "this machine has /dev/log";
  ObjfsMount::Options options;
  options.extra_options = "log=syslog,log_metrics=1";
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  EXPECT_TRUE(WaitFor(10, [&] { return Contains(mount->log(), "objfs: stats: "); }))
      << mount->log();
  EXPECT_TRUE(Contains(mount->log(), "no syslog socket /dev/log")) << mount->log();
  EXPECT_EQ(mount->Stop(), 0);
}

// Each line has its own level: what the mount says at start (endpoint, region, credentials)
// is info, a risky option a warning, so log_level=warn keeps the one and drops the other.
TEST(MountOpsTest, EachLineGoesAtItsOwnLevel) {
  std::string bucket = CreateTestBucket(TestName());
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string log = scratch.path() + "/objfs.log";
  for (const std::string level : {"warn", "info"}) {
    SCOPED_TRACE(level);
    fs::remove(log);
    ObjfsMount::Options options;
    options.extra_options =
        "log=" + log + ",log_level=" + level + ",allow_other,no_default_permissions";
    auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
    ASSERT_TRUE(mount);
    ASSERT_EQ(mount->Stop(), 0) << mount->log();  // (the process has written all it will)
    const std::string text = ReadLocal(log);
    EXPECT_TRUE(Contains(text, " warn: allow_other with no_default_permissions")) << text;
    EXPECT_FALSE(Contains(text, " error: ")) << text;
    if (level == "warn") {
      EXPECT_FALSE(Contains(text, "s3: endpoint ")) << text;
    } else {
      EXPECT_TRUE(Contains(text, " info: s3: endpoint ")) << text;
    }
  }
}

TEST(MountOpsTest, StatsShowPendingUploadsStagedBytesAndFailures) {
  std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  options.extra_options = "writeback=600";  // closed files wait in cache_dir
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string data(100000, 'p');
  WriteFile(mount->path() + "/pending-1", data);
  WriteFile(mount->path() + "/pending-2", data);
  ASSERT_EQ(::mkdir((mount->path() + "/full").c_str(), 0755), 0);
  WriteFile(mount->path() + "/full/inside", "x");
  EXPECT_NE(::rmdir((mount->path() + "/full").c_str()), 0);  // ENOTEMPTY, from objfs

  const std::string stats = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(stats, "pending_upload_files"), 3) << stats;
  EXPECT_EQ(StatsCounter(stats, "pending_upload_bytes"), 200001) << stats;
  EXPECT_GE(StatsCounter(stats, "staged_bytes"), 200000) << stats;
  EXPECT_EQ(StatsCounter(stats, "in_flight_requests"), 0) << stats;
  EXPECT_EQ(StatsCounter(stats, "failed_rmdir"), 1) << stats;

  CommandResult r = RunObjfs({"stats", mount->path()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "pending uploads:        3 files, 200001 (195.3 KiB) bytes"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "failed operations:      rmdir 1")) << r.out;
  EXPECT_TRUE(Contains(r.out, "  put_requests ")) << r.out;

  // fsync uploads: nothing is pending any more.
  for (const char* name : {"/pending-1", "/pending-2", "/full/inside"}) {
    const int fd = ::open((mount->path() + name).c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << name;
    EXPECT_EQ(::fsync(fd), 0) << name;
    ::close(fd);
  }
  EXPECT_TRUE(WaitFor(10, [&] {
    return StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "pending_upload_files") == 0;
  })) << GetXattr(mount->path(), "user.objfs.stats");

  ScratchDir plain;
  CommandResult not_mounted = RunObjfs({"stats", plain.path()});
  EXPECT_EQ(not_mounted.exit_code, 1);
  EXPECT_TRUE(Contains(not_mounted.err, "is not the root of an objfs mount")) << not_mounted.err;
  EXPECT_EQ(mount->Stop(), 0);
}

TEST(MountOpsTest, NewObjectsGetContentTypeStorageClassAndAcl) {
  std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  options.extra_options = "storage_class=STANDARD,acl=public-read,multipart_threshold=5M";
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/page.html", "<html></html>");
  WriteFile(mount->path() + "/data.JSON", "{}");
  WriteFile(mount->path() + "/blob.nosuchextension", "x");
  WriteFile(mount->path() + "/large.txt", PseudoRandomBytes(6 << 20, 1));  // multipart
  // A chmod of a file just written (a copy with new metadata, with no HEAD first) keeps the type
  // the name gave it.
  for (const char* name : {"/page.html", "/large.txt"}) {
    ASSERT_EQ(::chmod((mount->path() + name).c_str(), 0600), 0) << std::strerror(errno);
  }
  // A rename copies the object with its headers: the type stays.
  WriteFile(mount->path() + "/moved.html", "<html></html>");
  ASSERT_EQ(
      ::rename((mount->path() + "/moved.html").c_str(), (mount->path() + "/renamed.html").c_str()),
      0)
      << std::strerror(errno);
  ASSERT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_TRUE(Contains(HeadObject(bucket, "renamed.html"), "content-type: text/html"))
      << HeadObject(bucket, "renamed.html");

  EXPECT_TRUE(Contains(HeadObject(bucket, "page.html"), "content-type: text/html"));
  EXPECT_TRUE(Contains(HeadObject(bucket, "data.JSON"), "content-type: application/json"));
  EXPECT_TRUE(
      Contains(HeadObject(bucket, "blob.nosuchextension"), "content-type: binary/octet-stream"));
  EXPECT_TRUE(Contains(HeadObject(bucket, "large.txt"), "content-type: text/plain"));
  for (const char* key : {"page.html", "large.txt"}) {
    const std::string acl = GetSigned(bucket, std::string(key) + "?acl=");
    EXPECT_TRUE(Contains(acl, "http://acs.amazonaws.com/groups/global/AllUsers")) << key << acl;
  }

  // A storage class the server does not have: the server refuses the upload, so the header
  // reached it.
  ObjfsMount::Options unknown;
  unknown.extra_options = "storage_class=NO_SUCH_CLASS";
  auto refused = ObjfsMount::Start(S3MountUrl(bucket), unknown);
  ASSERT_TRUE(refused);
  const int fd = ::open((refused->path() + "/refused.txt").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "x", 1), 1);
  EXPECT_NE(::close(fd), 0);
  refused->Stop();
  EXPECT_TRUE(Contains(HeadObject(bucket, "refused.txt"), " 404")) << "stored despite the class";
}

// objfs's own S3 client for `bucket` on the test server, with `headers` for what it creates.
std::unique_ptr<s3::S3Store> TestClient(const std::string& bucket,
                                        const s3::ObjectHeaderOptions& headers) {
  const S3TestServer& server = SharedS3Server();
  s3::S3StoreOptions options;
  options.bucket = bucket;
  options.endpoint = server.endpoint;
  options.region = server.region;
  options.credentials.access_key = server.access_key;
  options.credentials.secret_key = server.secret_key;
  options.object_headers = headers;
  Result<std::unique_ptr<s3::S3Store>> store = s3::S3Store::Create(options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

// SSE-C: every object is stored encrypted with the key; the server serves it only to requests
// that present the key; a server-side copy (cp within the mount) and a multipart upload are
// encrypted too; a remount with the key reads everything back.
TEST(MountOpsTest, SseCustomerKeyEncryptsPutsCopiesAndMultipart) {
  std::string bucket = CreateTestBucket(TestName());
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string key = "0123456789abcdef0123456789ABCDEF";
  const std::string key_file = scratch.path() + "/sse.key";
  WriteFile(key_file, Base64(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(key.data()),
                                                      key.size())) +
                          "\n");
  ObjfsMount::Options options;
  options.extra_options = "sse_c_key=" + key_file + ",multipart_threshold=5M";
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string large = PseudoRandomBytes(6 << 20, 2);
  WriteFile(mount->path() + "/secret.txt", "encrypted at rest");
  WriteFile(mount->path() + "/large.bin", large);
  ASSERT_EQ(
      RunCommand({"cp", mount->path() + "/secret.txt", mount->path() + "/copy.txt"}).exit_code, 0);
  ASSERT_EQ(mount->Stop(), 0) << mount->log();

  // The server's side: a HEAD without the key is refused, one with it (objfs's own client,
  // given the key) shows the object.
  s3::ObjectHeaderOptions with_key;
  with_key.sse_c_key = key;
  std::unique_ptr<s3::S3Store> keyed = TestClient(bucket, with_key);
  ASSERT_TRUE(keyed);
  for (const char* object : {"secret.txt", "copy.txt", "large.bin"}) {
    SCOPED_TRACE(object);
    const std::string without = HeadObject(bucket, object);
    EXPECT_TRUE(Contains(without, " 400")) << without;  // an SSE-C object needs its key
    Result<ObjectInfo> head = keyed->head(object);
    ASSERT_TRUE(head.ok()) << head.status().ToString();
    EXPECT_EQ(head->size, std::string(object) == "large.bin" ? large.size() : 17u);
  }

  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(ReadFile(mount->path() + "/copy.txt"), "encrypted at rest");
  EXPECT_EQ(ReadFile(mount->path() + "/large.bin"), large);
  EXPECT_EQ(mount->Stop(), 0);
}

// Appends `text` to `path` with the shell's >>, as a user does: the exit status.
int AppendWithShell(const std::string& path, const std::string& text) {
  return RunCommand({"sh", "-c", "printf '" + text + "' >> " + path}).exit_code;
}

// rename(2): "" when it succeeded, else its error.
// Appends "tail" to the 12 MiB `name` in mount `m` (5 MiB parts): its first two parts are
// copied on the server, not sent again.
void AppendCopyingOnTheServer(const std::string& m, const std::string& name) {
  const std::string before = GetXattr(m, "user.objfs.stats");
  ASSERT_EQ(AppendWithShell(m + "/" + name, "tail"), 0);
  const std::string after = GetXattr(m, "user.objfs.stats");
  EXPECT_GE(StatsCounter(after, "bytes_copied_on_server") -
                StatsCounter(before, "bytes_copied_on_server"),
            10 << 20)
      << after;
}

std::string RenameError(const std::string& from, const std::string& to) {
  return ::rename(from.c_str(), to.c_str()) == 0 ? "" : std::strerror(errno);
}

// SSE-KMS that another client chose survives what a user does to the file through a mount
// that sets no encryption: a cp, an mv, a chmod, a touch, an append, an overwrite, a streamed
// rewrite, an edit assembled on the server, a rename in the write-back window and a cp onto it
// do not store it decrypted, and do not fail (RGW refuses CopyObject from an SSE-KMS source
// with 501). A mount's own sse=aws:kms applies to what it writes and copies.
TEST(MountOpsTest, WhatAUserDoesKeepsAnotherClientsKmsEncryption) {
  std::string bucket = CreateTestBucket(TestName());
  s3::ObjectHeaderOptions kms;
  kms.sse = "aws:kms";
  kms.sse_kms_key_id = "testkey-2";
  std::unique_ptr<s3::S3Store> other = TestClient(bucket, kms);
  ASSERT_TRUE(other);
  const std::string small = "encrypted by another client";
  const std::string large = PseudoRandomBytes(6 << 20, 3);
  const std::string larger = PseudoRandomBytes(12 << 20, 4);
  for (const auto& [key, data] : std::map<std::string, std::string>{{"small.txt", small},
                                                                    {"large.bin", large},
                                                                    {"empty", ""},
                                                                    {"chmod.txt", small},
                                                                    {"append.txt", small},
                                                                    {"over.txt", small},
                                                                    {"stream.bin", large},
                                                                    {"edit.bin", larger},
                                                                    {"later.txt", small},
                                                                    {"target.txt", small},
                                                                    {"listed.txt", small},
                                                                    {"listed-target.txt", small},
                                                                    {"crashed.txt", small},
                                                                    {"crash-renamed.txt", small},
                                                                    {"crash-emptied.txt", small}}) {
    MemorySource source(data);
    ASSERT_TRUE(other->put(key, source, {}).ok()) << key;
  }
  ASSERT_TRUE(Contains(HeadObject(bucket, "small.txt"), "x-amz-server-side-encryption: aws:kms"));

  ObjfsMount::Options options;
  // 5 MiB parts: the append to the 12 MiB edit.bin copies its first two on the server.
  options.extra_options = "copy_part_threshold=5M,multipart_threshold=5M,part_size=5M";
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  ASSERT_EQ(RunCommand({"ls", "-l", m}).exit_code, 0);
  ASSERT_EQ(AppendWithShell(m + "/append.txt", " and appended"), 0);
  WriteFile(m + "/over.txt", "overwritten");
  const std::string rewritten = PseudoRandomBytes(6 << 20, 5);
  WriteFile(m + "/stream.bin", rewritten);
  AppendCopyingOnTheServer(m, "edit.bin");
  ASSERT_EQ(RunCommand({"cp", m + "/small.txt", m + "/copy.txt"}).exit_code, 0);
  // cp onto an existing file: the file keeps its own encryption, as a rewrite does.
  WriteFile(m + "/plain.txt", "not encrypted");
  ASSERT_EQ(RunCommand({"cp", m + "/plain.txt", m + "/target.txt"}).exit_code, 0);
  ASSERT_EQ(RenameError(m + "/empty", m + "/empty-moved"), "");
  ASSERT_EQ(RenameError(m + "/large.bin", m + "/moved.bin"), "");
  ASSERT_EQ(::chmod((m + "/chmod.txt").c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(RunCommand({"touch", m + "/small.txt"}).exit_code, 0);
  ASSERT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_FALSE(Contains(mount->log(), "error")) << mount->log();
  // Made of parts (RGW refuses CopyObject from an SSE-KMS source, and stores one that names
  // SSE-KMS in the clear): a multipart ETag.
  EXPECT_TRUE(Contains(HeadObject(bucket, "copy.txt"), "-1\"")) << HeadObject(bucket, "copy.txt");

  // Appended to and renamed within the write-back window: uploaded under the new name only,
  // with the encryption of the object its data came from.
  ObjfsMount::Options window = options;
  window.extra_options += ",writeback=60";
  auto delayed = ObjfsMount::Start(S3MountUrl(bucket), window);
  ASSERT_TRUE(delayed);
  ASSERT_EQ(AppendWithShell(delayed->path() + "/later.txt", " and later"), 0);
  ASSERT_EQ(RenameError(delayed->path() + "/later.txt", delayed->path() + "/renamed-later.txt"),
            "");
  ASSERT_EQ(delayed->Stop(), 0) << delayed->log();

  // And one objfs is killed before it uploads. The next mount recovers each file with the
  // encryption its crash record names, also under the name it was renamed to, where no object
  // would tell.
  auto killed = ObjfsMount::Start(S3MountUrl(bucket), window);
  ASSERT_TRUE(killed);
  ASSERT_EQ(AppendWithShell(killed->path() + "/crashed.txt", " and recovered"), 0);
  ASSERT_EQ(AppendWithShell(killed->path() + "/crash-renamed.txt", " and renamed"), 0);
  ASSERT_EQ(
      RenameError(killed->path() + "/crash-renamed.txt", killed->path() + "/crash-renamed-to.txt"),
      "");
  // Accepted, then emptied and written again (a new staging file), then renamed.
  ASSERT_EQ(AppendWithShell(killed->path() + "/crash-emptied.txt", " and emptied"), 0);
  WriteFile(killed->path() + "/crash-emptied.txt", "written again");
  ASSERT_EQ(
      RenameError(killed->path() + "/crash-emptied.txt", killed->path() + "/crash-emptied-to.txt"),
      "");
  killed->KillAndWait(SIGKILL);
  ASSERT_TRUE(killed->Restart());
  ASSERT_EQ(killed->Stop(), 0) << killed->log();

  // The same two on a mount whose listings HEAD nothing (listing_attrs): the open for writing
  // learns the encryption.
  ObjfsMount::Options listed = window;
  listed.extra_options += ",listing_attrs";
  auto unseen = ObjfsMount::Start(S3MountUrl(bucket), listed);
  ASSERT_TRUE(unseen);
  ASSERT_EQ(RunCommand({"ls", "-l", unseen->path()}).exit_code, 0);
  ASSERT_EQ(AppendWithShell(unseen->path() + "/listed.txt", " and listed"), 0);
  ASSERT_EQ(RenameError(unseen->path() + "/listed.txt", unseen->path() + "/renamed-listed.txt"),
            "");
  ASSERT_EQ(RunCommand({"cp", unseen->path() + "/plain.txt", unseen->path() + "/listed-target.txt"})
                .exit_code,
            0);
  ASSERT_EQ(unseen->Stop(), 0) << unseen->log();

  for (const char* key :
       {"small.txt", "copy.txt", "empty-moved", "moved.bin", "chmod.txt", "append.txt", "over.txt",
        "stream.bin", "edit.bin", "renamed-later.txt", "target.txt", "renamed-listed.txt",
        "listed-target.txt", "crashed.txt", "crash-renamed-to.txt", "crash-emptied-to.txt"}) {
    SCOPED_TRACE(key);
    const std::string head = HeadObject(bucket, key);
    EXPECT_TRUE(Contains(head, " 200")) << head;
    EXPECT_TRUE(Contains(head, "x-amz-server-side-encryption: aws:kms")) << head;
    EXPECT_TRUE(Contains(head, "x-amz-server-side-encryption-aws-kms-key-id: testkey-2")) << head;
  }
  EXPECT_TRUE(Contains(HeadObject(bucket, "chmod.txt"), "x-amz-meta-mode: 33152"));
  EXPECT_TRUE(Contains(HeadObject(bucket, "small.txt"), "x-amz-meta-mtime: "));  // touched
  EXPECT_TRUE(Contains(HeadObject(bucket, "large.bin"), " 404"));
  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(ReadFile(m + "/copy.txt"), small);
  EXPECT_EQ(ReadFile(m + "/moved.bin"), large);
  EXPECT_EQ(ReadFile(m + "/empty-moved"), "");
  EXPECT_EQ(ReadFile(m + "/append.txt"), small + " and appended");
  EXPECT_EQ(ReadFile(m + "/over.txt"), "overwritten");
  EXPECT_EQ(ReadFile(m + "/stream.bin"), rewritten);
  EXPECT_EQ(ReadFile(m + "/edit.bin"), larger + "tail");
  EXPECT_EQ(ReadFile(m + "/renamed-later.txt"), small + " and later");
  EXPECT_EQ(ReadFile(m + "/target.txt"), "not encrypted");
  EXPECT_EQ(ReadFile(m + "/renamed-listed.txt"), small + " and listed");
  EXPECT_EQ(ReadFile(m + "/listed-target.txt"), "not encrypted");
  EXPECT_EQ(ReadFile(m + "/crashed.txt"), small + " and recovered");
  EXPECT_EQ(ReadFile(m + "/crash-renamed-to.txt"), small + " and renamed");
  EXPECT_FALSE(fs::exists(m + "/crash-renamed.txt"));
  EXPECT_EQ(ReadFile(m + "/crash-emptied-to.txt"), "written again");
  EXPECT_EQ(mount->Stop(), 0);

  // The mount's own key: what it writes, and its copies, are encrypted with testkey-1.
  ObjfsMount::Options own;
  own.extra_options = "sse=aws:kms,sse_kms_key_id=testkey-1";
  auto encrypting = ObjfsMount::Start(S3MountUrl(bucket), own);
  ASSERT_TRUE(encrypting);
  WriteFile(encrypting->path() + "/new.txt", "written encrypted");
  ASSERT_EQ(
      RunCommand({"cp", encrypting->path() + "/new.txt", encrypting->path() + "/new-copy.txt"})
          .exit_code,
      0);
  // A copy of an unencrypted file is encrypted too (RGW would store a CopyObject in the clear).
  ASSERT_EQ(
      RunCommand({"cp", encrypting->path() + "/plain.txt", encrypting->path() + "/plain-copy.txt"})
          .exit_code,
      0);
  ASSERT_EQ(encrypting->Stop(), 0) << encrypting->log();
  for (const char* key : {"new.txt", "new-copy.txt", "plain-copy.txt"}) {
    SCOPED_TRACE(key);
    const std::string head = HeadObject(bucket, key);
    EXPECT_TRUE(Contains(head, "x-amz-server-side-encryption-aws-kms-key-id: testkey-1")) << head;
  }
  EXPECT_FALSE(Contains(encrypting->log(), "does not confirm")) << encrypting->log();
}

// A PUT of `data` to `bucket`/`key` by another client, with `headers`.
void PutWithHeaders(const std::string& bucket, const std::string& key, const std::string& data,
                    const std::vector<std::string>& headers) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, data);
  argv.insert(argv.end(), {"-X", "PUT", "-w", "%{http_code}", "--data-binary", "@-"});
  for (const std::string& header : headers) argv.insert(argv.end(), {"-H", header});
  argv.push_back(server.endpoint + "/" + bucket + "/" + key);
  CommandResult r = RunCommand(argv, data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The status code, after the body of a copy's reply.
  ASSERT_TRUE(r.out.size() >= 3 && r.out.compare(r.out.size() - 3, 3, "200") == 0)
      << key << ": " << r.out;
}

// Cache-Control and the other headers S3 calls system-defined metadata, which another client
// set, are kept by what a user does to the file: a chmod or touch (a copy with new metadata,
// which S3 stores without them unless named again), one made of parts, an mv made of parts, an
// append, an edit. A cp gives its copy the source's, as other tools' server-side copies do,
// onto another file too: they describe the bytes, which are the source's.
TEST(MountOpsTest, WhatAUserDoesKeepsTheHeadersAnotherClientSet) {
  std::string bucket = CreateTestBucket(TestName());
  const std::vector<std::string> headers = {"Cache-Control: max-age=60",
                                            "Content-Disposition: attachment; filename=\"x.bin\"",
                                            "Content-Encoding: gzip",
                                            "Content-Language: de",
                                            "Expires: Wed, 21 Oct 2037 07:28:00 GMT",
                                            "x-amz-website-redirect-location: /elsewhere.html",
                                            "Content-Type: application/x-thing"};
  const std::string small = "headers set by another client";
  const std::string large = PseudoRandomBytes(6 << 20, 7);
  const std::string larger = PseudoRandomBytes(12 << 20, 8);
  for (const auto& [key, data] : std::map<std::string, std::string>{{"chmod.txt", small},
                                                                    {"touch.txt", small},
                                                                    {"xattr.txt", small},
                                                                    {"chmod-large.bin", large},
                                                                    {"large.bin", large},
                                                                    {"append.txt", small},
                                                                    {"edit.bin", larger}}) {
    PutWithHeaders(bucket, key, data, headers);
  }

  ObjfsMount::Options options;
  // Copies above 5 MiB are made of parts; the append to edit.bin copies its first two parts.
  options.extra_options = "copy_part_threshold=5M,multipart_threshold=5M,part_size=5M";
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  ASSERT_EQ(::chmod((m + "/chmod.txt").c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(RunCommand({"touch", m + "/touch.txt"}).exit_code, 0);
  ASSERT_EQ(RunCommand({"setfattr", "-n", "user.note", "-v", "kept", m + "/xattr.txt"}).exit_code,
            0);
  ASSERT_EQ(::chmod((m + "/chmod-large.bin").c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(RenameError(m + "/large.bin", m + "/moved.bin"), "");
  ASSERT_EQ(AppendWithShell(m + "/append.txt", " and appended"), 0);
  ASSERT_EQ(RunCommand({"cp", m + "/touch.txt", m + "/copy.txt"}).exit_code, 0);
  ASSERT_EQ(RunCommand({"cp", m + "/chmod-large.bin", m + "/copy-large.bin"}).exit_code, 0);
  WriteFile(m + "/plain.txt", "written here");
  ASSERT_EQ(RunCommand({"cp", m + "/touch.txt", m + "/plain.txt"}).exit_code, 0);
  AppendCopyingOnTheServer(m, "edit.bin");
  ASSERT_EQ(mount->Stop(), 0) << mount->log();

  for (const char* key : {"chmod.txt", "touch.txt", "xattr.txt", "chmod-large.bin", "moved.bin",
                          "append.txt", "edit.bin", "copy.txt", "copy-large.bin", "plain.txt"}) {
    SCOPED_TRACE(key);
    const std::string head = HeadObject(bucket, key);
    EXPECT_TRUE(Contains(head, " 200")) << head;
    for (const std::string& header : headers) {
      std::string lower;
      for (char c : header) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      EXPECT_TRUE(Contains(head, lower)) << lower << " is not in\n" << head;
    }
  }
  // Made of parts (one, of the default copy_part_size): a multipart ETag.
  for (const char* key : {"moved.bin", "chmod-large.bin"}) {
    EXPECT_TRUE(Contains(HeadObject(bucket, key), "-1\"")) << HeadObject(bucket, key);
  }
  for (const char* key : {"chmod.txt", "chmod-large.bin"}) {
    EXPECT_TRUE(Contains(HeadObject(bucket, key), "x-amz-meta-mode: 33152")) << key;
  }
  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(ReadFile(m + "/chmod-large.bin"), large);
  EXPECT_EQ(ReadFile(m + "/copy-large.bin"), large);
  EXPECT_EQ(ReadFile(m + "/copy.txt"), small);
  EXPECT_EQ(ReadFile(m + "/plain.txt"), small);
  EXPECT_EQ(ReadFile(m + "/moved.bin"), large);
  EXPECT_EQ(ReadFile(m + "/append.txt"), small + " and appended");
  EXPECT_EQ(ReadFile(m + "/edit.bin"), larger + "tail");
  EXPECT_EQ(GetXattr(m + "/xattr.txt", "user.note"), "kept");
  EXPECT_EQ(mount->Stop(), 0);

  // A chmod held back (metadata_delay) and applied after another client replaced the object
  // gives the new object the mode, not the old object's headers, which describe other bytes.
  ObjfsMount::Options held = options;
  held.extra_options += ",metadata_delay=600";
  auto holding = ObjfsMount::Start(S3MountUrl(bucket), held);
  ASSERT_TRUE(holding);
  ASSERT_EQ(::chmod((holding->path() + "/touch.txt").c_str(), 0600), 0) << std::strerror(errno);
  PutWithHeaders(bucket, "touch.txt", "replaced, plain", {"Content-Type: text/x-other"});
  ASSERT_EQ(holding->Stop(), 0) << holding->log();
  const std::string replaced = HeadObject(bucket, "touch.txt");
  EXPECT_TRUE(Contains(replaced, "x-amz-meta-mode: 33152")) << replaced;
  EXPECT_TRUE(Contains(replaced, "content-type: text/x-other")) << replaced;
  EXPECT_FALSE(Contains(replaced, "content-encoding")) << replaced;
  EXPECT_FALSE(Contains(replaced, "cache-control")) << replaced;
}

// The tag set of `bucket`/`key`, as "k=v&k=v" in the order the server lists them ("" for
// none; the reply itself when it is not a tag set).
std::string TagsOf(const std::string& bucket, const std::string& key) {
  const std::string body = GetSigned(bucket, key + "?tagging=");
  if (!Contains(body, "<TagSet")) return body;
  std::string tags;
  static const std::regex kTag("<Tag><Key>([^<]*)</Key><Value>([^<]*)</Value></Tag>");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), kTag); it != std::sregex_iterator();
       ++it) {
    if (!tags.empty()) tags += "&";
    tags += (*it)[1].str() + "=" + (*it)[2].str();
  }
  return tags;
}

// Object tags another client set (lifecycle rules and cost reports key on them) stay on the file
// through a chmod, a touch, a setfattr and an mv, of a file copied whole or made of parts, and of
// a directory; RGW's CopyObject and every copy made of parts drop them. A cp is a new file and
// starts with none. A file without tags costs no request more.
TEST(MountOpsTest, ChmodTouchAndMvKeepTheTagsAnotherClientSet) {
  std::string bucket = CreateTestBucket(TestName());
  const std::string tagging = "x-amz-tagging: project=alpha&retain=7y";
  const std::string small = "tagged by another client";
  const std::string large = PseudoRandomBytes(6 << 20, 9);
  const std::map<std::string, std::string> files = {
      {"chmod.txt", small},    {"touch.txt", small},       {"xattr.txt", small},
      {"empty.txt", ""},       {"chmod-large.bin", large}, {"mv.txt", small},
      {"mv-large.bin", large}, {"dir/in-dir.txt", small},  {"cp.txt", small}};
  for (const auto& [key, data] : files) PutWithHeaders(bucket, key, data, {tagging});
  PutWithHeaders(bucket, "untagged.txt", small, {});

  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string log = scratch.path() + "/objfs.log";
  ObjfsMount::Options options;
  // Copies above 5 MiB are made of parts.
  options.extra_options = "copy_part_threshold=5M,log=" + log + ",log_level=debug";
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  for (const char* name : {"chmod.txt", "empty.txt", "chmod-large.bin", "untagged.txt"}) {
    ASSERT_EQ(::chmod((m + "/" + name).c_str(), 0600), 0) << name << ": " << std::strerror(errno);
  }
  ASSERT_EQ(RunCommand({"touch", m + "/touch.txt"}).exit_code, 0);
  ASSERT_EQ(RunCommand({"setfattr", "-n", "user.note", "-v", "kept", m + "/xattr.txt"}).exit_code,
            0);
  ASSERT_EQ(RenameError(m + "/mv.txt", m + "/moved.txt"), "");
  ASSERT_EQ(RenameError(m + "/mv-large.bin", m + "/moved-large.bin"), "");
  ASSERT_EQ(RenameError(m + "/dir", m + "/moved-dir"), "");
  ASSERT_EQ(RunCommand({"cp", m + "/cp.txt", m + "/copy.txt"}).exit_code, 0);
  ASSERT_EQ(mount->Stop(), 0) << mount->log();

  for (const char* key : {"chmod.txt", "touch.txt", "xattr.txt", "empty.txt", "chmod-large.bin",
                          "moved.txt", "moved-large.bin", "moved-dir/in-dir.txt", "cp.txt"}) {
    EXPECT_EQ(TagsOf(bucket, key), "project=alpha&retain=7y") << key;
  }
  EXPECT_EQ(TagsOf(bucket, "copy.txt"), "");
  EXPECT_EQ(TagsOf(bucket, "untagged.txt"), "");
  for (const char* key : {"chmod.txt", "empty.txt", "chmod-large.bin"}) {
    EXPECT_TRUE(Contains(HeadObject(bucket, key), "x-amz-meta-mode: 33152")) << key;
  }
  EXPECT_TRUE(Contains(HeadObject(bucket, "chmod-large.bin"), "-1\"")) << "not made of parts";
  // One read of the tags per tagged file given new metadata or moved in parts (a whole copy that
  // keeps the metadata keeps the tags itself), and none for the untagged one.
  const std::string text = ReadLocal(log);
  int reads = 0;
  for (const std::string& line : Lines(text)) {
    if (Contains(line, " debug: s3 GET ") && Contains(line, "?tagging status=200")) ++reads;
    EXPECT_FALSE(Contains(line, "s3 GET untagged.txt?tagging")) << line;
  }
  EXPECT_EQ(reads, 6) << text;
  EXPECT_FALSE(Contains(text, "tag(s)")) << text;
  EXPECT_FALSE(Contains(text, "lost its source's tags")) << text;

  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(ReadFile(m + "/chmod-large.bin"), large);
  EXPECT_EQ(ReadFile(m + "/moved-large.bin"), large);
  EXPECT_EQ(ReadFile(m + "/moved-dir/in-dir.txt"), small);
  EXPECT_EQ(mount->Stop(), 0);
}

// A server that takes sse= but does not encrypt (RGW 16.2 with AES256: its reply names no
// encryption, and neither does a HEAD) is told of once, at warn level.
// The Content-Type header of `key` in `bucket` ("" when there is none).
std::string StoredType(const std::string& bucket, const std::string& key) {
  for (const std::string& line : Lines(HeadObject(bucket, key))) {
    if (line.rfind("content-type: ", 0) == 0) {
      std::string type = line.substr(14);
      while (!type.empty() && (type.back() == '\r' || type.back() == ' ')) type.pop_back();
      return type;
    }
  }
  return "";
}

// rsync writes each file under a temporary name whose extension gives no type, and renames it
// into place (with its mode and times, held, riding along): each file gets the type its own
// name gives, as the files a cp or an editor writes in place do. So does a file moved to a
// name of another type. A type set otherwise (by another client) stays what it is.
TEST(MountOpsTest, RsyncAndMvGiveFilesTheTypeOfTheirNames) {
  std::string bucket = CreateTestBucket(TestName());
  PutWithHeaders(bucket, "custom.txt", "typed by another client", {"Content-Type: text/x-custom"});
  PutWithHeaders(bucket, "changed.txt", "changed by another client", {"x-amz-meta-foo: 1"});
  PutWithHeaders(bucket, "custom-page.html", "typed by another client",
                 {"Content-Type: text/x-custom"});
  const std::string source = fs::path(::testing::TempDir()) / (TestName() + "-site");
  fs::remove_all(source);
  fs::create_directories(source);
  WriteFile(source + "/index.html", "<html></html>");
  WriteFile(source + "/style.css", "body {}");
  WriteFile(source + "/data.json", "{}");
  WriteFile(source + "/README", "no extension");
  WriteFile(source + "/written.tmp", "renamed without a held change");
  ASSERT_EQ(::chmod((source + "/index.html").c_str(), 0640), 0);
  CommandResult touch = RunCommand({"touch", "-d", "@1000000000", source + "/index.html"});
  ASSERT_EQ(touch.exit_code, 0) << touch.err;
  auto mount = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  // Seen by the mount, then changed by another client in place (the ETag stays): the mv's new
  // metadata is what the object has now, not what the mount saw.
  struct stat seen {};
  ASSERT_EQ(::stat((m + "/changed.txt").c_str(), &seen), 0) << std::strerror(errno);
  PutWithHeaders(
      bucket, "changed.txt", "",
      {"x-amz-copy-source: /" + bucket + "/changed.txt", "x-amz-metadata-directive: REPLACE",
       "x-amz-meta-foo: 2", "Cache-Control: no-store", "Content-Type: text/plain"});
  CommandResult rsync = RunCommand({"rsync", "-a", source + "/", m + "/site/"});
  ASSERT_EQ(rsync.exit_code, 0) << rsync.err;
  // Not held, no metadata of its own to fold in: a plain rename.
  ASSERT_EQ(RunCommand({"cp", source + "/written.tmp", m + "/written.tmp"}).exit_code, 0);
  ASSERT_EQ(RenameError(m + "/written.tmp", m + "/written.html"), "");
  ASSERT_EQ(RenameError(m + "/site/style.css", m + "/site/style.html"), "");
  ASSERT_EQ(RenameError(m + "/custom.txt", m + "/custom.html"), "");
  ASSERT_EQ(RenameError(m + "/changed.txt", m + "/changed.html"), "");
  // To a name that gives no type: the old name's no longer applies; another client's stays.
  ASSERT_EQ(RenameError(m + "/site/data.json", m + "/site/data.orig"), "");
  ASSERT_EQ(RenameError(m + "/custom-page.html", m + "/custom-page.orig"), "");
  ASSERT_EQ(mount->Stop(), 0) << mount->log();
  fs::remove_all(source);

  EXPECT_EQ(StoredType(bucket, "site/index.html"), "text/html");
  EXPECT_EQ(StoredType(bucket, "site/data.orig"), "binary/octet-stream");
  EXPECT_EQ(StoredType(bucket, "custom-page.orig"), "text/x-custom");
  EXPECT_EQ(StoredType(bucket, "site/README"), "binary/octet-stream");
  EXPECT_EQ(StoredType(bucket, "site/style.html"), "text/html");
  EXPECT_EQ(StoredType(bucket, "written.html"), "text/html");
  EXPECT_EQ(StoredType(bucket, "custom.html"), "text/x-custom");
  EXPECT_EQ(StoredType(bucket, "changed.html"), "text/html");
  const std::string changed = HeadObject(bucket, "changed.html");
  EXPECT_TRUE(Contains(changed, "x-amz-meta-foo: 2")) << changed;
  EXPECT_TRUE(Contains(changed, "cache-control: no-store")) << changed;
  // The rename kept the rest: rsync's mode and times.
  auto fresh = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(fresh);
  EXPECT_EQ(ReadFile(fresh->path() + "/site/index.html"), "<html></html>");
  struct stat st {};
  ASSERT_EQ(::stat((fresh->path() + "/site/index.html").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtime, 1000000000);
}

TEST(MountOpsTest, EncryptionTheServerDoesNotConfirmIsWarnedOfOnce) {
  std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  options.extra_options = "sse=AES256,multipart_threshold=5M";
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/one.txt", "1");
  WriteFile(mount->path() + "/two.bin", PseudoRandomBytes(6 << 20, 6));  // multipart
  ASSERT_EQ(mount->Stop(), 0) << mount->log();
  const std::string head = HeadObject(bucket, "one.txt");
  ASSERT_TRUE(Contains(head, " 200")) << head;
  const bool encrypted = Contains(head, "x-amz-server-side-encryption: aes256");
  const std::string log = mount->log();
  size_t warnings = 0;
  for (const std::string& line : Lines(log)) {
    if (Contains(line, "does not confirm sse=AES256")) {
      ++warnings;
      EXPECT_TRUE(Contains(line, "warning:")) << line;
    }
  }
  EXPECT_EQ(warnings, encrypted ? 0u : 1u) << head << log;
}

TEST(MountOpsTest, ANonEmptyMountPointIsRefusedWithoutNonempty) {
  std::string bucket = CreateTestBucket(TestName());
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string mnt = scratch.path() + "/mnt";
  ASSERT_TRUE(fs::create_directory(mnt));
  WriteFile(mnt + "/local-file", "hidden by a mount");
  const std::string options = S3ServerOptions() + ",cache_dir=" + scratch.path() + "/cache";
  ExpectMountFails({S3MountUrl(bucket), mnt, "-o", options}, S3ServerEnvironment(), mnt,
                   "is not empty (it has 'local-file')");

  ObjfsMount::Options with;
  with.mountpoint = mnt;
  with.extra_options = "nonempty";
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), with);
  ASSERT_TRUE(mount);
  struct stat st {};
  EXPECT_NE(::stat((mnt + "/local-file").c_str(), &st), 0);  // hidden
  EXPECT_EQ(mount->Stop(), 0);
  EXPECT_EQ(ReadLocal(mnt + "/local-file"), "hidden by a mount");
}

TEST(MountOpsTest, HelpNamesTheEnvironmentAndUnmountVersionTheLibraries) {
  CommandResult help = RunObjfs({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* word : {"AWS_PROFILE", "AWS_CA_BUNDLE", "AWS_ACCESS_KEY_ID", "SSH_AUTH_SOCK",
                           "fusermount3 -u MOUNTPOINT", "objfs stats MOUNTPOINT"}) {
    EXPECT_TRUE(Contains(help.out, word)) << word;
  }
  CommandResult version = RunObjfs({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  for (const char* word : {"objfs ", "libfuse 3.", "libssh 0.", "libcurl ", "OpenSSL "}) {
    EXPECT_TRUE(Contains(version.out, word)) << word << "\n" << version.out;
  }
}

}  // namespace
}  // namespace objfs::testing
