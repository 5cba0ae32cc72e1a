// What a killed mount or another client leaves on the server, through real objfs mounts of RGW
// and sshd: a multipart upload (S3) or an upload's temporary file (SFTP) that objfs was killed
// in the middle of is cleared by the next mount over the same cache directory, while another
// client's upload in flight is left alone; and rmdir of a directory whose marker object holds
// data refuses rather than delete the data.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

struct HttpReply {
  std::string body;
  std::string status;
};

// A request to the shared RGW signed with the test credentials; `path` starts with the bucket.
// curl 7.88 signs the query as it is written: parameters in order, each with its "=".
HttpReply S3Request(const std::string& method, const std::string& path,
                    std::string_view payload = {}) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, payload);
  argv.insert(argv.end(), {"-X", method, "-w", "\n%{http_code}"});
  if (!payload.empty()) argv.insert(argv.end(), {"--data-binary", "@-"});
  argv.push_back(server.endpoint + path);
  CommandResult r = RunCommand(argv, payload);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  size_t nl = r.out.rfind('\n');
  if (nl == std::string::npos) return {r.out, ""};
  return {r.out.substr(0, nl), r.out.substr(nl + 1)};
}

// The text of the first <tag>...</tag> in `xml` at or after `from`; `from` moves past it.
std::string XmlField(const std::string& xml, const std::string& tag, size_t& from) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  size_t start = xml.find(open, from);
  if (start == std::string::npos) return "";
  start += open.size();
  size_t end = xml.find(close, start);
  if (end == std::string::npos) return "";
  from = end + close.size();
  return xml.substr(start, end - start);
}

