// The AWS shared files, ~/.aws/credentials and ~/.aws/config, read the way the AWS SDKs read them.
//
// Credentials are only one thing those files give: a profile of the config file also names the
// region, the endpoint (its own endpoint_url, or one from a [services NAME] section), the S3
// addressing style (an indented sub-section under "s3 ="), and where temporary credentials come
// from (credential_process, role_arn, web_identity_token_file). This parses both files into
// sections of lowercase keys, merges one profile from them, and finds the home directory they
// live in also when mount(8) ran objfs without HOME.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "backend/s3/s3_endpoint.h"
#include "backend/status.h"

namespace objfs::s3 {

// Returns the value of an environment variable or nullptr; injectable for tests.
using GetEnvFn = std::function<const char*(const char*)>;

// Section name -> (lowercase key -> value). A key indented under a key with an empty value
// ("s3 =" then "  addressing_style = path") is stored as "s3.addressing_style". Malformed lines
// (no '=', a header without ']') are skipped, never fatal: a broken header ends the section
// before it, so its keys are not credited to the wrong profile. '#' and ';' start comment lines.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;
IniSections ParseIni(std::string_view text);

// The home directory: HOME, else the password database's entry for the calling user (mount(8)
// and systemd run objfs without HOME). Empty when neither knows.
std::string HomeDirectory(const GetEnvFn& getenv);

// One profile merged from both files. The credentials file's keys win over the config file's.
struct AwsProfile {
  std::string name;
  bool found = false;  // the profile has a section in either file
  std::map<std::string, std::string> values;
  // The files as found, for messages ("profile 'x' in /root/.aws/config").
  std::string credentials_path;
  std::string config_path;
  // The config file's sections, for source_profile and [services NAME].
  IniSections config;
  IniSections credentials;

  // The value of a key, or empty.
  std::string Get(std::string_view key) const;
  // Where the profile was looked for: "profile 'x' in A or B".
  std::string Where() const;
};

// Which files and profile: `profile` (-o profile=), else AWS_PROFILE, else "default";
// `credentials_file` (-o credentials_file=), else AWS_SHARED_CREDENTIALS_FILE, else
// ~/.aws/credentials; AWS_CONFIG_FILE, else ~/.aws/config. A missing file is empty; one that
// exists and cannot be read is a PermissionDenied naming it.
Result<AwsProfile> LoadAwsProfile(std::string_view profile, std::string_view credentials_file,
                                  const GetEnvFn& getenv);
// Another profile of the same files (source_profile).
AwsProfile ProfileOf(const AwsProfile& files, std::string_view name);

// S3 settings from a profile: region, endpoint_url (the [services] section's s3 entry wins over
// the profile's own), s3.addressing_style.
struct S3ProfileSettings {
  std::string region;
  std::string endpoint;
  std::optional<Addressing> addressing;
};
S3ProfileSettings S3SettingsOf(const AwsProfile& profile);
// The endpoint a profile names for `service` ("s3", "sts") in its [services] section, else its
// endpoint_url; empty when none.
std::string ServiceEndpointOf(const AwsProfile& profile, std::string_view service);

}  // namespace objfs::s3
