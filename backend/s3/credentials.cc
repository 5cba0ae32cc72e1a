#include "backend/s3/credentials.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <pugixml.hpp>

#include "backend/s3/http_client.h"
#include "backend/s3/sigv4.h"
#include "backend/s3/xml.h"
#include "backend/small_file.h"

extern char** environ;

namespace objfs::s3 {
namespace {

constexpr std::string_view kNoCredentials =
    "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or create "
    "~/.aws/credentials";
constexpr std::string_view kDefaultImds = "http://169.254.169.254";
constexpr std::string_view kEcsHost = "http://169.254.170.2";
// How deep source_profile may chain before it is taken for a loop.
constexpr int kMaxProfileDepth = 5;

std::string_view Trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string Env(const GetEnvFn& getenv, const char* name) {
  const char* v = getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// "Not mine": the source has nothing configured; `why` goes into the message when no source
// has credentials.
Status NotMine(std::string why) { return NotFoundError(std::move(why)); }
bool IsNotMine(const Status& st) { return st.code() == StatusCode::kNotFound; }

std::optional<std::chrono::system_clock::time_point> ParseExpiry(std::string_view text) {
  const int64_t ns = ParseIso8601(text);
  if (ns < 0) return std::nullopt;
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(ns)));
}

std::string FormatTime(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// --- A flat JSON object -------------------------------------------------------------------------
// The credential documents are one object of strings and numbers; nested values are skipped.

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  Result<std::map<std::string, std::string>> Object() {
    std::map<std::string, std::string> out;
    Space();
    if (!Take('{')) return Bad("not a JSON object");
    Space();
    if (Take('}')) return out;
    while (true) {
      Space();
      OBJFS_ASSIGN_OR_RETURN(std::string key, String());
      Space();
      if (!Take(':')) return Bad("':' expected after \"" + key + "\"");
      Space();
      OBJFS_ASSIGN_OR_RETURN(std::string value, Value(0));
      out[key] = std::move(value);
      Space();
      if (Take(',')) continue;
      if (Take('}')) break;
      return Bad("',' or '}' expected");
    }
    Space();
    if (pos_ != s_.size()) return Bad("text after the object");
    return out;
  }

 private:
  Status Bad(const std::string& why) const {
    return InvalidArgumentError("malformed JSON (" + why + " at offset " + std::to_string(pos_) +
                                ")");
  }
  void Space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Take(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Result<std::string> String() {
    if (!Take('"')) return Bad("string expected");
    std::string out;
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return Bad("short \\u escape");
          for (size_t i = 0; i < 4; ++i) {
            if (!std::isxdigit(static_cast<unsigned char>(s_[pos_ + i]))) {
              return Bad("bad \\u escape");
            }
          }
          const unsigned cp = std::stoul(std::string(s_.substr(pos_, 4)), nullptr, 16);
          pos_ += 4;
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          out += e;  // \" \\ \/
      }
    }
    return Bad("unterminated string");
  }
  // A value as text: strings unquoted, numbers and literals as written, nested values skipped
  // (empty).
  Result<std::string> Value(int depth) {
    if (depth > 32) return Bad("nested too deep");
    if (pos_ >= s_.size()) return Bad("value expected");
    const char c = s_[pos_];
    if (c == '"') return String();
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      Space();
      if (Take(close)) return std::string();
      while (true) {
        Space();
        if (c == '{') {
          OBJFS_RETURN_IF_ERROR(String().status());
          Space();
          if (!Take(':')) return Bad("':' expected");
          Space();
        }
        OBJFS_RETURN_IF_ERROR(Value(depth + 1).status());
        Space();
        if (Take(',')) continue;
        if (Take(close)) return std::string();
        return Bad("',' or closing bracket expected");
      }
    }
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != ',' && s_[pos_] != '}' && s_[pos_] != ']' &&
           s_[pos_] != ' ' && s_[pos_] != '\n' && s_[pos_] != '\r' && s_[pos_] != '\t') {
      ++pos_;
    }
    if (pos_ == start) return Bad("value expected");
    return std::string(s_.substr(start, pos_ - start));
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// Fills keys, token and expiry from a credential document with the given field names.
Result<Credentials> CredentialsFromJson(std::string_view json, std::string_view what,
                                        std::string_view token_field) {
  Result<std::map<std::string, std::string>> parsed = JsonReader(json).Object();
  if (!parsed.ok()) {
    return InvalidArgumentError(std::string(what) + ": " + parsed.status().message());
  }
  auto get = [&](const std::string& name) {
    auto it = parsed->find(name);
    return it == parsed->end() ? std::string() : it->second;
  };
  Credentials c;
  c.access_key = get("AccessKeyId");
  c.secret_key = get("SecretAccessKey");
  c.session_token = get(std::string(token_field));
  if (c.access_key.empty()) return InvalidArgumentError(std::string(what) + " has no AccessKeyId");
  if (c.secret_key.empty()) {
    return InvalidArgumentError(std::string(what) + " has no SecretAccessKey");
  }
  const std::string expiration = get("Expiration");
  if (!expiration.empty()) {
    c.expiry = ParseExpiry(expiration);
    if (!c.expiry) {
      return InvalidArgumentError(std::string(what) + ": Expiration '" + expiration +
                                  "' is not an ISO 8601 time");
    }
  }
  return c;
}