// The UploadIds of the multipart uploads that ListMultipartUploads shows for `key`.
std::vector<std::string> UploadIdsOf(const std::string& bucket, const std::string& key) {
  HttpReply reply = S3Request("GET", "/" + bucket + "?prefix=" + key + "&uploads=");
  EXPECT_EQ(reply.status, "200") << reply.body;
  std::vector<std::string> ids;
  for (size_t at = reply.body.find("<Upload>"); at != std::string::npos;
       at = reply.body.find("<Upload>", at)) {
    size_t end = reply.body.find("</Upload>", at);
    if (end == std::string::npos) break;
    std::string upload = reply.body.substr(at, end - at);
    size_t from = 0;
    std::string listed_key = XmlField(upload, "Key", from);
    from = 0;
    std::string id = XmlField(upload, "UploadId", from);
    if (listed_key == key) ids.push_back(id);
    at = end;
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Copies `data` to `path` through the mount with cp(1), whose close at the end is where the
// upload happens. A process of its own: while a thread of this one is in close(2) on the mount,
// this process cannot start the commands that watch the server. Whatever cp says is fine: the
// test kills objfs during the upload.
std::thread CopyInBackground(const ScratchDir& scratch, const std::string& path,
                             const std::string& data) {
  const std::string source = scratch.path() + "/source";
  {
    std::ofstream out(source, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  EXPECT_EQ(fs::file_size(source), data.size());
  return std::thread([source, path] { RunCommand({"cp", source, path}); });
}

// Whether the mount set a file's data aside as unfinished (written, never closed).
bool SetAside(const ObjfsMount& mount) {
  std::error_code ec;
  return fs::directory_iterator(mount.cache_dir() + "/unfinished", ec) != fs::directory_iterator();
}

TEST(MountLeftoversTest, S3KilledDuringAMultipartUploadTheNextMountAbortsOnlyItsOwn) {
  const std::string bucket = CreateTestBucket(TestName());
  const std::string key = "big.bin";
  // Another client's upload of the same key, in flight all along.
  HttpReply created = S3Request("POST", "/" + bucket + "/" + key + "?uploads=");
  ASSERT_EQ(created.status, "200") << created.body;
  size_t from = 0;
  const std::string foreign_id = XmlField(created.body, "UploadId", from);
  ASSERT_FALSE(foreign_id.empty()) << created.body;

  ObjfsMount::Options options;
  // Many small parts, one at a time: an upload that lasts long enough to be killed in.
  options.extra_options = "multipart_threshold=5M,part_size=5M,parallel_parts=1";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string data = PseudoRandomBytes(160 << 20, 14);
  ScratchDir scratch;
  std::thread writer = CopyInBackground(scratch, mount->path() + "/" + key, data);

  // The upload is in progress once the server lists a second one for the key with a part in
  // it: objfs notes an upload in its journal once the server names it, before its first part
  // (killed in between, the upload is one nobody can name, which this test is not about).
  std::string dead_id;
  const bool started = WaitFor(120, [&] {
    for (const std::string& id : UploadIdsOf(bucket, key)) {
      if (id != foreign_id) dead_id = id;
    }
    return !dead_id.empty() && S3Request("GET", "/" + bucket + "/" + key + "?uploadId=" + dead_id)
                                       .body.find("<PartNumber>") != std::string::npos;
  });
  mount->KillAndWait(SIGKILL);
  writer.join();
  ASSERT_TRUE(started) << "no multipart upload of " << key << " appeared; log:\n" << mount->log();
  ASSERT_TRUE(Contains(UploadIdsOf(bucket, key), dead_id))
      << "the upload finished before objfs was killed";

  // The next mount over the same cache directory aborts its dead upload before it serves
  // anything, and leaves the other client's alone.
  ASSERT_TRUE(mount->Restart());
  std::vector<std::string> after_restart = UploadIdsOf(bucket, key);
  EXPECT_FALSE(Contains(after_restart, dead_id)) << "the dead upload was not aborted";
  EXPECT_TRUE(Contains(after_restart, foreign_id)) << "another client's upload was aborted";
  EXPECT_NE(mount->log().find("cleared 1 multipart upload left on the server"), std::string::npos)
      << mount->log();

  // Then the only upload of the key is the other client's, and nothing partial is visible:
  // killed while cp still wrote (the usual case, its parts going up as it writes) the file was
  // never closed, its data is set aside and there is no object; killed in its close, the next
  // mount uploaded the staged data.
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_EQ(UploadIdsOf(bucket, key), std::vector<std::string>{foreign_id});
  HttpReply object = S3Request("GET", "/" + bucket + "/" + key);
  if (SetAside(*mount)) {
    EXPECT_EQ(object.status, "404") << "object of " << object.body.size() << " bytes";
  } else {
    EXPECT_EQ(object.status, "200");
    EXPECT_TRUE(object.body == data) << "object of " << object.body.size() << " bytes";
  }
  EXPECT_EQ(S3Request("DELETE", "/" + bucket + "/" + key + "?uploadId=" + foreign_id).status,
            "204");
}

// A cache directory's staged writes belong to the bucket on the server they were written to: a
// bucket of that name on another endpoint would get them, over its objects. objfs cannot tell
// two servers from two spellings of one (here the same RGW as "localhost"), so the mount of the
// other endpoint is refused while the directory holds them; their own endpoint's mount uploads
// them, and once nothing is left the directory serves the other endpoint.
TEST(MountLeftoversTest, S3StagedWritesGoOnlyToTheEndpointTheyWereWrittenFor) {
  const std::string bucket = CreateTestBucket(TestName());
  ScratchDir scratch;
  ObjfsMount::Options options;
  options.extra_options = "writeback=600";  // f stays staged until the unmount
  options.cache_dir = scratch.path() + "/cache";
  std::unique_ptr<ObjfsMount> first = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(first);
  WriteFile(first->path() + "/f", "staged here");
  EXPECT_EQ(first->KillAndWait(SIGKILL), 128 + SIGKILL);
  ASSERT_EQ(S3Request("GET", "/" + bucket + "/f").status, "404");

  const std::string endpoint = SharedS3Server().endpoint;
  const size_t host = endpoint.find("127.0.0.1");
  ASSERT_NE(host, std::string::npos) << endpoint;
  const std::string other = std::string(endpoint).replace(host, 9, "LocalHost");
  const std::string mnt = scratch.path() + "/second";
  ASSERT_TRUE(fs::create_directory(mnt));
  ExpectMountFails({S3MountUrl(bucket), mnt, "-o",
                    S3ServerOptions() + ",endpoint=" + other + ",cache_dir=" + options.cache_dir},
                   S3ServerEnvironment(), mnt,
                   "cache directory '" + options.cache_dir + "' holds what a mount of s3://" +
                       bucket + "/ on " + endpoint + " left, not of s3://" + bucket + "/ on " +
                       std::string(endpoint).replace(host, 9, "localhost") +
                       ": mount it with -o endpoint=" + endpoint);
  EXPECT_EQ(S3Request("GET", "/" + bucket + "/f").status, "404");

  ASSERT_TRUE(first->Restart());
  EXPECT_EQ(ReadFile(first->path() + "/f"), "staged here");
  EXPECT_EQ(first->Stop(), 0);
  EXPECT_EQ(S3Request("GET", "/" + bucket + "/f").body, "staged here");

  ObjfsMount::Options switched = options;
  switched.extra_options += ",endpoint=" + other + "/";
  std::unique_ptr<ObjfsMount> second = ObjfsMount::Start(S3MountUrl(bucket), switched);
  ASSERT_TRUE(second);
  EXPECT_EQ(ReadFile(second->path() + "/f"), "staged here");
  EXPECT_EQ(second->Stop(), 0);
  std::ifstream store(options.cache_dir + "/.store");
  std::stringstream named;
  named << store.rdbuf();
  EXPECT_EQ(named.str(), "s3://" + bucket + "/\nserver " +
                             std::string(endpoint).replace(host, 9, "localhost") + "\n");
}

// The `.objfs-tmp-` files in `dir`.
std::vector<std::string> TempFilesIn(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.starts_with(".objfs-tmp-")) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(MountLeftoversTest, SftpKilledDuringAnUploadTheNextMountRemovesOnlyItsOwnTemporaryFile) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  // Another mount's upload in flight, under a name of the same form.
  const std::string foreign = ".objfs-tmp-0123456789abcdef";
  { std::ofstream(dir.path + "/" + foreign) << "another mount's upload"; }

  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  const std::string data = PseudoRandomBytes(256 << 20, 15);
  ScratchDir scratch;
  std::thread writer = CopyInBackground(scratch, mount->path() + "/big.bin", data);

  // The upload is in progress once its temporary file is on the server.
  std::string dead;
  const bool started = WaitFor(120, [&] {
    for (const std::string& name : TempFilesIn(dir.path)) {
      if (name != foreign) dead = name;
    }
    return !dead.empty();
  });
  mount->KillAndWait(SIGKILL);
  writer.join();
  ASSERT_TRUE(started) << "no temporary file appeared; log:\n" << mount->log();
  ASSERT_TRUE(fs::exists(dir.path + "/" + dead)) << "the upload finished before objfs was killed";

  ASSERT_TRUE(mount->Restart());
  EXPECT_FALSE(fs::exists(dir.path + "/" + dead)) << "the dead upload's file was not removed";
  EXPECT_EQ(ReadLocal(dir.path + "/" + foreign), "another mount's upload");
  EXPECT_NE(mount->log().find("cleared 1 temporary upload file left on the server"),
            std::string::npos)
      << mount->log();

  // No temporary file of this mount is left, and nothing partial is visible: never closed
  // (killed while cp wrote), the data is set aside and there is no file; killed in its close,
  // it was uploaded again under a new temporary name, renamed into place.
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_EQ(TempFilesIn(dir.path), std::vector<std::string>{foreign});
  if (SetAside(*mount)) {
    EXPECT_FALSE(fs::exists(dir.path + "/big.bin"));
  } else {
    EXPECT_TRUE(ReadLocal(dir.path + "/big.bin") == data);
  }
}

TEST(MountLeftoversTest, RmdirOfADirectoryWhoseMarkerHoldsDataIsRefused) {
  const std::string bucket = CreateTestBucket(TestName());
  // Another client stored data under the directory marker's name.
  ASSERT_EQ(S3Request("PUT", "/" + bucket + "/dir/", "data in the marker").status, "200");
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/dir";
  ASSERT_TRUE(fs::is_directory(path));

  EXPECT_EQ(::rmdir(path.c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY) << std::strerror(errno);
  EXPECT_EQ(mount->Stop(), 0);
  HttpReply marker = S3Request("GET", "/" + bucket + "/dir/");
  EXPECT_EQ(marker.status, "200");
  EXPECT_EQ(marker.body, "data in the marker");
}

}  // namespace
}  // namespace objfs::testing
