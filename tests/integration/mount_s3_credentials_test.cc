// Credentials the way the AWS SDKs find them, on real mounts of the test RGW: the instance
// metadata service (IMDSv2) and the container endpoint played by a loopback fake that hands out
// the RGW's own keys, the order of the chain, credential_process, ~/.aws/config's region and
// endpoint, a per-mount credentials file without HOME (an fstab mount), temporary credentials
// renewed while mounted, a key rotated with radosgw-admin under a mount, and the bucket's region
// learnt from the server when none is configured.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/s3/s3_store.h"
#include "tests/fixtures/credential_server.h"
#include "tests/fixtures/fault_proxy.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/own_s3_cluster.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A HOME of the test's own, so that no file of the machine's user is read.
class TempHome {
 public:
  TempHome() {
    std::string tmpl = (std::filesystem::path(::testing::TempDir()) / "objfs-home-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempHome() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& relative, const std::string& text) const {
    const std::filesystem::path file = std::filesystem::path(path_) / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
    return file.string();
  }

 private:
  std::string path_;
};

// The options that point at the RGW without giving it credentials.
std::string EndpointOptions() {
  const S3TestServer& server = SharedS3Server();
  return "endpoint=" + server.endpoint + ",path_style,region=" + server.region;
}

ObjfsMount::Options MountWith(std::map<std::string, std::string> env, std::string options) {
  ObjfsMount::Options o;
  o.use_shared_server = false;
  o.env = std::move(env);
  o.extra_options = std::move(options);
  return o;
}

// What the server holds at `key`, read with the test's own client (as the test server's user,
// or the one whose keys are given).
std::string ServerRead(const std::string& bucket, const std::string& key,
                       const std::string& access_key = "", const std::string& secret_key = "") {
  const S3TestServer& server = SharedS3Server();
  s3::S3StoreOptions o;
  o.bucket = bucket;
  o.endpoint = server.endpoint;
  o.region = server.region;
  o.credentials.access_key = access_key.empty() ? server.access_key : access_key;
  o.credentials.secret_key = secret_key.empty() ? server.secret_key : secret_key;
  auto store = s3::S3Store::Create(std::move(o));
  if (!store.ok()) return "<" + store.status().ToString() + ">";
  std::vector<std::byte> buf(1 << 16);
  auto n = (*store)->read(key, 0, buf, nullptr);
  if (!n.ok()) return "<" + n.status().ToString() + ">";
  return std::string(reinterpret_cast<const char*>(buf.data()), *n);
}

// Writes a file through the mount and checks the server got it once the mount is stopped.
void WriteThroughAndCheck(ObjfsMount& mount, const std::string& bucket, const std::string& name) {
  WriteFile(mount.path() + "/" + name, "data of " + name);
  EXPECT_EQ(mount.Stop(), 0) << mount.log();
  EXPECT_EQ(ServerRead(bucket, name), "data of " + name);
}

TEST(MountS3CredentialsTest, InstanceMetadataTokenThenRoleThenCredentials) {
  const S3TestServer& server = SharedS3Server();
  CredentialServer imds;
  imds.SetCredentials(server.access_key, server.secret_key, 600);
  TempHome home;
  const std::string bucket = CreateTestBucket("imds");
  auto mount = ObjfsMount::Start(
      S3MountUrl(bucket),
      MountWith({{"HOME", home.path()}, {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint()}},
                EndpointOptions()));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "a");
  EXPECT_THAT(mount->log(), HasSubstr("credentials: from instance metadata (role " +
                                      std::string(CredentialServer::kRole) + ")"));
  EXPECT_THAT(mount->log(), Not(HasSubstr(server.secret_key)));

  const std::vector<CredentialServer::Request> requests = imds.requests();
  ASSERT_GE(requests.size(), 3u);
  EXPECT_EQ(requests[0].method, "PUT");
  EXPECT_EQ(requests[0].path, "/latest/api/token");
  EXPECT_FALSE(requests[0].token_ttl.empty());
  EXPECT_EQ(requests[1].path, "/latest/meta-data/iam/security-credentials/");
  EXPECT_EQ(requests[2].path,
            "/latest/meta-data/iam/security-credentials/" + std::string(CredentialServer::kRole));
  for (size_t i = 1; i < requests.size(); ++i) {
    EXPECT_EQ(requests[i].imds_token, CredentialServer::kImdsToken) << requests[i].path;
  }
}

