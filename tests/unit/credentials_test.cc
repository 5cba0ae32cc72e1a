#include "backend/s3/credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace objfs::s3 {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr std::string_view kNoCredentials =
    "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or create "
    "~/.aws/credentials";

// An environment made of a map, so tests never touch the process environment.
class FakeEnv {
 public:
  // No unit test asks a real instance metadata service.
  FakeEnv() { vars_["AWS_EC2_METADATA_DISABLED"] = "true"; }
  FakeEnv& Set(const std::string& name, const std::string& value) {
    vars_[name] = value;
    return *this;
  }
  GetEnvFn Fn() const {
    return [this](const char* name) -> const char* {
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    };
  }

 private:
  std::map<std::string, std::string> vars_;
};

// A fresh directory under the test temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::path(::testing::TempDir()) / "objfs-cred-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

  std::string Write(const std::string& relative, const std::string& text) const {
    const std::filesystem::path file = path_ / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

constexpr std::string_view kTwoProfiles =
    "[default]\n"
    "aws_access_key_id = AKIDDEFAULT\n"
    "aws_secret_access_key = secretdefault\n"
    "\n"
    "[work]\n"
    "aws_access_key_id=AKIDWORK\n"
    "aws_secret_access_key=secretwork\n"
    "aws_session_token=tokenwork\n";

// --- ParseCredentialsFile ---------------------------------------------------------------------

TEST(ParseCredentialsFileTest, ReadsTheNamedProfile) {
  auto creds = ParseCredentialsFile(kTwoProfiles, "work", "/f");
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "AKIDWORK");
  EXPECT_EQ(creds->secret_key, "secretwork");
  EXPECT_EQ(creds->session_token, "tokenwork");

  auto def = ParseCredentialsFile(kTwoProfiles, "default", "/f");
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->access_key, "AKIDDEFAULT");
  EXPECT_EQ(def->secret_key, "secretdefault");
  EXPECT_EQ(def->session_token, "");
}

TEST(ParseCredentialsFileTest, IgnoresCommentsWhitespaceAndKeyCase) {
  const std::string text =
      "# a comment\n"
      "; another = comment\n"
      "   [  default  ]   \n"
      "\t# indented comment\n"
      "  AWS_Access_Key_ID   =   AKID  \n"
      "\tAws_Secret_Access_Key\t=\tse=cret\t\n"
      "region = us-east-1\n";
  auto creds = ParseCredentialsFile(text, "default", "/f");
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "AKID");
  EXPECT_EQ(creds->secret_key, "se=cret");  // only the first '=' separates
}

TEST(ParseCredentialsFileTest, SkipsMalformedLines) {
  const std::string text =
      "garbage without equals\n"
      "[default]\n"
      "this line is not a key\n"
      "aws_access_key_id = AKID\n"
      "=\n"
      "aws_secret_access_key = SECRET\n";
  auto creds = ParseCredentialsFile(text, "default", "/f");
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "AKID");
  EXPECT_EQ(creds->secret_key, "SECRET");
}

TEST(ParseCredentialsFileTest, BrokenSectionHeaderDoesNotLendKeysToThePreviousProfile) {
  const std::string text =
      "[default]\n"
      "aws_access_key_id = AKID\n"
      "aws_secret_access_key = SECRET\n"
      "[other\n"
      "aws_secret_access_key = NOT_DEFAULTS\n";
  auto creds = ParseCredentialsFile(text, "default", "/f");
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->secret_key, "SECRET");
}

TEST(ParseCredentialsFileTest, HandlesCrlfLineEndings) {
  const std::string text =
      "[default]\r\n"
      "aws_access_key_id = AKID\r\n"
      "aws_secret_access_key = SECRET\r\n"
      "aws_session_token = TOKEN\r\n";
  auto creds = ParseCredentialsFile(text, "default", "/f");
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "AKID");
  EXPECT_EQ(creds->secret_key, "SECRET");
  EXPECT_EQ(creds->session_token, "TOKEN");
}

