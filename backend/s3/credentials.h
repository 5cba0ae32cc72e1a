// AWS credentials, found the way the AWS CLI finds them.
//
// Order: a profile named explicitly (-o profile=, like the CLI's --profile) from the shared
// credentials file; else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN) from
// the environment; else the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default
// ~/.aws/credentials) with profile AWS_PROFILE, else "default".
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "backend/status.h"

namespace objfs::s3 {

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty unless temporary credentials
};

// Returns the value of an environment variable or nullptr; injectable for tests.
using GetEnvFn = std::function<const char*(const char*)>;

// Parses the INI text of a shared credentials file and returns `profile`'s keys. Malformed
// lines (no '=', a section header without ']') are skipped, never fatal; a profile that is
// missing or lacks aws_access_key_id / aws_secret_access_key is a PermissionDenied naming the
// profile and `path` (the file's name, for the message). Keys are case-insensitive, white space
// around names and values is ignored, '#' and ';' start comment lines.
Result<Credentials> ParseCredentialsFile(std::string_view text, std::string_view profile,
                                         std::string_view path);

// Finds credentials as described above. `profile` overrides AWS_PROFILE when non-empty.
Result<Credentials> LoadCredentials(std::string_view profile, const GetEnvFn& getenv);

}  // namespace objfs::s3