// A metadata service without session tokens (IMDSv1: an instance configured so, or another
// cloud's EC2-compatible service) answers the token request 403, 404 or 405: the role and the
// credentials are then asked without a token, as the SDKs do, unless
// AWS_EC2_METADATA_V1_DISABLED forbids it.
TEST(MountS3CredentialsTest, InstanceMetadataWithoutTokensIsAskedWithoutOne) {
  const S3TestServer& server = SharedS3Server();
  CredentialServer imds;
  imds.SetCredentials(server.access_key, server.secret_key, 600);
  imds.ServeImdsV1Only(403);
  TempHome home;
  const std::string bucket = CreateTestBucket("imdsv1");
  auto mount = ObjfsMount::Start(
      S3MountUrl(bucket),
      MountWith({{"HOME", home.path()}, {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint()}},
                EndpointOptions()));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "a");
  EXPECT_THAT(mount->log(), HasSubstr("credentials: from instance metadata (role " +
                                      std::string(CredentialServer::kRole) + ", IMDSv1)"));
  const std::vector<CredentialServer::Request> requests = imds.requests();
  ASSERT_GE(requests.size(), 3u);
  EXPECT_EQ(requests[0].path, "/latest/api/token");
  for (size_t i = 1; i < requests.size(); ++i) {
    EXPECT_EQ(requests[i].imds_token, "") << requests[i].path;
  }
  EXPECT_EQ(mount->Stop(), 0) << mount->log();

  // Forbidden: the source has nothing, and the mount says why.
  const std::string mountpoint = home.path() + "/refused";
  ASSERT_EQ(::mkdir(mountpoint.c_str(), 0700), 0);
  ExpectMountFails({S3MountUrl(bucket), mountpoint, "-o", EndpointOptions()},
                   {{"HOME", home.path()},
                    {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint()},
                    {"AWS_EC2_METADATA_V1_DISABLED", "true"}},
                   mountpoint, "AWS_EC2_METADATA_V1_DISABLED is true");
}

TEST(MountS3CredentialsTest, ChainOrderEnvironmentThenFilesThenContainerThenInstanceMetadata) {
  const S3TestServer& server = SharedS3Server();
  CredentialServer fake;
  fake.SetCredentials(server.access_key, server.secret_key, 600);
  TempHome home;
  const std::string bucket = CreateTestBucket("order");
  std::map<std::string, std::string> env = {
      {"HOME", home.path()},
      {"AWS_EC2_METADATA_SERVICE_ENDPOINT", fake.endpoint()},
      {"AWS_CONTAINER_CREDENTIALS_FULL_URI", fake.container_url()},
      {"AWS_ACCESS_KEY_ID", server.access_key},
      {"AWS_SECRET_ACCESS_KEY", server.secret_key}};
  home.Write(".aws/credentials", "[default]\naws_access_key_id = " + server.access_key +
                                     "\naws_secret_access_key = " + server.secret_key + "\n");

  // The environment first: neither fake service is asked.
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), MountWith(env, EndpointOptions()));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "env");
  EXPECT_THAT(mount->log(), HasSubstr("credentials: from the environment"));
  EXPECT_TRUE(fake.requests().empty());

  // Then the shared files.
  env.erase("AWS_ACCESS_KEY_ID");
  env.erase("AWS_SECRET_ACCESS_KEY");
  mount = ObjfsMount::Start(S3MountUrl(bucket), MountWith(env, EndpointOptions()));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "files");
  EXPECT_THAT(mount->log(), HasSubstr("credentials: from profile 'default' in " + home.path()));
  EXPECT_TRUE(fake.requests().empty());

  // Then the container endpoint, before the instance metadata.
  std::filesystem::remove(home.path() + "/.aws/credentials");
  mount = ObjfsMount::Start(S3MountUrl(bucket), MountWith(env, EndpointOptions()));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "container");
  EXPECT_THAT(mount->log(), HasSubstr("credentials: from container credentials at"));
  for (const auto& r : fake.requests()) EXPECT_EQ(r.path, CredentialServer::kContainerPath);

  // -o credentials= picks one source over the order.
  mount = ObjfsMount::Start(S3MountUrl(bucket),
                            MountWith(env, EndpointOptions() + ",credentials=instance_metadata"));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "forced");
  EXPECT_THAT(mount->log(), HasSubstr("credentials: from instance metadata"));
}