TEST(ParseCredentialsFileTest, LastLineWithoutNewlineCounts) {
  auto creds = ParseCredentialsFile("[p]\naws_access_key_id=A\naws_secret_access_key=S", "p", "/f");
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->secret_key, "S");
}

TEST(ParseCredentialsFileTest, MissingProfileNamesProfileAndFile) {
  auto creds = ParseCredentialsFile(kTwoProfiles, "nope", "/home/u/.aws/credentials");
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), HasSubstr("'nope'"));
  EXPECT_THAT(creds.status().message(), HasSubstr("/home/u/.aws/credentials"));
}

TEST(ParseCredentialsFileTest, ProfileWithoutSecretIsAnError) {
  auto creds = ParseCredentialsFile("[p]\naws_access_key_id = A\n", "p", "/f");
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), HasSubstr("aws_secret_access_key"));
  EXPECT_THAT(creds.status().message(), HasSubstr("'p'"));
  EXPECT_THAT(creds.status().message(), HasSubstr("/f"));
}

TEST(ParseCredentialsFileTest, ProfileWithoutKeyIdIsAnError) {
  auto creds = ParseCredentialsFile("[p]\naws_secret_access_key = S\n", "p", "/f");
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), HasSubstr("aws_access_key_id"));
}

TEST(ParseCredentialsFileTest, KeysOfOtherProfilesAreNotUsed) {
  const std::string text =
      "[a]\naws_access_key_id = A\naws_secret_access_key = SA\n"
      "[b]\naws_access_key_id = B\n";
  auto creds = ParseCredentialsFile(text, "b", "/f");
  EXPECT_FALSE(creds.ok());
}

// --- LoadCredentials --------------------------------------------------------------------------

TEST(LoadCredentialsTest, EnvironmentWinsOverFile) {
  TempDir dir;
  const std::string file = dir.Write("credentials", std::string(kTwoProfiles));
  FakeEnv env;
  env.Set("AWS_ACCESS_KEY_ID", "ENVID")
      .Set("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
      .Set("AWS_SESSION_TOKEN", "ENVTOKEN")
      .Set("AWS_SHARED_CREDENTIALS_FILE", file)
      .Set("AWS_PROFILE", "work");
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "ENVID");
  EXPECT_EQ(creds->secret_key, "ENVSECRET");
  EXPECT_EQ(creds->session_token, "ENVTOKEN");
}

// -o profile= is a choice made for this mount, as the AWS CLI's --profile: it beats keys
// that happen to be in the environment.
TEST(LoadCredentialsTest, AnExplicitProfileWinsOverTheEnvironment) {
  TempDir dir;
  FakeEnv env;
  env.Set("AWS_ACCESS_KEY_ID", "ENVID")
      .Set("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
      .Set("AWS_SHARED_CREDENTIALS_FILE", dir.Write("credentials", std::string(kTwoProfiles)));
  auto creds = LoadCredentials("default", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "AKIDDEFAULT");
  EXPECT_EQ(creds->session_token, "");
}

TEST(LoadCredentialsTest, EnvironmentWithoutTokenHasEmptyToken) {
  FakeEnv env;
  env.Set("AWS_ACCESS_KEY_ID", "ENVID").Set("AWS_SECRET_ACCESS_KEY", "ENVSECRET");
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->session_token, "");
}

TEST(LoadCredentialsTest, OnlyKeyIdSetNamesTheMissingSecret) {
  TempDir dir;
  FakeEnv env;
  env.Set("AWS_ACCESS_KEY_ID", "ENVID")
      .Set("AWS_SHARED_CREDENTIALS_FILE", dir.Write("credentials", std::string(kTwoProfiles)));
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), HasSubstr("AWS_SECRET_ACCESS_KEY is not"));
}

TEST(LoadCredentialsTest, OnlySecretSetNamesTheMissingKeyId) {
  FakeEnv env;
  env.Set("AWS_SECRET_ACCESS_KEY", "ENVSECRET");
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), HasSubstr("AWS_ACCESS_KEY_ID is not"));
}