// --- HTTP for the credential services ---------------------------------------------------------

struct Fetched {
  long status = 0;
  std::string body;
};

Result<Fetched> Fetch(const std::string& method, const std::string& url, const HeaderList& headers,
                      std::string body, long timeout_ms) {
  HttpOptions ho;
  ho.connect_timeout_ms = timeout_ms;
  ho.idle_timeout_s = std::max(1L, timeout_ms / 1000);
  ho.max_idle_handles = 0;
  HttpClient client(ho);
  HttpRequest req;
  req.method = method;
  req.url = url;
  req.headers = headers;
  req.body = std::move(body);
  req.total_timeout_ms = timeout_ms;
  OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, client.Perform(req));
  return Fetched{.status = resp.status, .body = std::move(resp.body)};
}

// "scheme://host[:port]" of a URL: what the Host header and SigV4 sign.
std::string HostOf(std::string_view url) {
  const size_t scheme = url.find("://");
  std::string_view rest = scheme == std::string_view::npos ? url : url.substr(scheme + 3);
  return std::string(rest.substr(0, rest.find('/')));
}

std::string FormEncode(const HeaderList& fields) {
  std::string out;
  for (const auto& [k, v] : fields) {
    if (!out.empty()) out += '&';
    out += UriEncode(k, false) + "=" + UriEncode(v, false);
  }
  return out;
}

std::string SessionName() { return "objfs-" + std::to_string(std::time(nullptr)); }

struct Context {
  const ChainOptions& options;
  std::string home;
};

// An STS query-API call; signed with `signer` unless it is null (AssumeRoleWithWebIdentity).
Result<Credentials> CallSts(const Context& ctx, const AwsProfile* profile, const HeaderList& form,
                            const Credentials* signer, std::string_view what) {
  const GetEnvFn& getenv = ctx.options.getenv;
  std::string region = profile != nullptr ? profile->Get("region") : std::string();
  if (region.empty()) region = Env(getenv, "AWS_REGION");
  if (region.empty()) region = Env(getenv, "AWS_DEFAULT_REGION");
  if (region.empty()) region = ctx.options.region;
  if (region.empty()) region = "us-east-1";
  std::string endpoint = Env(getenv, "AWS_ENDPOINT_URL_STS");
  if (endpoint.empty() && profile != nullptr) endpoint = ServiceEndpointOf(*profile, "sts");
  if (endpoint.empty()) endpoint = Env(getenv, "AWS_ENDPOINT_URL");
  if (endpoint.empty()) endpoint = "https://sts." + region + ".amazonaws.com";
  while (endpoint.ends_with('/')) endpoint.pop_back();

  const std::string body = FormEncode(form);
  HeaderList headers = {{"content-type", "application/x-www-form-urlencoded"}};
  if (signer != nullptr) {
    SigningRequest sreq;
    sreq.method = "POST";
    sreq.canonical_uri = "/";
    sreq.headers = headers;
    sreq.headers.emplace_back("host", HostOf(endpoint));
    sreq.payload_sha256 = Sha256Hex(body);
    const std::string auth = Sign(sreq, *signer, region, "sts", std::chrono::system_clock::now(),
                                  /*add_content_sha256=*/true);
    headers.clear();
    for (auto& [name, value] : sreq.headers) {
      if (name != "host") headers.emplace_back(name, value);
    }
    headers.emplace_back("Authorization", auth);
  }
  const std::string where = std::string(what) + " at " + endpoint;
  Result<Fetched> r = Fetch("POST", endpoint + "/", headers, body, ctx.options.request_timeout_ms);
  if (!r.ok()) return PermissionDeniedError(where + ": " + r.status().message());
  if (r->status != 200) {
    std::string reason = "HTTP " + std::to_string(r->status);
    pugi::xml_document doc;
    if (doc.load_buffer(r->body.data(), r->body.size())) {
      const pugi::xpath_node code = doc.select_node("//*[local-name()='Code']");
      const pugi::xpath_node message = doc.select_node("//*[local-name()='Message']");
      if (code) reason += " " + std::string(code.node().child_value());
      if (message && *message.node().child_value() != '\0') {
        reason += ": " + std::string(message.node().child_value());
      }
    }
    return PermissionDeniedError(where + " failed: " + reason);
  }
  Result<Credentials> c = ParseStsCredentials(r->body);
  if (!c.ok()) return PermissionDeniedError(where + ": " + c.status().message());
  return c;
}