TEST(MountS3CredentialsTest, ContainerAuthorizationTokenFromItsFile) {
  const S3TestServer& server = SharedS3Server();
  CredentialServer ecs;
  ecs.SetCredentials(server.access_key, server.secret_key, 600);
  ecs.RequireContainerToken("Bearer pod-token-1");
  TempHome home;
  const std::string bucket = CreateTestBucket("ecs");
  std::map<std::string, std::string> env = {
      {"HOME", home.path()},
      {"AWS_EC2_METADATA_DISABLED", "true"},
      {"AWS_CONTAINER_CREDENTIALS_FULL_URI", ecs.container_url()},
      {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer overridden-by-the-file"},
      {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", home.Write("token", "Bearer pod-token-1\n")}};
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), MountWith(env, EndpointOptions()));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "a");
  ASSERT_FALSE(ecs.requests().empty());
  EXPECT_EQ(ecs.requests().front().authorization, "Bearer pod-token-1");

  // A token the endpoint refuses: the mount fails and says which source and why.
  home.Write("token", "Bearer stale");
  const std::string mountpoint = home.path() + "/mnt";
  std::filesystem::create_directories(mountpoint);
  ExpectMountFails({S3MountUrl(bucket), mountpoint, "-o", EndpointOptions()}, env, mountpoint,
                   "container credentials at " + ecs.container_url() + ": HTTP 401");
}

TEST(MountS3CredentialsTest, TemporaryCredentialsAreRenewedWhileMounted) {
  const S3TestServer& server = SharedS3Server();
  CredentialServer imds;
  // Six seconds of life: renewed at half of it, about every 3 s.
  imds.SetCredentials(server.access_key, server.secret_key, 6);
  TempHome home;
  const std::string bucket = CreateTestBucket("renew");
  auto mount = ObjfsMount::Start(
      S3MountUrl(bucket),
      MountWith({{"HOME", home.path()}, {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint()}},
                EndpointOptions()));
  ASSERT_TRUE(mount);
  int written = 0;
  ASSERT_TRUE(WaitFor(
      60,
      [&] {
        const std::string name = "f" + std::to_string(written++);
        WriteFile(mount->path() + "/" + name, name);
        EXPECT_EQ(ReadFile(mount->path() + "/" + name), name);
        return imds.credential_fetches() >= 3;
      },
      std::chrono::milliseconds(500)))
      << mount->log();
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_THAT(mount->log(), HasSubstr("expire at"));
  EXPECT_THAT(mount->log(), HasSubstr("now from instance metadata"));
  EXPECT_THAT(mount->log(), Not(HasSubstr("EACCES")));
  EXPECT_EQ(ServerRead(bucket, "f0"), "f0");
}

TEST(MountS3CredentialsTest, CredentialProcessScript) {
  const S3TestServer& server = SharedS3Server();
  TempHome home;
  const std::string script =
      home.Write("creds.sh",
                 "#!/bin/sh\nprintf '{\"Version\": 1, \"AccessKeyId\": \"%s\", "
                 "\"SecretAccessKey\": \"%s\"}' \"$1\" \"$2\"\n");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  home.Write(".aws/config", "[profile scripted]\ncredential_process = " + script + " " +
                                server.access_key + " " + server.secret_key + "\n");
  const std::string bucket = CreateTestBucket("process");
  auto mount = ObjfsMount::Start(
      S3MountUrl(bucket), MountWith({{"HOME", home.path()}, {"AWS_EC2_METADATA_DISABLED", "true"}},
                                    EndpointOptions() + ",profile=scripted"));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "a");
  EXPECT_THAT(mount->log(), HasSubstr("profile 'scripted'"));
  EXPECT_THAT(mount->log(), HasSubstr("(credential_process)"));
}

TEST(MountS3CredentialsTest, RegionEndpointAndAddressingFromTheConfigFile) {
  const S3TestServer& server = SharedS3Server();
  TempHome home;
  home.Write(".aws/config",
             "[default]\nregion = eu-central-1\nservices = local\n"
             "s3 =\n  addressing_style = path\n"
             "[services local]\ns3 =\n  endpoint_url = " +
                 server.endpoint + "\n");
  home.Write(".aws/credentials", "[default]\naws_access_key_id = " + server.access_key +
                                     "\naws_secret_access_key = " + server.secret_key + "\n");
  const std::string bucket = CreateTestBucket("config");
  // No endpoint, region or addressing option: all three from ~/.aws/config.
  auto mount = ObjfsMount::Start(
      S3MountUrl(bucket),
      MountWith({{"HOME", home.path()}, {"AWS_EC2_METADATA_DISABLED", "true"}}, ""));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "a");
  EXPECT_THAT(mount->log(),
              HasSubstr("s3: endpoint " + server.endpoint + ", region eu-central-1\n"));
}