TEST(LoadCredentialsTest, SharedFileDefaultProfile) {
  TempDir dir;
  FakeEnv env;
  env.Set("AWS_SHARED_CREDENTIALS_FILE", dir.Write("creds.ini", std::string(kTwoProfiles)));
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "AKIDDEFAULT");
}

TEST(LoadCredentialsTest, AwsProfileSelectsProfile) {
  TempDir dir;
  FakeEnv env;
  env.Set("AWS_SHARED_CREDENTIALS_FILE", dir.Write("creds.ini", std::string(kTwoProfiles)))
      .Set("AWS_PROFILE", "work");
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "AKIDWORK");
  EXPECT_EQ(creds->session_token, "tokenwork");
}

TEST(LoadCredentialsTest, ArgumentOverridesAwsProfile) {
  TempDir dir;
  FakeEnv env;
  env.Set("AWS_SHARED_CREDENTIALS_FILE", dir.Write("creds.ini", std::string(kTwoProfiles)))
      .Set("AWS_PROFILE", "work");
  auto creds = LoadCredentials("default", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "AKIDDEFAULT");
}

TEST(LoadCredentialsTest, HomeAwsCredentialsIsTheDefaultFile) {
  TempDir dir;
  dir.Write(".aws/credentials", "[default]\naws_access_key_id=HOMEID\naws_secret_access_key=S\n");
  FakeEnv env;
  env.Set("HOME", dir.path().string());
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "HOMEID");
}

TEST(LoadCredentialsTest, SharedFileVariableOverridesHome) {
  TempDir dir;
  dir.Write(".aws/credentials", "[default]\naws_access_key_id=HOMEID\naws_secret_access_key=S\n");
  FakeEnv env;
  env.Set("HOME", dir.path().string())
      .Set(
          "AWS_SHARED_CREDENTIALS_FILE",
          dir.Write("elsewhere", "[default]\naws_access_key_id=FILEID\naws_secret_access_key=S\n"));
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "FILEID");
}

TEST(LoadCredentialsTest, CrlfFileOnDisk) {
  TempDir dir;
  FakeEnv env;
  env.Set("AWS_SHARED_CREDENTIALS_FILE",
          dir.Write("creds", "[default]\r\naws_access_key_id=A\r\naws_secret_access_key=S\r\n"));
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "A");
  EXPECT_EQ(creds->secret_key, "S");
}

TEST(LoadCredentialsTest, MissingProfileInFileNamesProfileAndFile) {
  TempDir dir;
  const std::string file = dir.Write("creds.ini", std::string(kTwoProfiles));
  FakeEnv env;
  env.Set("AWS_SHARED_CREDENTIALS_FILE", file).Set("AWS_PROFILE", "absent");
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), HasSubstr("'absent'"));
  EXPECT_THAT(creds.status().message(), HasSubstr(file));
}

TEST(LoadCredentialsTest, NoEnvironmentAndNoFileExplainsWhatToDo) {
  TempDir dir;  // a HOME without .aws/credentials
  FakeEnv env;
  env.Set("HOME", dir.path().string());
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), StartsWith(kNoCredentials));
  // Each source says why it had none.
  EXPECT_THAT(creds.status().message(), HasSubstr("environment: AWS_ACCESS_KEY_ID is not set"));
  EXPECT_THAT(creds.status().message(), HasSubstr("web identity:"));
  EXPECT_THAT(creds.status().message(), HasSubstr("container:"));
  EXPECT_THAT(creds.status().message(),
              HasSubstr("instance metadata: AWS_EC2_METADATA_DISABLED is true"));
}

TEST(LoadCredentialsTest, NamedFileThatDoesNotExist) {
  TempDir dir;
  const std::string missing = (dir.path() / "missing").string();
  FakeEnv env;
  env.Set("AWS_SHARED_CREDENTIALS_FILE", missing);
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), StartsWith(kNoCredentials));
  EXPECT_THAT(creds.status().message(), HasSubstr(missing));
}