Result<std::string> ReadTokenFile(const std::string& path, std::string_view what) {
  // A JWT or a container token is a few KB.
  Result<std::string> text = ReadSmallFile(path, 1 << 20, std::string(what) + " file");
  if (!text.ok()) return PermissionDeniedError(std::string(what) + ": " + text.status().message());
  return std::string(Trim(*text));
}

Result<Credentials> AssumeRoleWithWebIdentity(const Context& ctx, const AwsProfile* profile,
                                              const std::string& role_arn,
                                              const std::string& token_file,
                                              std::string session_name) {
  OBJFS_ASSIGN_OR_RETURN(std::string token, ReadTokenFile(token_file, "web identity token"));
  if (session_name.empty()) session_name = SessionName();
  Result<Credentials> c = CallSts(ctx, profile,
                                  {{"Action", "AssumeRoleWithWebIdentity"},
                                   {"RoleArn", role_arn},
                                   {"RoleSessionName", session_name},
                                   {"Version", "2011-06-15"},
                                   {"WebIdentityToken", token}},
                                  nullptr, "STS AssumeRoleWithWebIdentity of " + role_arn);
  if (c.ok()) c->source = "web identity (role " + role_arn + ")";
  return c;
}

// --- Providers -----------------------------------------------------------------------------------

Result<Credentials> FromEnvironment(const Context& ctx) {
  const GetEnvFn& getenv = ctx.options.getenv;
  const std::string id = Env(getenv, "AWS_ACCESS_KEY_ID");
  const std::string secret = Env(getenv, "AWS_SECRET_ACCESS_KEY");
  if (id.empty() && secret.empty()) return NotMine("environment: AWS_ACCESS_KEY_ID is not set");
  if (secret.empty()) {
    return PermissionDeniedError("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
  }
  if (id.empty()) {
    return PermissionDeniedError("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
  }
  Credentials c{.access_key = id,
                .secret_key = secret,
                .session_token = Env(getenv, "AWS_SESSION_TOKEN"),
                .expiry = std::nullopt,
                .source = "the environment"};
  const std::string expiration = Env(getenv, "AWS_CREDENTIAL_EXPIRATION");
  if (!expiration.empty()) c.expiry = ParseExpiry(expiration);
  return c;
}

Result<Credentials> FromWebIdentity(const Context& ctx) {
  const GetEnvFn& getenv = ctx.options.getenv;
  const std::string token_file = Env(getenv, "AWS_WEB_IDENTITY_TOKEN_FILE");
  const std::string role = Env(getenv, "AWS_ROLE_ARN");
  if (token_file.empty() || role.empty()) {
    return NotMine("web identity: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN are not set");
  }
  return AssumeRoleWithWebIdentity(ctx, nullptr, role, token_file,
                                   Env(getenv, "AWS_ROLE_SESSION_NAME"));
}

// Whether every address `host` stands for is a loopback one (127.0.0.0/8, ::1, or 127/8
// mapped into IPv6); false when it resolves to none.
bool AllLoopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool all = true;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      all = all && (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr;
      all = all &&
            (IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127));
    } else {
      all = false;
    }
  }
  ::freeaddrinfo(found);
  return all;
}

}  // namespace

Status CheckContainerCredentialsUrl(std::string_view url) {
  const std::string refused = "AWS_CONTAINER_CREDENTIALS_FULL_URI " + std::string(url);
  const size_t scheme_end = url.find("://");
  const std::string scheme =
      scheme_end == std::string_view::npos ? std::string() : AsciiLower(url.substr(0, scheme_end));
  if (scheme == "https") return Status::Ok();
  if (scheme != "http") {
    return InvalidArgumentError(refused + " is not an http:// or https:// URL");
  }
  std::string_view authority = url.substr(scheme_end + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    authority.remove_prefix(at + 1);
  }
  std::string host;
  if (authority.starts_with('[')) {
    host = std::string(authority.substr(1, authority.find(']') - 1));
  } else {
    host = std::string(authority.substr(0, authority.find(':')));
  }
  // Those of ECS and of EKS Pod Identity, as the SDKs allow them.
  if (host == "169.254.170.2" || host == "169.254.170.23" || AsciiLower(host) == "fd00:ec2::23") {
    return Status::Ok();
  }
  if (!host.empty() && AllLoopback(host)) return Status::Ok();
  return PermissionDeniedError(
      refused +
      " is plain http to a host that is not this machine's loopback, ECS's or EKS's: refused, "
      "as the AWS SDKs refuse it, so that no authorization token or credentials cross the "
      "network unencrypted (use https://)");
}