TEST(MountS3CredentialsTest, PerMountCredentialsFileWithoutHome) {
  // An fstab mount: mount(8) gives no HOME; the keys are in a file named on the line.
  const S3TestServer& server = SharedS3Server();
  TempHome dir;
  const std::string file =
      dir.Write("objfs.creds", "[backup]\naws_access_key_id = " + server.access_key +
                                   "\naws_secret_access_key = " + server.secret_key + "\n");
  const std::string bucket = CreateTestBucket("fstab");
  auto mount = ObjfsMount::Start(
      S3MountUrl(bucket),
      MountWith({{"HOME", ""}, {"AWS_EC2_METADATA_DISABLED", "true"}},
                EndpointOptions() + ",credentials_file=" + file + ",profile=backup"));
  ASSERT_TRUE(mount);
  WriteThroughAndCheck(*mount, bucket, "a");
  EXPECT_THAT(mount->log(), HasSubstr("credentials: from profile 'backup' in " + file));
}

// radosgw-admin against the test cluster; returns its exit status and output for messages.
CommandResult RadosgwAdmin(std::vector<std::string> args) {
  std::vector<std::string> argv = {"radosgw-admin", "-c", SharedS3Server().dir + "/ceph.conf"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

TEST(MountS3CredentialsTest, KeyRotatedWithRadosgwAdminWhileMounted) {
  const std::string suffix = UniqueSuffix();
  const std::string uid = "rotate" + suffix;
  const std::string key1 = "ROTATEONE" + suffix;
  const std::string key2 = "ROTATETWO" + suffix;
  CommandResult r = RadosgwAdmin({"user", "create", "--uid=" + uid, "--display-name=" + uid,
                                  "--access-key=" + key1, "--secret=secret-one"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  TempHome home;
  const auto write_keys = [&](const std::string& key, const std::string& secret) {
    home.Write(".aws/credentials", "[default]\naws_access_key_id = " + key +
                                       "\naws_secret_access_key = " + secret + "\n");
  };
  write_keys(key1, "secret-one");
  // The user's own bucket, made through a first mount.
  const std::string bucket = "rotate" + suffix;
  std::map<std::string, std::string> env = {{"HOME", home.path()},
                                            {"AWS_EC2_METADATA_DISABLED", "true"}};
  {
    s3::S3StoreOptions o;
    o.bucket = bucket;
    o.endpoint = SharedS3Server().endpoint;
    o.region = SharedS3Server().region;
    o.credentials.access_key = key1;
    o.credentials.secret_key = "secret-one";
    auto store = s3::S3Store::Create(std::move(o));
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->CreateBucket().ok());
  }
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), MountWith(env, EndpointOptions()));
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/before", "before");
  EXPECT_EQ(ReadFile(mount->path() + "/before"), "before");

  // Rotate: a new key in the file, the old one removed from the server.
  r = RadosgwAdmin({"key", "create", "--uid=" + uid, "--key-type=s3", "--access-key=" + key2,
                    "--secret=secret-two"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  write_keys(key2, "secret-two");
  r = RadosgwAdmin({"key", "rm", "--uid=" + uid, "--key-type=s3", "--access-key=" + key1});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  // The next requests meet InvalidAccessKeyId, resolve the chain again and succeed.
  WriteFile(mount->path() + "/after", "after");
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_THAT(mount->log(), HasSubstr("the server refused the ones from profile 'default'"));
  EXPECT_THAT(mount->log(), Not(HasSubstr("secret-two")));
  auto remount = ObjfsMount::Start(S3MountUrl(bucket), MountWith(env, EndpointOptions()));
  ASSERT_TRUE(remount);
  EXPECT_EQ(ReadFile(remount->path() + "/after"), "after");
  EXPECT_EQ(ReadFile(remount->path() + "/before"), "before");
  EXPECT_EQ(remount->Stop(), 0);
}

// A profile with role_arn and source_profile assumes the role through RGW's STS (enabled in the
// test RGW) with the source profile's keys, and the mount's requests carry the role's
// temporary credentials: the role may only read, so reading works and a write is refused,
// where the source profile's own keys (the bucket's owner) could write.
TEST(MountS3CredentialsTest, RoleArnWithASourceProfileMountsWithTheRolesCredentials) {
  const S3TestServer& server = SharedS3Server();
  const std::string suffix = UniqueSuffix();
  const std::string role = "objfs-reader" + suffix;
  const std::string bucket = CreateTestBucket("role");
  CommandResult r = RadosgwAdmin(
      {"role", "create", "--role-name=" + role, "--path=/",
       R"(--assume-role-policy-doc={"Version": "2012-10-17", "Statement": [{"Effect": "Allow",)"
       R"( "Principal": {"AWS": ["arn:aws:iam:::user/objfs-test"]},)"
       R"( "Action": ["sts:AssumeRole"]}]})"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RadosgwAdmin({"role-policy", "put", "--role-name=" + role, "--policy-name=read",
                    R"(--policy-doc={"Version": "2012-10-17", "Statement": [{"Effect": "Allow",)"
                    R"( "Action": ["s3:ListBucket", "s3:GetObject"], "Resource": ["arn:aws:s3:::)" +
                        bucket + R"(", "arn:aws:s3:::)" + bucket + R"(/*"]}]})"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  TempHome home;
  home.Write(".aws/credentials", "[owner]\naws_access_key_id = " + server.access_key +
                                     "\naws_secret_access_key = " + server.secret_key + "\n");
  home.Write(".aws/config", "[profile reader]\nrole_arn = arn:aws:iam:::role/" + role +
                                "\nsource_profile = owner\nservices = local\n"
                                "[services local]\nsts =\n  endpoint_url = " +
                                server.endpoint + "\n");
  const std::map<std::string, std::string> env = {{"HOME", home.path()},
                                                  {"AWS_EC2_METADATA_DISABLED", "true"}};
  auto owner =
      ObjfsMount::Start(S3MountUrl(bucket), MountWith(env, EndpointOptions() + ",profile=owner"));
  ASSERT_TRUE(owner);
  WriteThroughAndCheck(*owner, bucket, "seed");

  auto mount =
      ObjfsMount::Start(S3MountUrl(bucket), MountWith(env, EndpointOptions() + ",profile=reader"));
  ASSERT_TRUE(mount);
  EXPECT_THAT(mount->log(), HasSubstr("(role arn:aws:iam:::role/" + role + " via profile 'owner'"));
  EXPECT_THAT(mount->log(), HasSubstr("temporary"));
  EXPECT_EQ(ReadFile(mount->path() + "/seed"), "data of seed");
  const int fd = ::open((mount->path() + "/denied").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::write(fd, "no", 2), 2);
  EXPECT_NE(::close(fd), 0) << "the role may not write, yet the upload succeeded";
  mount->Stop();  // (exits 1: the refused file stays in cache_dir)
  EXPECT_THAT(mount->log(), HasSubstr("PUT s3://" + bucket + "/denied: AccessDenied"));
  EXPECT_THAT(ServerRead(bucket, "denied"), HasSubstr("NotFound"));
  EXPECT_THAT(mount->log(), Not(HasSubstr(server.secret_key)));
}

TEST(MountS3CredentialsTest, UserAllowedOnlyAPrefixMountsThatPrefix) {
  // The policy (set with PutBucketPolicy by the bucket's owner): the user may list the bucket
  // only under photos/, and read, write and delete only objects under photos/.
  const S3TestServer& server = SharedS3Server();
  const std::string suffix = UniqueSuffix();
  const std::string uid = "photos" + suffix;
  const std::string key = "PHOTOSONLY" + suffix;
  CommandResult r = RadosgwAdmin({"user", "create", "--uid=" + uid, "--display-name=" + uid,
                                  "--access-key=" + key, "--secret=photos-secret"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bucket = CreateTestBucket("prefix");
  const std::string policy = R"({"Version": "2012-10-17", "Statement": [)"
                             R"({"Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam:::user/)" +
                             uid +
                             R"("]},)"
                             R"( "Action": ["s3:ListBucket"], "Resource": ["arn:aws:s3:::)" +
                             bucket +
                             R"("],)"
                             R"( "Condition": {"StringLike": {"s3:prefix": ["photos/*"]}}},)"
                             R"({"Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam:::user/)" +
                             uid +
                             R"("]},)"
                             R"( "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],)"
                             R"( "Resource": ["arn:aws:s3:::)" +
                             bucket + R"(/photos/*"]}]})";
  std::vector<std::string> argv = SignedCurlArgs(server, policy);
  argv.insert(argv.end(), {"-X", "PUT", "-w", "\n%{http_code}", "--data-binary", "@-",
                           server.endpoint + "/" + bucket + "?policy="});
  r = RunCommand(argv, policy);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(r.out.ends_with("\n200") || r.out.ends_with("\n204")) << r.out;

  TempHome home;
  const std::map<std::string, std::string> env = {{"HOME", home.path()},
                                                  {"AWS_EC2_METADATA_DISABLED", "true"},
                                                  {"AWS_ACCESS_KEY_ID", key},
                                                  {"AWS_SECRET_ACCESS_KEY", "photos-secret"}};
  auto mount = ObjfsMount::Start(S3MountUrl(bucket, "photos"), MountWith(env, EndpointOptions()));
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/a", "in photos");
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  // The object is the user's (S3 gives the bucket's owner no access to it without an ACL).
  EXPECT_EQ(ServerRead(bucket, "photos/a", key, "photos-secret"), "in photos");

  // Elsewhere in the bucket the check is denied, and says for what, not that the keys are bad.
  const std::string mountpoint = home.path() + "/mnt";
  std::filesystem::create_directories(mountpoint);
  ExpectMountFails({S3MountUrl(bucket, "music"), mountpoint, "-o", EndpointOptions()}, env,
                   mountpoint, "the user needs s3:ListBucket on arn:aws:s3:::" + bucket);
  CommandResult whole = RunObjfs({S3MountUrl(bucket), mountpoint, "-o", EndpointOptions()}, env);
  EXPECT_NE(whole.exit_code, 0);
  EXPECT_THAT(whole.err, HasSubstr("ListObjectsV2"));
  EXPECT_THAT(whole.err, Not(HasSubstr("check the access key")));
}

// On a server that answers a wrong secret with SignatureDoesNotMatch (AWS, MinIO; here an RGW
// without STS, in a cluster of the test's own), a user denied both the mount's listing and
// ListBuckets (as a user scoped to other buckets is, on AWS) is told what its policy lacks, not
// that its keys may be wrong; with a wrong secret, it is told to check the keys.
TEST(MountS3CredentialsTest, ADenialWhereWrongSecretsAreNamedBlamesThePolicyNotTheKeys) {
  OwnS3Cluster cluster({"OBJFS_RGW_STS=off"});
  ASSERT_TRUE(cluster.ok());
  const S3TestServer& server = cluster.server();
  const std::string bucket = "denied" + UniqueSuffix();
  ASSERT_EQ(cluster.Request("PUT", "/" + bucket), "200");
  CommandResult r = cluster.Admin({"user", "create", "--uid=scoped", "--display-name=scoped",
                                   "--access-key=SCOPED", "--secret=scoped-secret"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = cluster.Admin({"caps", "add", "--uid=objfs-test", "--caps=user-policy=*"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // IAM PutUserPolicy: the user may not list its buckets (s3:ListAllMyBuckets).
  const std::string body =
      "Action=PutUserPolicy&Version=2010-05-08&UserName=scoped&PolicyName=no-buckets"
      "&PolicyDocument=%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%7B%22Effect"
      "%22%3A%22Deny%22%2C%22Action%22%3A%5B%22s3%3AListAllMyBuckets%22%5D%2C%22Resource%22%3A"
      "%22%2A%22%7D%5D%7D";
  std::vector<std::string> argv = SignedCurlArgs(server, body);
  argv.insert(argv.end(), {"-H", "content-type: application/x-www-form-urlencoded", "-w",
                           "\n%{http_code}", "--data-binary", "@-", server.endpoint + "/"});
  r = RunCommand(argv, body);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(r.out.ends_with("\n200")) << r.out;

  TempHome home;
  const std::string mountpoint = home.path() + "/mnt";
  std::filesystem::create_directories(mountpoint);
  const std::vector<std::string> args = {
      "s3://" + bucket, mountpoint, "-o",
      "endpoint=" + server.endpoint + ",path_style,region=" + server.region};
  std::map<std::string, std::string> env = {{"HOME", home.path()},
                                            {"AWS_EC2_METADATA_DISABLED", "true"},
                                            {"AWS_ACCESS_KEY_ID", "SCOPED"},
                                            {"AWS_SECRET_ACCESS_KEY", "scoped-secret"}};
  ExpectMountFails(args, env, mountpoint, "the user needs s3:ListBucket on arn:aws:s3:::" + bucket);
  CommandResult policy = RunObjfs(args, env);
  EXPECT_THAT(policy.err, Not(HasSubstr("secret is wrong"))) << policy.err;
  EXPECT_THAT(policy.err, Not(HasSubstr("scoped-secret")));

  env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret";
  ExpectMountFails(args, env, mountpoint, "check the access key and secret");
}

// A proxy in front of the test server playing one in another region: its answers to a HEAD of
// `bucket` name `eu-test-1`, with the status `head_status` (0: the server's own).
std::unique_ptr<FaultProxy> RegionProxy(const std::string& bucket, int head_status) {
  const S3TestServer& server = SharedS3Server();
  auto proxy = std::make_unique<FaultProxy>("127.0.0.1", server.port());
  proxy->AddResponseHeader("HEAD /" + bucket + " ", "x-amz-bucket-region: eu-test-1", head_status);
  return proxy;
}

// Mounts `bucket` through `proxy` with the test server's keys, `home` and `env` (nothing else
// configured), writes a file through it and checks the server has it. `log`: what objfs said.
bool WriteThroughRegionProxy(const FaultProxy& proxy, const std::string& bucket,
                             const TempHome& home, std::map<std::string, std::string> env,
                             std::string* log) {
  const S3TestServer& server = SharedS3Server();
  env.insert({{"HOME", home.path()},
              {"AWS_EC2_METADATA_DISABLED", "true"},
              {"AWS_ACCESS_KEY_ID", server.access_key},
              {"AWS_SECRET_ACCESS_KEY", server.secret_key}});
  auto mount =
      ObjfsMount::Start(S3MountUrl(bucket),
                        MountWith(std::move(env), "endpoint=" + proxy.endpoint() + ",path_style"));
  if (!mount) return false;
  WriteThroughAndCheck(*mount, bucket, "a");
  *log = mount->log();
  return true;
}

// A mount with no region configured (no option, variable or profile) through a proxy that plays
// a server in another region: its answer to the HEAD of the bucket names `eu-test-1`, with the
// status `head_status` (0: the server's own). The mount must sign everything after that HEAD
// for the bucket's region, and say where the region came from.
void ExpectTheBucketsRegionIsLearnt(int head_status) {
  const std::string bucket = CreateTestBucket("region");
  std::unique_ptr<FaultProxy> proxy = RegionProxy(bucket, head_status);
  TempHome home;
  std::string log;
  ASSERT_TRUE(WriteThroughRegionProxy(*proxy, bucket, home, {}, &log));
  EXPECT_THAT(log, HasSubstr("region eu-test-1 (the bucket's, from x-amz-bucket-region)"));
  // One request, the HEAD that asked, signed for the default region; everything else for the
  // bucket's (RGW checks a signature in whatever region it is made for).
  EXPECT_EQ(proxy->requests_seen("HEAD /" + bucket + " "), 1);
  EXPECT_EQ(proxy->requests_containing("/us-east-1/s3/aws4_request"), 1);
  EXPECT_GE(proxy->requests_containing("/eu-test-1/s3/aws4_request"), 2);  // the list, the PUT
}

TEST(MountS3CredentialsTest, NoRegionConfiguredSignsForTheBucketsRegion) {
  ExpectTheBucketsRegionIsLearnt(0);
}

TEST(MountS3CredentialsTest, ARedirectNamingTheBucketsRegionIsFollowed) {
  // AWS answers a HEAD of a bucket in another region with 301 Moved Permanently.
  ExpectTheBucketsRegionIsLearnt(301);
}

TEST(MountS3CredentialsTest, AConfiguredRegionIsNotAskedFor) {
  const std::string bucket = CreateTestBucket("region");
  std::unique_ptr<FaultProxy> proxy = RegionProxy(bucket, 301);
  TempHome home;
  std::string log;
  ASSERT_TRUE(
      WriteThroughRegionProxy(*proxy, bucket, home, {{"AWS_REGION", "eu-central-1"}}, &log));
  EXPECT_THAT(log, HasSubstr("region eu-central-1\n"));
  EXPECT_EQ(proxy->requests_seen("HEAD /" + bucket + " "), 0);
  EXPECT_EQ(proxy->requests_containing("/eu-test-1/s3/aws4_request"), 0);
}

}  // namespace
}  // namespace objfs::testing