TEST(LoadCredentialsTest, WithoutHomeTheFilesAreThePasswordDatabaseUsers) {
  // mount(8) runs objfs without HOME: ~ is the calling user's home from the password database.
  FakeEnv env;
  const passwd* pw = ::getpwuid(::getuid());
  ASSERT_NE(pw, nullptr);
  EXPECT_EQ(HomeDirectory(env.Fn()), pw->pw_dir);
  auto profile = LoadAwsProfile("", "", env.Fn());
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  EXPECT_EQ(profile->credentials_path, std::string(pw->pw_dir) + "/.aws/credentials");
  EXPECT_EQ(profile->config_path, std::string(pw->pw_dir) + "/.aws/config");
  env.Set("HOME", "/elsewhere");
  EXPECT_EQ(HomeDirectory(env.Fn()), "/elsewhere");
}

TEST(LoadCredentialsTest, EmptyEnvironmentValuesCountAsUnset) {
  TempDir dir;
  FakeEnv env;
  env.Set("AWS_ACCESS_KEY_ID", "")
      .Set("AWS_SECRET_ACCESS_KEY", "")
      .Set("AWS_PROFILE", "")
      .Set("AWS_SHARED_CREDENTIALS_FILE", dir.Write("c", std::string(kTwoProfiles)));
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key, "AKIDDEFAULT");
}

// --- ParseIni and the config file ---------------------------------------------------------------

TEST(ParseIniTest, SectionsSubSectionsAndMalformedLines) {
  const IniSections ini = ParseIni(
      "# comment\n"
      "stray = before any section\n"
      "[profile dev]\n"
      "Region = eu-central-1\n"
      "s3 =\n"
      "  addressing_style = path\n"
      "\tmax_concurrent_requests = 4\n"
      "output = json\n"
      "  indented_but_no_parent = x\n"
      "no equals sign here\n"
      "; another comment\n"
      "[broken\n"
      "lost = yes\n"
      "[ services local ]\n"
      "s3 =\n"
      "  endpoint_url = http://127.0.0.1:9000\n");
  ASSERT_EQ(ini.count("profile dev"), 1u);
  const auto& dev = ini.at("profile dev");
  EXPECT_EQ(dev.at("region"), "eu-central-1");
  EXPECT_EQ(dev.at("s3.addressing_style"), "path");
  EXPECT_EQ(dev.at("s3.max_concurrent_requests"), "4");
  EXPECT_EQ(dev.at("output"), "json");
  // Indented under a key with a value: an ordinary key, not a sub-key.
  EXPECT_EQ(dev.at("indented_but_no_parent"), "x");
  EXPECT_EQ(dev.count("s3"), 0u);
  EXPECT_EQ(dev.count("lost"), 0u);
  EXPECT_EQ(ini.at("services local").at("s3.endpoint_url"), "http://127.0.0.1:9000");
  for (const auto& [name, keys] : ini) EXPECT_EQ(keys.count("stray"), 0u) << name;
}

TEST(AwsProfileTest, ConfigGivesRegionEndpointAndAddressingAndCredentialsFileWins) {
  TempDir dir;
  FakeEnv env;
  env.Set("HOME", dir.path().string()).Set("AWS_PROFILE", "dev");
  dir.Write(".aws/config",
            "[default]\nregion = us-west-2\n"
            "[profile dev]\n"
            "region = eu-central-1\n"
            "aws_access_key_id = FROMCONFIG\n"
            "aws_secret_access_key = configsecret\n"
            "services = local\n"
            "endpoint_url = http://ignored.example\n"
            "s3 =\n  addressing_style = virtual\n"
            "[services local]\n"
            "s3 =\n  endpoint_url = http://127.0.0.1:9000\n"
            "sts =\n  endpoint_url = http://127.0.0.1:9001\n");
  dir.Write(".aws/credentials", "[dev]\naws_access_key_id = FROMCREDENTIALS\n");
  auto profile = LoadAwsProfile("", "", env.Fn());
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  EXPECT_TRUE(profile->found);
  EXPECT_EQ(profile->Get("aws_access_key_id"), "FROMCREDENTIALS");
  EXPECT_EQ(profile->Get("aws_secret_access_key"), "configsecret");
  const S3ProfileSettings s3 = S3SettingsOf(*profile);
  EXPECT_EQ(s3.region, "eu-central-1");
  EXPECT_EQ(s3.endpoint, "http://127.0.0.1:9000");
  ASSERT_TRUE(s3.addressing.has_value());
  EXPECT_EQ(*s3.addressing, Addressing::kVirtualHost);
  EXPECT_EQ(ServiceEndpointOf(*profile, "sts"), "http://127.0.0.1:9001");
  // The default profile is "[default]" in the config file, without the "profile " prefix.
  auto fallback = LoadAwsProfile("default", "", env.Fn());
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(S3SettingsOf(*fallback).region, "us-west-2");
  EXPECT_EQ(S3SettingsOf(*fallback).endpoint, "");
}