namespace {

Result<Credentials> FromContainer(const Context& ctx) {
  const GetEnvFn& getenv = ctx.options.getenv;
  std::string url;
  const std::string relative = Env(getenv, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  if (!relative.empty()) {
    // A path on ECS's address, never something that makes another host of it ("@x", ".x").
    if (relative.front() != '/') {
      return PermissionDeniedError(
          "container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI does not start with '/'");
    }
    url = std::string(kEcsHost) + relative;
  } else {
    url = Env(getenv, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
    if (!url.empty()) {
      Status allowed = CheckContainerCredentialsUrl(url);
      if (!allowed.ok()) return PermissionDeniedError("container: " + allowed.message());
    }
  }
  if (url.empty()) {
    return NotMine("container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI are not set");
  }
  HeaderList headers;
  const std::string token_file = Env(getenv, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  std::string token = Env(getenv, "AWS_CONTAINER_AUTHORIZATION_TOKEN");
  if (!token_file.empty()) {
    OBJFS_ASSIGN_OR_RETURN(token, ReadTokenFile(token_file, "container authorization token"));
  }
  if (!token.empty()) headers.emplace_back("Authorization", token);
  const std::string where = "container credentials at " + url;
  Result<Fetched> r = Fetch("GET", url, headers, "", ctx.options.request_timeout_ms);
  if (!r.ok()) return PermissionDeniedError(where + ": " + r.status().message());
  if (r->status != 200) {
    return PermissionDeniedError(where + ": HTTP " + std::to_string(r->status));
  }
  Result<Credentials> c = ParseMetadataCredentials(r->body);
  if (!c.ok()) return PermissionDeniedError(where + ": " + c.status().message());
  c->source = where;
  return c;
}

Result<Credentials> FromInstanceMetadata(const Context& ctx) {
  const GetEnvFn& getenv = ctx.options.getenv;
  std::string disabled = Env(getenv, "AWS_EC2_METADATA_DISABLED");
  for (char& ch : disabled) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (disabled == "true") return NotMine("instance metadata: AWS_EC2_METADATA_DISABLED is true");
  std::string endpoint = Env(getenv, "AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (endpoint.empty()) endpoint = std::string(kDefaultImds);
  while (endpoint.ends_with('/')) endpoint.pop_back();
  const long timeout = ctx.options.metadata_timeout_ms;

  Result<Fetched> token = Fetch("PUT", endpoint + "/latest/api/token",
                                {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}}, "", timeout);
  if (!token.ok()) {
    return NotMine("instance metadata: no service at " + endpoint + " (" +
                   token.status().message() + ")");
  }
  // A service without IMDSv2's session tokens (an instance configured so, or another cloud's
  // EC2-compatible service) answers 403, 404 or 405: as the SDKs do, the requests then go
  // without a token (IMDSv1) unless AWS_EC2_METADATA_V1_DISABLED is true.
  HeaderList auth;
  std::string version = "IMDSv2";
  if (token->status == 403 || token->status == 404 || token->status == 405) {
    if (AsciiLower(Env(getenv, "AWS_EC2_METADATA_V1_DISABLED")) == "true") {
      return NotMine("instance metadata: " + endpoint + " has no IMDSv2 session tokens (HTTP " +
                     std::to_string(token->status) + ") and AWS_EC2_METADATA_V1_DISABLED is true");
    }
    version = "IMDSv1";
  } else if (token->status != 200) {
    return NotMine("instance metadata: " + endpoint + " answered the token request with HTTP " +
                   std::to_string(token->status));
  } else {
    auth.emplace_back("X-aws-ec2-metadata-token", std::string(Trim(token->body)));
  }
  const std::string roles_url = endpoint + "/latest/meta-data/iam/security-credentials/";
  Result<Fetched> roles = Fetch("GET", roles_url, auth, "", timeout);
  if (!roles.ok()) {
    return PermissionDeniedError("instance metadata at " + endpoint + ": " +
                                 roles.status().message());
  }
  if (roles->status == 404) return NotMine("instance metadata: the instance has no IAM role");
  if (roles->status != 200) {
    return PermissionDeniedError("instance metadata at " + endpoint + ": role list: HTTP " +
                                 std::to_string(roles->status));
  }
  const std::string role(Trim(std::string_view(roles->body).substr(0, roles->body.find('\n'))));
  if (role.empty()) return NotMine("instance metadata: the instance has no IAM role");
  Result<Fetched> creds = Fetch("GET", roles_url + role, auth, "", timeout);
  const std::string where = "instance metadata (role " + role +
                            (version == "IMDSv1" ? ", IMDSv1" : "") + ") at " + endpoint;
  if (!creds.ok()) return PermissionDeniedError(where + ": " + creds.status().message());
  if (creds->status != 200) {
    return PermissionDeniedError(where + ": HTTP " + std::to_string(creds->status));
  }
  Result<Credentials> c = ParseMetadataCredentials(creds->body);
  if (!c.ok()) return PermissionDeniedError(where + ": " + c.status().message());
  c->source = where;
  return c;
}

// Runs a credential_process command with /bin/sh and parses what it prints.
Result<Credentials> RunCredentialProcess(const Context& ctx, const std::string& command,
                                         const std::string& where) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return PermissionDeniedError(where + ": pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  const int spawned =
      ::posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    return PermissionDeniedError(where + ": cannot run /bin/sh: " + std::strerror(spawned));
  }
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::max(ctx.options.request_timeout_ms, 1L));
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{.fd = pipe_fds[0], .events = POLLIN, .revents = 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    char buf[4096];
    const ssize_t n = ::read(pipe_fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1 << 20)) break;
  }
  ::close(pipe_fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return PermissionDeniedError(where + ": the command did not finish within " +
                                 std::to_string(ctx.options.request_timeout_ms / 1000) + " s");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return PermissionDeniedError(where + ": the command failed (" +
                                 (WIFEXITED(status)
                                      ? "exit status " + std::to_string(WEXITSTATUS(status))
                                      : "signal " + std::to_string(WTERMSIG(status))) +
                                 ")");
  }
  Result<Credentials> c = ParseProcessCredentials(out);
  if (!c.ok()) return PermissionDeniedError(where + ": " + c.status().message());
  c->source = where;
  return c;
}

Result<Credentials> FromProfile(const Context& ctx, const AwsProfile& profile, bool explicit_name,
                                int depth);

// The credentials a role_arn profile assumes the role with.
Result<Credentials> RoleSource(const Context& ctx, const AwsProfile& profile, int depth) {
  const std::string source_profile = profile.Get("source_profile");
  const std::string credential_source = profile.Get("credential_source");
  if (!source_profile.empty()) {
    if (depth >= kMaxProfileDepth) {
      return PermissionDeniedError(profile.Where() + ": source_profile chain is longer than " +
                                   std::to_string(kMaxProfileDepth) + " (a loop?)");
    }
    AwsProfile source = ProfileOf(profile, source_profile);
    if (source_profile == profile.name) {
      // A profile that is its own source gives its keys to its role.
      source.values.erase("role_arn");
    }
    Result<Credentials> c = FromProfile(ctx, source, /*explicit_name=*/true, depth + 1);
    if (!c.ok()) {
      return Status(StatusCode::kPermissionDenied,
                    profile.Where() + ": source_profile: " + c.status().message());
    }
    return c;
  }
  if (credential_source == "Environment") return FromEnvironment(ctx);
  if (credential_source == "Ec2InstanceMetadata") return FromInstanceMetadata(ctx);
  if (credential_source == "EcsContainer") return FromContainer(ctx);
  if (!credential_source.empty()) {
    return PermissionDeniedError(profile.Where() + ": credential_source '" + credential_source +
                                 "' is not Environment, Ec2InstanceMetadata or EcsContainer");
  }
  return PermissionDeniedError(profile.Where() +
                               ": role_arn needs source_profile, credential_source or "
                               "web_identity_token_file");
}

Result<Credentials> FromProfile(const Context& ctx, const AwsProfile& profile, bool explicit_name,
                                int depth) {
  if (!profile.found) {
    const std::string message = "no " + profile.Where();
    return explicit_name ? PermissionDeniedError(message) : NotMine("shared files: " + message);
  }
  const std::string role_arn = profile.Get("role_arn");
  if (!role_arn.empty()) {
    const std::string token_file = profile.Get("web_identity_token_file");
    if (!token_file.empty()) {
      return AssumeRoleWithWebIdentity(ctx, &profile, role_arn, token_file,
                                       profile.Get("role_session_name"));
    }
    OBJFS_ASSIGN_OR_RETURN(Credentials source, RoleSource(ctx, profile, depth));
    std::string session = profile.Get("role_session_name");
    if (session.empty()) session = SessionName();
    HeaderList form = {{"Action", "AssumeRole"},
                       {"RoleArn", role_arn},
                       {"RoleSessionName", session},
                       {"Version", "2011-06-15"}};
    if (const std::string id = profile.Get("external_id"); !id.empty()) {
      form.emplace_back("ExternalId", id);
    }
    if (const std::string d = profile.Get("duration_seconds"); !d.empty()) {
      form.emplace_back("DurationSeconds", d);
    }
    Result<Credentials> c = CallSts(
        ctx, &profile, form, &source,
        "STS AssumeRole of " + role_arn + " for " + profile.Where() + " with " + source.source);
    if (c.ok()) c->source = profile.Where() + " (role " + role_arn + " via " + source.source + ")";
    return c;
  }
  const std::string id = profile.Get("aws_access_key_id");
  const std::string secret = profile.Get("aws_secret_access_key");
  if (!id.empty() || !secret.empty()) {
    if (id.empty()) return PermissionDeniedError(profile.Where() + " has no aws_access_key_id");
    if (secret.empty()) {
      return PermissionDeniedError(profile.Where() + " has no aws_secret_access_key");
    }
    return Credentials{.access_key = id,
                       .secret_key = secret,
                       .session_token = profile.Get("aws_session_token"),
                       .expiry = std::nullopt,
                       .source = profile.Where()};
  }
  if (const std::string command = profile.Get("credential_process"); !command.empty()) {
    return RunCredentialProcess(ctx, command, profile.Where() + " (credential_process)");
  }
  const std::string message =
      profile.Where() +
      " has no aws_access_key_id, credential_process, role_arn or web_identity_token_file";
  return explicit_name ? PermissionDeniedError(message) : NotMine("shared files: " + message);
}

Result<Credentials> FromSharedFiles(const Context& ctx, bool explicit_name) {
  OBJFS_ASSIGN_OR_RETURN(
      AwsProfile profile,
      LoadAwsProfile(ctx.options.profile, ctx.options.credentials_file, ctx.options.getenv));
  // A file named for this mount must be there.
  if (!ctx.options.credentials_file.empty() && profile.credentials.empty() &&
      ::access(profile.credentials_path.c_str(), R_OK) != 0) {
    return PermissionDeniedError("credentials_file " + profile.credentials_path + ": " +
                                 std::strerror(errno));
  }
  return FromProfile(ctx, profile, explicit_name, 0);
}

}  // namespace

