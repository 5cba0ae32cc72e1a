// AWS credentials, found the way the AWS SDKs find them, and kept fresh while mounted.
//
// Most deployments never hand out static keys: an instance profile, a pod identity, a container
// role, an assumed role or a credential_process gives temporary credentials that expire within
// hours. Each place credentials may come from is a small provider; the default chain asks them
// in the SDKs' order:
//   1. -o profile= (explicit): that profile of the shared files, nothing else;
//   2. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN;
//   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, through STS
//      AssumeRoleWithWebIdentity;
//   4. the shared files (~/.aws/credentials and ~/.aws/config, see aws_config.h), profile
//      AWS_PROFILE or "default": role_arn with source_profile or credential_source (STS
//      AssumeRole), role_arn with web_identity_token_file, static keys, credential_process;
//   5. container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, with
//      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN;
//   6. EC2 instance metadata (IMDSv2: a token, then the role, then its credentials), at
//      AWS_EC2_METADATA_SERVICE_ENDPOINT, unless AWS_EC2_METADATA_DISABLED=true; with a 1 s
//      timeout, so a host that is not on EC2 is not held up. A service that answers the token
//      request 403, 404 or 405 is asked without one (IMDSv1) unless
//      AWS_EC2_METADATA_V1_DISABLED=true.
// A provider answers with credentials, "not mine" (NotFound, with why, for the message when no
// source has any), or a failure naming the source and the reason, which ends the chain as it
// ends the SDKs'. No message ever carries a secret.
//
// CredentialsHolder keeps the credentials the signer uses: it refreshes expiring ones in the
// background ahead of their expiry, and resolves the chain again when the server rejects the
// ones in use (a rotated key, a changed ~/.aws/credentials, an expired token).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/log.h"
#include "backend/mutex.h"
#include "backend/s3/aws_config.h"
#include "backend/status.h"

namespace objfs::s3 {

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty unless temporary credentials
  // When temporary credentials stop working; none for static keys.
  // (Defaulted, so that the keys alone may be given by designated initializers.)
  std::optional<std::chrono::system_clock::time_point> expiry = std::nullopt;
  // Where they came from, for the log: "the environment", "profile 'x' (credential_process)".
  std::string source = {};
};

// The names -o credentials= takes, in the chain's order.
inline constexpr std::string_view kCredentialSources[] = {
    "environment", "web_identity", "shared_files", "container", "instance_metadata"};

struct ChainOptions {
  std::string profile;           // -o profile=; empty: AWS_PROFILE, else "default"
  std::string credentials_file;  // -o credentials_file=; empty: the usual file
  std::string source;            // -o credentials=: one of kCredentialSources; empty: the chain
  std::string region;            // STS's region when no endpoint is configured
  GetEnvFn getenv;
  // Connection and whole-request timeouts for the instance metadata service.
  long metadata_timeout_ms = 1000;
  // For the container endpoint, STS and credential_process.
  long request_timeout_ms = 10'000;
};

// Whether AWS_CONTAINER_CREDENTIALS_FULL_URI may be asked for credentials, as the AWS SDKs
// decide: any https:// URL; plain http:// only to ECS's 169.254.170.2, EKS Pod Identity's
// 169.254.170.23 or fd00:ec2::23, or a host all of whose addresses are loopback. The request
// carries the authorization token and its answer the keys.
Status CheckContainerCredentialsUrl(std::string_view url);

// Resolves the chain (or the one source options.source names).
Result<Credentials> ResolveCredentials(const ChainOptions& options);

// The chain with no option: what the SDKs do by default.
Result<Credentials> LoadCredentials(std::string_view profile, const GetEnvFn& getenv);

// Parses the INI text of a shared credentials file and returns `profile`'s static keys. A
// profile that is missing or lacks aws_access_key_id / aws_secret_access_key is a
// PermissionDenied naming the profile and `path` (the file's name, for the message).
Result<Credentials> ParseCredentialsFile(std::string_view text, std::string_view profile,
                                         std::string_view path);

// The JSON a credential_process prints: {"Version": 1, "AccessKeyId", "SecretAccessKey",
// "SessionToken" (optional), "Expiration" (optional, ISO 8601)}.
Result<Credentials> ParseProcessCredentials(std::string_view json);
// The JSON of the instance metadata service and of the container endpoint: "AccessKeyId",
// "SecretAccessKey", "Token", "Expiration"; IMDS also "Code", which must be "Success".
Result<Credentials> ParseMetadataCredentials(std::string_view json);
// The <Credentials> of an STS AssumeRole or AssumeRoleWithWebIdentity reply.
Result<Credentials> ParseStsCredentials(std::string_view xml);

// The credentials the signer uses, shared by all its threads; see the top of this file.
class CredentialsHolder {
 public:
  using Resolver = std::function<Result<Credentials>()>;
  using Log = LogFunction;

  // `resolve` gives fresh credentials (the chain); may be empty for fixed keys. Once
  // StartRefreshing was called, temporary credentials are renewed `ahead` of their expiry (at
  // half their life when they were given less than twice that).
  CredentialsHolder(Credentials initial, Resolver resolve, Log log,
                    std::chrono::seconds ahead = std::chrono::minutes(5));
  ~CredentialsHolder();
  CredentialsHolder(const CredentialsHolder&) = delete;
  CredentialsHolder& operator=(const CredentialsHolder&) = delete;

  Credentials Current() const;

  // Starts the background renewal (a thread: call it after the mount's fork). Once only.
  // Renewals are logged from then on; before, a failing mount's one error says it all.
  void StartRefreshing();
  bool refreshing() const { return started_.load(); }

  // The server rejected `used` (`reason`: its error code). Resolves the chain again unless
  // another thread already replaced them; true when the credentials now differ from `used`.
  bool RenewAfterRejection(const Credentials& used, const std::string& reason);

  // The server denied a request signed with `used` (AccessDenied, or a HEAD's bare 403). That is
  // mostly the user's policy, but some servers answer a key they no longer know so too (RGW
  // with STS enabled tries the key as a session token and denies it). Resolves the chain again
  // at most once per kDenialRecheck, quietly, and true only when that gave other credentials
  // (logged), which the request is then sent again with.
  bool RenewAfterDenial(const Credentials& used);
  static constexpr std::chrono::seconds kDenialRecheck{10};

 private:
  void RefreshLoop();
  // Resolves again, one thread at a time; false when it failed (logged).
  // `refused`: the server refused the ones in use, so a failure is an error whatever their
  // expiry says.
  bool Renew(const std::string& why, bool refused = false);

  Resolver resolve_;
  Log log_;
  std::chrono::seconds ahead_;
  mutable Mutex mu_;  // lock 30 of fs/lock_order.h
  CondVar cv_;
  Credentials current_ GUARDED_BY(mu_);
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  bool renewing_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  // When a renewal after a refusal last gave the same credentials again.
  std::chrono::steady_clock::time_point last_fruitless_ GUARDED_BY(mu_);
  // When a denial last made the chain be resolved again.
  std::optional<std::chrono::steady_clock::time_point> last_denial_check_ GUARDED_BY(mu_);
  std::atomic<bool> started_{false};
  std::thread refresher_;
};

}  // namespace objfs::s3