TEST(AwsProfileTest, ConfigFileVariableAndPerMountCredentialsFile) {
  TempDir dir;
  FakeEnv env;
  env.Set("HOME", dir.path().string())
      .Set("AWS_CONFIG_FILE", dir.Write("elsewhere/config", "[profile p]\nregion = ap-south-1\n"))
      .Set("AWS_SHARED_CREDENTIALS_FILE", dir.Write("ignored", "[p]\naws_access_key_id = NO\n"));
  const std::string mine = dir.Write("mount.creds", "[p]\naws_access_key_id = YES\n");
  auto profile = LoadAwsProfile("p", mine, env.Fn());
  ASSERT_TRUE(profile.ok());
  EXPECT_EQ(profile->Get("aws_access_key_id"), "YES");
  EXPECT_EQ(profile->Get("region"), "ap-south-1");
  EXPECT_EQ(profile->credentials_path, mine);
}

// --- The JSON and XML documents -----------------------------------------------------------------

TEST(ParseProcessCredentialsTest, WithExpiration) {
  auto c = ParseProcessCredentials(
      R"({"Version": 1, "AccessKeyId": "AKID", "SecretAccessKey": "se\/cret\"x",
          "SessionToken": "tok", "Expiration": "2026-12-02T12:00:00Z"})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key, "AKID");
  EXPECT_EQ(c->secret_key, "se/cret\"x");
  EXPECT_EQ(c->session_token, "tok");
  ASSERT_TRUE(c->expiry.has_value());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(c->expiry->time_since_epoch()).count(),
            1796212800);
}

TEST(ParseProcessCredentialsTest, WithoutExpirationIsLongTerm) {
  auto c = ParseProcessCredentials(
      "{\"Version\":1,\"AccessKeyId\":\"AKID\",\"SecretAccessKey\":\"s\",\"Extra\":{\"a\":[1,2]}}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->session_token, "");
  EXPECT_FALSE(c->expiry.has_value());
}

TEST(ParseProcessCredentialsTest, RejectsBadDocumentsWithoutEchoingThem) {
  EXPECT_THAT(
      ParseProcessCredentials(R"({"AccessKeyId":"A","SecretAccessKey":"hush"})").status().message(),
      HasSubstr("Version must be 1"));
  EXPECT_THAT(
      ParseProcessCredentials(R"({"Version":1,"SecretAccessKey":"hush"})").status().message(),
      HasSubstr("no AccessKeyId"));
  auto broken = ParseProcessCredentials(R"({"Version":1,"SecretAccessKey":"hush")");
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr("malformed JSON"));
  EXPECT_THAT(broken.status().message(), Not(HasSubstr("hush")));
  auto bad_time = ParseProcessCredentials(
      R"({"Version":1,"AccessKeyId":"A","SecretAccessKey":"hush","Expiration":"soon"})");
  ASSERT_FALSE(bad_time.ok());
  EXPECT_THAT(bad_time.status().message(), HasSubstr("'soon'"));
  EXPECT_THAT(bad_time.status().message(), Not(HasSubstr("hush")));
}