Result<Credentials> ParseCredentialsFile(std::string_view text, std::string_view profile,
                                         std::string_view path) {
  const IniSections sections = ParseIni(text);
  auto it = sections.find(std::string(profile));
  if (it == sections.end()) {
    return PermissionDeniedError("no profile '" + std::string(profile) + "' in " +
                                 std::string(path));
  }
  const std::string where = "profile '" + std::string(profile) + "' in " + std::string(path);
  auto get = [&](const char* key) {
    auto v = it->second.find(key);
    return v == it->second.end() ? std::string() : v->second;
  };
  Credentials creds;
  creds.access_key = get("aws_access_key_id");
  creds.secret_key = get("aws_secret_access_key");
  creds.session_token = get("aws_session_token");
  creds.source = where;
  if (creds.access_key.empty()) return PermissionDeniedError(where + " has no aws_access_key_id");
  if (creds.secret_key.empty()) {
    return PermissionDeniedError(where + " has no aws_secret_access_key");
  }
  return creds;
}

Result<Credentials> ParseProcessCredentials(std::string_view json) {
  Result<std::map<std::string, std::string>> parsed = JsonReader(json).Object();
  if (parsed.ok()) {
    auto v = parsed->find("Version");
    if (v == parsed->end() || v->second != "1") {
      return InvalidArgumentError("credential_process output: Version must be 1");
    }
  }
  return CredentialsFromJson(json, "credential_process output", "SessionToken");
}

