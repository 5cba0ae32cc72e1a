#include "backend/s3/credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace objfs::s3 {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::string_view kNoCredentials =
    "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or create "
    "~/.aws/credentials";

// An environment made of a map, so tests never touch the process environment.
class FakeEnv {
 public:
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
  EXPECT_EQ(creds.status().message(), kNoCredentials);
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

TEST(LoadCredentialsTest, NoHomeAndNoVariables) {
  FakeEnv env;
  auto creds = LoadCredentials("", env.Fn());
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(creds.status().message(), kNoCredentials);
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

}  // namespace
}  // namespace objfs::s3