TEST(ParseMetadataCredentialsTest, InstanceMetadataDocument) {
  auto c = ParseMetadataCredentials(R"({
    "Code" : "Success",
    "LastUpdated" : "2026-12-02T11:00:00Z",
    "Type" : "AWS-HMAC",
    "AccessKeyId" : "ASIAEXAMPLE",
    "SecretAccessKey" : "secret",
    "Token" : "token",
    "Expiration" : "2026-12-02T17:00:00Z"
  })");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key, "ASIAEXAMPLE");
  EXPECT_EQ(c->session_token, "token");
  ASSERT_TRUE(c->expiry.has_value());
}

TEST(ParseMetadataCredentialsTest, ContainerDocumentHasNoCode) {
  auto c = ParseMetadataCredentials(
      R"({"RoleArn":"arn:aws:iam::1:role/r","AccessKeyId":"A","SecretAccessKey":"S",)"
      R"("Token":"T","Expiration":"2026-12-02T17:00:00.123+01:00"})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->session_token, "T");
  ASSERT_TRUE(c->expiry.has_value());
}

TEST(ParseMetadataCredentialsTest, FailureCodeIsAnError) {
  auto c = ParseMetadataCredentials(R"({"Code":"AssumeRoleUnauthorizedAccess","Message":"no"})");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("AssumeRoleUnauthorizedAccess"));
}

TEST(ParseStsCredentialsTest, AssumeRoleReply) {
  auto c = ParseStsCredentials(
      R"(<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">)"
      R"(<AssumeRoleResult><Credentials><AccessKeyId>ASIA1</AccessKeyId>)"
      R"(<SecretAccessKey>s</SecretAccessKey><SessionToken>t</SessionToken>)"
      R"(<Expiration>2026-12-02T12:00:00Z</Expiration></Credentials>)"
      R"(<AssumedRoleUser><Arn>x</Arn></AssumedRoleUser></AssumeRoleResult></AssumeRoleResponse>)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key, "ASIA1");
  EXPECT_EQ(c->session_token, "t");
  ASSERT_TRUE(c->expiry.has_value());
  EXPECT_FALSE(ParseStsCredentials("<AssumeRoleResponse/>").ok());
  EXPECT_FALSE(ParseStsCredentials("not xml").ok());
}

// --- The chain -----------------------------------------------------------------------------------

TEST(ResolveCredentialsTest, CredentialProcessScriptWithAndWithoutExpiry) {
  TempDir dir;
  const std::string script =
      dir.Write("creds.sh",
                "#!/bin/sh\n"
                "echo '{\"Version\": 1, \"AccessKeyId\": \"'\"$1\"'\", \"SecretAccessKey\": \"s\", "
                "\"SessionToken\": \"t\", \"Expiration\": \"2030-01-01T00:00:00Z\"}'\n");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  FakeEnv env;
  env.Set("HOME", dir.path().string());
  dir.Write(".aws/config",
            "[default]\ncredential_process = " + script +
                " FROMSCRIPT\n"
                "[profile failing]\ncredential_process = sh -c 'echo oops >&2; exit 3'\n"
                "[profile plain]\ncredential_process = echo "
                "'{\"Version\":1,\"AccessKeyId\":\"PLAIN\",\"SecretAccessKey\":\"s\"}'\n");
  ChainOptions options;
  options.getenv = env.Fn();
  auto c = ResolveCredentials(options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key, "FROMSCRIPT");
  EXPECT_TRUE(c->expiry.has_value());
  EXPECT_THAT(c->source, HasSubstr("credential_process"));

  options.profile = "plain";
  c = ResolveCredentials(options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key, "PLAIN");
  EXPECT_FALSE(c->expiry.has_value());

  options.profile = "failing";
  c = ResolveCredentials(options);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(c.status().message(), HasSubstr("profile 'failing'"));
  EXPECT_THAT(c.status().message(), HasSubstr("exit status 3"));
}