Result<Credentials> ParseMetadataCredentials(std::string_view json) {
  Result<std::map<std::string, std::string>> parsed = JsonReader(json).Object();
  if (parsed.ok()) {
    auto code = parsed->find("Code");
    if (code != parsed->end() && code->second != "Success") {
      auto message = parsed->find("Message");
      return InvalidArgumentError("credentials document: Code is '" + code->second + "'" +
                                  (message != parsed->end() ? ": " + message->second : ""));
    }
  }
  return CredentialsFromJson(json, "credentials document", "Token");
}

Result<Credentials> ParseStsCredentials(std::string_view xml) {
  pugi::xml_document doc;
  if (!doc.load_buffer(xml.data(), xml.size())) {
    return InvalidArgumentError("malformed STS reply: not XML");
  }
  const pugi::xpath_node node = doc.select_node("//*[local-name()='Credentials']");
  if (!node) return InvalidArgumentError("malformed STS reply: no <Credentials>");
  auto text = [&](const char* name) {
    for (pugi::xml_node c = node.node().first_child(); c; c = c.next_sibling()) {
      std::string_view n = c.name();
      if (const size_t colon = n.find(':'); colon != std::string_view::npos) {
        n.remove_prefix(colon + 1);
      }
      if (n == name) return std::string(Trim(c.child_value()));
    }
    return std::string();
  };
  Credentials c;
  c.access_key = text("AccessKeyId");
  c.secret_key = text("SecretAccessKey");
  c.session_token = text("SessionToken");
  if (c.access_key.empty() || c.secret_key.empty()) {
    return InvalidArgumentError("malformed STS reply: <Credentials> without keys");
  }
  if (const std::string e = text("Expiration"); !e.empty()) {
    c.expiry = ParseExpiry(e);
    if (!c.expiry) {
      return InvalidArgumentError("malformed STS reply: Expiration '" + e + "' is not a time");
    }
  }
  return c;
}