TEST(ResolveCredentialsTest, ForcedSourceSkipsTheOthersAndSaysWhyItHasNone) {
  TempDir dir;
  FakeEnv env;
  env.Set("HOME", dir.path().string())
      .Set("AWS_ACCESS_KEY_ID", "ENVKEY")
      .Set("AWS_SECRET_ACCESS_KEY", "envsecret");
  dir.Write(".aws/credentials", "[default]\naws_access_key_id=FILEKEY\naws_secret_access_key=s\n");
  ChainOptions options;
  options.getenv = env.Fn();
  EXPECT_EQ(ResolveCredentials(options)->access_key, "ENVKEY");
  options.source = "shared_files";
  EXPECT_EQ(ResolveCredentials(options)->access_key, "FILEKEY");
  options.source = "container";
  auto c = ResolveCredentials(options);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("credentials=container"));
  EXPECT_THAT(c.status().message(), HasSubstr("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"));
  options.source = "bogus";
  EXPECT_EQ(ResolveCredentials(options).status().code(), StatusCode::kInvalidArgument);
}

// The container endpoint is sent the authorization token and answers with keys: plain http
// only to this machine, ECS or EKS, as the AWS SDKs allow.
TEST(ContainerCredentialsUrlTest, PlainHttpOnlyToLoopbackEcsOrEks) {
  for (const char* allowed :
       {"https://creds.example.com/v1", "HTTPS://192.0.2.1:8443/x", "http://127.0.0.1:8080/creds",
        "http://127.1.2.3/x", "http://[::1]:80/x", "http://localhost:9/x",
        "http://169.254.170.2/v2/credentials", "http://169.254.170.23/v1/credentials",
        "http://[fd00:ec2::23]/v1/credentials", "http://user@127.0.0.1/x"}) {
    EXPECT_TRUE(CheckContainerCredentialsUrl(allowed).ok()) << allowed;
  }
  for (const char* refused :
       {"http://192.0.2.1/creds", "http://example.com/creds", "http://127.0.0.1@192.0.2.1/x",
        "http://169.254.170.3/x", "http://[::2]/x", "http:///x", "ftp://127.0.0.1/x",
        "127.0.0.1:80/x", "http://0.0.0.0/x"}) {
    Status st = CheckContainerCredentialsUrl(refused);
    EXPECT_FALSE(st.ok()) << refused;
    EXPECT_THAT(st.message(), HasSubstr(refused));
  }
}

// A refused URL is never asked: the error says why, and not what the endpoint would have said.
TEST(ResolveCredentialsTest, AContainerUrlToAnotherHostOverPlainHttpIsRefusedUnasked) {
  FakeEnv env;
  env.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://192.0.2.1/creds")
      .Set("AWS_CONTAINER_AUTHORIZATION_TOKEN", "secret-token");
  ChainOptions options;
  options.getenv = env.Fn();
  options.source = "container";
  auto c = ResolveCredentials(options);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(c.status().message(), HasSubstr("http://192.0.2.1/creds"));
  EXPECT_THAT(c.status().message(), HasSubstr("https://"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("secret-token")));
}

TEST(ResolveCredentialsTest, RoleWithoutASourceNamesTheProfile) {
  TempDir dir;
  FakeEnv env;
  env.Set("HOME", dir.path().string());
  dir.Write(".aws/config", "[profile r]\nrole_arn = arn:aws:iam::1:role/x\n");
  ChainOptions options;
  options.getenv = env.Fn();
  options.profile = "r";
  auto c = ResolveCredentials(options);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("profile 'r'"));
  EXPECT_THAT(c.status().message(), HasSubstr("source_profile"));
}

// --- CredentialsHolder ---------------------------------------------------------------------------

bool PollUntil(double seconds, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

Credentials Keys(const std::string& key, const std::string& source = "test") {
  return Credentials{.access_key = key, .secret_key = "s", .session_token = {}, .source = source};
}

Credentials Temporary(const std::string& key, std::chrono::seconds life) {
  return Credentials{.access_key = key,
                     .secret_key = "s",
                     .session_token = "t",
                     .expiry = std::chrono::system_clock::now() + life,
                     .source = "test"};
}

TEST(CredentialsHolderTest, RenewsTemporaryCredentialsBeforeTheyExpire) {
  std::atomic<int> calls{0};
  CredentialsHolder holder(
      Temporary("FIRST", std::chrono::seconds(2)),
      [&]() -> Result<Credentials> {
        ++calls;
        return Temporary("SECOND", std::chrono::hours(1));
      },
      nullptr);
  EXPECT_EQ(holder.Current().access_key, "FIRST");
  holder.StartRefreshing();
  // A 2 s life, shorter than twice the 5 min margin: renewed at about half of it, before expiry.
  ASSERT_TRUE(PollUntil(10, [&] { return holder.Current().access_key == "SECOND"; }));
  EXPECT_EQ(calls.load(), 1);
}

TEST(CredentialsHolderTest, StaticKeysAreNeverRenewedInTheBackground) {
  std::atomic<int> calls{0};
  {
    CredentialsHolder holder(
        Keys("K"),
        [&]() -> Result<Credentials> {
          ++calls;
          return Keys("K2");
        },
        nullptr);
    holder.StartRefreshing();
    EXPECT_EQ(holder.Current().access_key, "K");
  }
  EXPECT_EQ(calls.load(), 0);
}

TEST(CredentialsHolderTest, RejectionResolvesAgainOnceAndOnlyWhenNotYetReplaced) {
  std::string next = "ROTATED";
  std::atomic<int> calls{0};
  std::vector<std::string> lines;
  CredentialsHolder holder(
      Keys("OLD", "file"),
      [&]() -> Result<Credentials> {
        ++calls;
        return Keys(next, "file");
      },
      [&](LogLevel, const std::string& line) { lines.push_back(line); });
  holder.StartRefreshing();  // static keys: no thread, but renewals are logged
  const Credentials old = holder.Current();
  EXPECT_TRUE(holder.RenewAfterRejection(old, "InvalidAccessKeyId"));
  EXPECT_EQ(holder.Current().access_key, "ROTATED");
  EXPECT_EQ(calls.load(), 1);
  // A second request that was signed with the old keys finds them already replaced.
  EXPECT_TRUE(holder.RenewAfterRejection(old, "InvalidAccessKeyId"));
  EXPECT_EQ(calls.load(), 1);
  // Refused again and the chain has nothing newer: false, so the error reaches the caller.
  EXPECT_FALSE(holder.RenewAfterRejection(holder.Current(), "InvalidAccessKeyId"));
  EXPECT_EQ(calls.load(), 2);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines.front(), HasSubstr("InvalidAccessKeyId"));
  for (const std::string& line : lines) EXPECT_THAT(line, Not(HasSubstr("secret")));
}

// A denial is mostly the policy's: the chain is asked again quietly, at most once per
// kDenialRecheck, and only other credentials than the denied ones count (and are logged).
TEST(CredentialsHolderTest, DenialResolvesAgainQuietlyAtMostOncePerIntervalAndOnlyForNewKeys) {
  std::atomic<int> calls{0};
  std::vector<std::string> lines;
  CredentialsHolder same(
      Keys("SAME", "file"),
      [&]() -> Result<Credentials> {
        ++calls;
        return Keys("SAME", "file");
      },
      [&](LogLevel, const std::string& line) { lines.push_back(line); });
  same.StartRefreshing();
  EXPECT_FALSE(same.RenewAfterDenial(same.Current()));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_FALSE(same.RenewAfterDenial(same.Current()));  // within the interval: not asked
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(lines.empty()) << lines.front();

  CredentialsHolder rotated(
      Keys("OLD", "file"),
      [&]() -> Result<Credentials> {
        ++calls;
        return Keys("NEW", "file");
      },
      [&](LogLevel, const std::string& line) { lines.push_back(line); });
  rotated.StartRefreshing();
  const Credentials old = rotated.Current();
  EXPECT_TRUE(rotated.RenewAfterDenial(old));
  EXPECT_EQ(rotated.Current().access_key, "NEW");
  EXPECT_EQ(calls.load(), 2);
  // Another request denied with the old keys finds them replaced, and is sent again.
  EXPECT_TRUE(rotated.RenewAfterDenial(old));
  EXPECT_EQ(calls.load(), 2);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines.front(), HasSubstr("AccessDenied"));
  EXPECT_THAT(lines.front(), Not(HasSubstr("secret")));
}

}  // namespace
}  // namespace objfs::s3