Result<Credentials> ResolveCredentials(const ChainOptions& options) {
  const Context ctx{.options = options, .home = HomeDirectory(options.getenv)};
  using Provider = std::function<Result<Credentials>()>;
  const std::vector<std::pair<std::string_view, Provider>> chain = {
      {"environment", [&] { return FromEnvironment(ctx); }},
      {"web_identity", [&] { return FromWebIdentity(ctx); }},
      {"shared_files", [&] { return FromSharedFiles(ctx, !options.profile.empty()); }},
      {"container", [&] { return FromContainer(ctx); }},
      {"instance_metadata", [&] { return FromInstanceMetadata(ctx); }},
  };
  if (!options.source.empty()) {
    for (const auto& [name, provider] : chain) {
      if (name != options.source) continue;
      Result<Credentials> c = provider();
      if (!c.ok() && IsNotMine(c.status())) {
        return PermissionDeniedError("credentials=" + options.source + ": " + c.status().message());
      }
      return c;
    }
    std::string names;
    for (std::string_view n : kCredentialSources)
      names += (names.empty() ? "" : ", ") + std::string(n);
    return InvalidArgumentError("credentials=" + options.source + " is not one of " + names);
  }
  std::string tried;
  for (const auto& [name, provider] : chain) {
    // A profile named explicitly is the only source, as the CLI's --profile.
    if (!options.profile.empty() && name != "shared_files") continue;
    Result<Credentials> c = provider();
    if (c.ok()) return c;
    if (!IsNotMine(c.status())) return c.status();
    tried += "; " + c.status().message();
  }
  return PermissionDeniedError(std::string(kNoCredentials) + " (" + tried.substr(2) + ")");
}

Result<Credentials> LoadCredentials(std::string_view profile, const GetEnvFn& getenv) {
  ChainOptions options;
  options.profile = std::string(profile);
  options.getenv = getenv;
  return ResolveCredentials(options);
}

// --- CredentialsHolder -------------------------------------------------------------------------

namespace {
bool SameKeys(const Credentials& a, const Credentials& b) {
  return a.access_key == b.access_key && a.secret_key == b.secret_key &&
         a.session_token == b.session_token;
}
}  // namespace

CredentialsHolder::CredentialsHolder(Credentials initial, Resolver resolve, Log log,
                                     std::chrono::seconds ahead)
    : resolve_(std::move(resolve)), log_(std::move(log)), ahead_(ahead) {
  {
    MutexLock lock(&mu_);
    current_ = std::move(initial);
  }
}

void CredentialsHolder::StartRefreshing() {
  started_ = true;
  if (resolve_ && !refresher_.joinable()) refresher_ = std::thread([this] { RefreshLoop(); });
}

CredentialsHolder::~CredentialsHolder() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (refresher_.joinable()) refresher_.join();
}

Credentials CredentialsHolder::Current() const {
  MutexLock lock(&mu_);
  return current_;
}

bool CredentialsHolder::Renew(const std::string& why, bool refused) {
  uint64_t generation;
  {
    MutexLock lock(&mu_);
    while (renewing_ && !stop_) cv_.Wait(&mu_);
    if (stop_) return false;
    renewing_ = true;
    generation = generation_;
  }
  Result<Credentials> fresh = resolve_();
  std::string line;
  LogLevel level = LogLevel::kInfo;
  {
    MutexLock lock(&mu_);
    renewing_ = false;
    if (!fresh.ok()) {
      // While the ones in use still work, a failed early renewal is retried before it matters.
      level = !refused && current_.expiry && *current_.expiry > std::chrono::system_clock::now()
                  ? LogLevel::kWarn
                  : LogLevel::kError;
    }
    if (fresh.ok()) {
      if (generation_ == generation) {
        current_ = *fresh;
        ++generation_;
      }
      line = "credentials: " + why + "; now from " + fresh->source +
             (fresh->expiry ? ", until " + FormatTime(*fresh->expiry) : std::string());
    } else {
      line = "credentials: " + why + "; resolving them again failed: " + fresh.status().message();
    }
    cv_.SignalAll();
  }
  if (log_ && started_) log_(level, line);
  return fresh.ok();
}

bool CredentialsHolder::RenewAfterRejection(const Credentials& used, const std::string& reason) {
  {
    MutexLock lock(&mu_);
    while (renewing_ && !stop_) cv_.Wait(&mu_);
    if (!SameKeys(current_, used)) return true;
    // Refused requests come in bursts: one resolution answers them all for a moment.
    if (std::chrono::steady_clock::now() - last_fruitless_ < std::chrono::seconds(2)) return false;
  }
  if (!resolve_) return false;
  Renew("the server refused the ones from " + used.source + " (" + reason + ")", /*refused=*/true);
  MutexLock lock(&mu_);
  const bool changed = !SameKeys(current_, used);
  if (!changed) last_fruitless_ = std::chrono::steady_clock::now();
  return changed;
}

bool CredentialsHolder::RenewAfterDenial(const Credentials& used) {
  uint64_t generation;
  {
    MutexLock lock(&mu_);
    while (renewing_ && !stop_) cv_.Wait(&mu_);
    if (stop_) return false;
    if (!SameKeys(current_, used)) return true;
    // Temporary credentials are renewed before they expire, and every resolution of a role
    // or a web identity gives new ones: only long-term keys can have been rotated.
    if (!resolve_ || used.expiry || !used.session_token.empty()) return false;
    const auto now = std::chrono::steady_clock::now();
    if (last_denial_check_ && now - *last_denial_check_ < kDenialRecheck) return false;
    last_denial_check_ = now;
    renewing_ = true;
    generation = generation_;
  }
  Result<Credentials> fresh = resolve_();
  std::string line;
  bool changed = false;
  {
    MutexLock lock(&mu_);
    renewing_ = false;
    if (fresh.ok() && !SameKeys(*fresh, used)) {
      if (generation_ == generation) {
        current_ = *fresh;
        ++generation_;
      }
      changed = true;
      line = "credentials: the server refused the ones from " + used.source +
             " (AccessDenied), and they have changed; now from " + fresh->source +
             (fresh->expiry ? ", until " + FormatTime(*fresh->expiry) : std::string());
    }
    cv_.SignalAll();
  }
  if (changed && log_ && started_) log_(LogLevel::kInfo, line);
  return changed;
}

void CredentialsHolder::RefreshLoop() {
  using Clock = std::chrono::system_clock;
  MutexLock lock(&mu_);
  Clock::time_point obtained = Clock::now();
  uint64_t seen = generation_;
  std::optional<Clock::time_point> retry_at;
  while (!stop_) {
    if (generation_ != seen) {
      seen = generation_;
      obtained = Clock::now();
      retry_at.reset();
    }
    if (!current_.expiry) {
      cv_.Wait(&mu_);
      continue;
    }
    const Clock::time_point expiry = *current_.expiry;
    // Ahead of expiry by `ahead_`, or at half the life left when it was given less than twice
    // that.
    Clock::time_point due = expiry - ahead_;
    if (expiry - obtained < 2 * ahead_) due = obtained + (expiry - obtained) / 2;
    if (retry_at) due = *retry_at;
    // Never busily, even for credentials handed out already expired.
    if (due < obtained + std::chrono::seconds(1)) due = obtained + std::chrono::seconds(1);
    if (Clock::now() < due) {
      cv_.WaitUntil(&mu_, due);
      continue;
    }
    const std::string why = "the ones from " + current_.source + " expire at " + FormatTime(expiry);
    lock.Unlock();
    const bool ok = Renew(why);
    lock.Lock();
    if (!ok) {
      // Try again soon, more often as expiry nears; never busily.
      const auto left = expiry - Clock::now();
      auto wait = std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(30));
      if (left / 4 < wait) wait = left / 4;
      if (wait < std::chrono::seconds(1)) wait = std::chrono::seconds(1);
      retry_at = Clock::now() + wait;
    }
  }
}

}  // namespace objfs::s3
