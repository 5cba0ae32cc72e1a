#include "backend/s3/xml.h"

#include <array>
#include <charconv>
#include <initializer_list>
#include <limits>
#include <pugixml.hpp>

namespace objfs::s3 {
namespace {

constexpr std::string_view kS3Namespace = "http://s3.amazonaws.com/doc/2006-03-01/";

// parse_default plus:
// - parse_ws_pcdata_single keeps a text that is only white space when it is an element's only
//   child, so that a key such as " " survives (indentation between elements is still dropped);
// - parse_doctype keeps a DOCTYPE in the tree so that it can be refused (S3 never sends one).
// Entities other than the five predefined ones and character references are never expanded.
constexpr unsigned kParseOptions =
    pugi::parse_default | pugi::parse_ws_pcdata_single | pugi::parse_doctype;

// An element's name without its namespace prefix: S3 puts its elements in a default namespace,
// but nothing forbids a server from binding a prefix to it.
std::string_view LocalName(pugi::xml_node node) {
  std::string_view name = node.name();
  size_t colon = name.find(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

// The first child element called `name`, or a null node.
pugi::xml_node Child(pugi::xml_node parent, std::string_view name) {
  for (pugi::xml_node c = parent.first_child(); c; c = c.next_sibling()) {
    if (c.type() == pugi::node_element && LocalName(c) == name) return c;
  }
  return {};
}

// All the character data of an element (text and CDATA sections, concatenated).
std::string Text(pugi::xml_node node) {
  std::string out;
  for (pugi::xml_node c = node.first_child(); c; c = c.next_sibling()) {
    if (c.type() == pugi::node_pcdata || c.type() == pugi::node_cdata) out += c.value();
  }
  return out;
}

std::string ChildText(pugi::xml_node parent, std::string_view name) {
  return Text(Child(parent, name));
}

std::string_view TrimLeadingSpace(std::string_view s) {
  // AWS may send white space ahead of a CompleteMultipartUpload or CopyObject result to keep
  // the connection alive while it works; an XML declaration must come first, so drop it.
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  return s.substr(i);
}

// Parses `body` into `doc` and returns its one root element.
Result<pugi::xml_node> LoadRoot(pugi::xml_document& doc, std::string_view body,
                                std::string_view what) {
  body = TrimLeadingSpace(body);
  if (body.empty()) return InternalError("malformed " + std::string(what) + ": empty body");
  pugi::xml_parse_result parsed = doc.load_buffer(body.data(), body.size(), kParseOptions);
  if (parsed.status != pugi::status_ok) {
    return InternalError("malformed " + std::string(what) + ": " + parsed.description() +
                         " at byte " + std::to_string(parsed.offset) + " of " +
                         std::to_string(body.size()));
  }
  pugi::xml_node root;
  for (pugi::xml_node c = doc.first_child(); c; c = c.next_sibling()) {
    if (c.type() == pugi::node_doctype) {
      return InternalError("malformed " + std::string(what) + ": unexpected DOCTYPE");
    }
    if (c.type() != pugi::node_element) continue;
    if (root) {
      return InternalError("malformed " + std::string(what) + ": more than one root element");
    }
    root = c;
  }
  if (!root) return InternalError("malformed " + std::string(what) + ": no root element");
  return root;
}

S3Error ErrorFromNode(pugi::xml_node node) {
  S3Error e;
  e.code = ChildText(node, "Code");
  e.message = ChildText(node, "Message");
  e.resource = ChildText(node, "Resource");
  e.request_id = ChildText(node, "RequestId");
  return e;
}

// The root of a success response, which must be one of `names`. A 200 response whose body is
// an <Error> document becomes that error's Status.
Result<pugi::xml_node> LoadSuccessRoot(pugi::xml_document& doc, std::string_view body,
                                       std::initializer_list<std::string_view> names,
                                       std::string_view what) {
  OBJFS_ASSIGN_OR_RETURN(pugi::xml_node root, LoadRoot(doc, body, what));
  std::string_view name = LocalName(root);
  for (std::string_view n : names) {
    if (name == n) return root;
  }
  if (name == "Error") return StatusFromS3Error(200, ErrorFromNode(root), what);
  return InternalError("malformed " + std::string(what) + ": unexpected root element <" +
                       std::string(name) + ">");
}

bool ParseUnsigned(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Reads exactly `n` decimal digits from the front of `s`.
bool TakeDigits(std::string_view& s, size_t n, int& out) {
  if (s.size() < n) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = s[i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  s.remove_prefix(n);
  return true;
}

bool TakeChar(std::string_view& s, char c) {
  if (s.empty() || s.front() != c) return false;
  s.remove_prefix(1);
  return true;
}

bool IsLeapYear(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int DaysInMonth(int64_t y, int m) {
  static constexpr std::array<int, 12> kDays = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeapYear(y) ? 29 : kDays[m - 1];
}

// Days between 1970-01-01 and y-m-d in the proleptic Gregorian calendar (H. Hinnant's
// days_from_civil): what timegm computes, without the C library's time zone state.
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// Nanoseconds since the epoch for a UTC calendar time, or -1 when a field is out of range or
// the result does not fit. A leap second (:60) counts as the first second of the next minute.
int64_t ToEpochNs(int year, int month, int day, int hour, int minute, int second, int64_t nanos,
                  int64_t offset_s) {
  if (month < 1 || month > 12 || day < 1 || day > DaysInMonth(year, month)) return -1;
  if (hour > 23 || minute > 59 || second > 60) return -1;
  int64_t secs = DaysFromCivil(year, month, day) * 86400 + int64_t{hour} * 3600 +
                 int64_t{minute} * 60 + second - offset_s;
  constexpr int64_t kMaxSecs = std::numeric_limits<int64_t>::max() / 1'000'000'000 - 1;
  if (secs > kMaxSecs || secs < -kMaxSecs) return -1;
  return secs * 1'000'000'000 + nanos;
}

int MonthFromName(std::string_view name) {
  static constexpr std::array<std::string_view, 12> kMonths = {
      "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (size_t i = 0; i < kMonths.size(); ++i) {
    if (kMonths[i] == name) return static_cast<int>(i) + 1;
  }
  return 0;
}

bool IsWeekdayName(std::string_view name) {
  for (std::string_view d : {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}) {
    if (d == name) return true;
  }
  return false;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One line: a server message may span lines, a Status message must not.
std::string OneLine(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool space = false;
  for (char c : s) {
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// The StatusCode for an S3 error code, or kOk when the code alone does not decide it.
StatusCode CodeFromS3Code(std::string_view code) {
  if (code == "NoSuchKey" || code == "NoSuchBucket" || code == "NoSuchUpload") {
    return StatusCode::kNotFound;
  }
  // Expired or unknown temporary credentials are refused like wrong keys: EACCES, not EINVAL.
  if (code == "AccessDenied" || code == "SignatureDoesNotMatch" || code == "InvalidAccessKeyId" ||
      code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired") {
    return StatusCode::kPermissionDenied;
  }
  if (code == "PreconditionFailed") return StatusCode::kPreconditionFailed;
  if (code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" ||
      code == "ServiceUnavailable" || code == "Throttling") {
    return StatusCode::kTransient;
  }
  if (code == "InvalidRange") return StatusCode::kInvalidArgument;
  // RGW's bucket or user quota: the server is full for this user, like a full disk.
  if (code == "QuotaExceeded") return StatusCode::kNoSpace;
  // Retrying an operation the server does not implement cannot help.
  if (code == "NotImplemented") return StatusCode::kUnsupported;
  return StatusCode::kOk;
}

StatusCode CodeFromHttpStatus(long http_status, bool has_s3_code) {
  if (http_status == 404) return StatusCode::kNotFound;
  if (http_status == 403) return StatusCode::kPermissionDenied;
  if (http_status == 412) return StatusCode::kPreconditionFailed;
  if (http_status == 416) return StatusCode::kInvalidArgument;
  if (http_status == 429 || http_status == 408 || http_status >= 500) {
    return StatusCode::kTransient;
  }
  if (http_status >= 300) return StatusCode::kInvalidArgument;
  // An <Error> document in a 2xx response: the server refused the request.
  return has_s3_code ? StatusCode::kInvalidArgument : StatusCode::kInternal;
}

// A description for a response that brought no message of its own.
std::string_view DefaultMessage(long http_status, StatusCode code) {
  switch (http_status) {
    case 404:
      return "not found";
    case 403:
      return "access denied";
    case 412:
      return "precondition failed";
    case 416:
      return "range not satisfiable";
    case 429:
      return "too many requests";
    case 500:
      return "internal server error";
    case 502:
      return "bad gateway";
    case 503:
      return "service unavailable";
    case 504:
      return "gateway timeout";
    default:
      break;
  }
  switch (code) {
    case StatusCode::kTransient:
      return "server error";
    case StatusCode::kInvalidArgument:
      return "request refused";
    default:
      return "error response";
  }
}

}  // namespace

Result<S3Error> ParseError(std::string_view body) {
  pugi::xml_document doc;
  OBJFS_ASSIGN_OR_RETURN(pugi::xml_node root, LoadRoot(doc, body, "S3 error response"));
  if (LocalName(root) != "Error") {
    return InternalError("malformed S3 error response: unexpected root element <" +
                         std::string(LocalName(root)) + ">");
  }
  return ErrorFromNode(root);
}

Status StatusFromS3Error(long http_status, const S3Error& error, std::string_view what) {
  StatusCode code = CodeFromS3Code(error.code);
  if (code == StatusCode::kOk) code = CodeFromHttpStatus(http_status, !error.code.empty());

  std::string message(what);
  if (!message.empty()) message += ": ";
  std::string server_message = OneLine(error.message);
  if (server_message.empty()) {
    server_message =
        error.code.empty() ? std::string(DefaultMessage(http_status, code)) : error.code;
  }
  message += server_message;
  if (error.code == "SignatureDoesNotMatch") {
    message += "; the secret key does not match the access key (or the clock is wrong)";
  } else if (error.code == "InvalidAccessKeyId") {
    message += "; the server does not know this access key";
  } else if (error.code == "RequestTimeTooSkewed") {
    message += "; this machine's clock is too far from the server's";
  }
  message += " (";
  if (error.code.empty()) {
    message += "HTTP " + std::to_string(http_status);
  } else {
    message += std::to_string(http_status) + " " + OneLine(error.code);
  }
  message += ")";
  return Status(code, std::move(message), error.code);
}

Result<Listing> ParseListObjectsV2(std::string_view body, bool url_encoded) {
  constexpr std::string_view kWhat = "ListObjectsV2 response";
  pugi::xml_document doc;
  OBJFS_ASSIGN_OR_RETURN(pugi::xml_node root,
                         LoadSuccessRoot(doc, body, {"ListBucketResult"}, kWhat));
  // A server that encoded the keys says so, even if it was not asked to.
  const bool decode = url_encoded || ChildText(root, "EncodingType") == "url";
  auto name = [decode](const std::string& s) { return decode ? UrlDecode(s) : s; };
  auto malformed = [&](const std::string& why) {
    return InternalError("malformed " + std::string(kWhat) + ": " + why);
  };

  Listing listing;
  for (pugi::xml_node c = root.first_child(); c; c = c.next_sibling()) {
    if (c.type() != pugi::node_element) continue;
    std::string_view element = LocalName(c);
    if (element == "Contents") {
      pugi::xml_node key = Child(c, "Key");
      if (!key) return malformed("<Contents> without <Key>");
      ObjectInfo info;
      info.key = name(Text(key));
      if (info.key.empty()) return malformed("<Contents> with an empty <Key>");
      std::string size = ChildText(c, "Size");
      if (!ParseUnsigned(size, info.size)) {
        return malformed("<Size> of '" + info.key + "' is not a size: '" + size + "'");
      }
      info.etag = ETag::Parse(ChildText(c, "ETag"));
      if (pugi::xml_node modified = Child(c, "LastModified")) {
        std::string text = Text(modified);
        info.mtime_ns = ParseIso8601(text);
        if (info.mtime_ns == -1) {
          return malformed("<LastModified> of '" + info.key + "' is not a date: '" + text + "'");
        }
      }
      listing.objects.push_back(std::move(info));
    } else if (element == "CommonPrefixes") {
      pugi::xml_node prefix = Child(c, "Prefix");
      if (!prefix) return malformed("<CommonPrefixes> without <Prefix>");
      listing.common_prefixes.push_back(name(Text(prefix)));
    }
  }

  std::string truncated = ChildText(root, "IsTruncated");
  if (truncated == "true") {
    listing.next_token = ChildText(root, "NextContinuationToken");
    // Asking again without a token would return the same page forever.
    if (listing.next_token.empty()) {
      return malformed("<IsTruncated> is true but there is no <NextContinuationToken>");
    }
  } else if (!truncated.empty() && truncated != "false") {
    return malformed("<IsTruncated> is '" + truncated + "'");
  }
  return listing;
}

Result<std::string> ParseInitiateMultipartUpload(std::string_view body) {
  constexpr std::string_view kWhat = "InitiateMultipartUpload response";
  pugi::xml_document doc;
  OBJFS_ASSIGN_OR_RETURN(pugi::xml_node root,
                         LoadSuccessRoot(doc, body, {"InitiateMultipartUploadResult"}, kWhat));
  std::string upload_id = ChildText(root, "UploadId");
  if (upload_id.empty()) return InternalError("malformed " + std::string(kWhat) + ": no UploadId");
  return upload_id;
}

Result<ETag> ParseCompleteMultipartUpload(std::string_view body) {
  pugi::xml_document doc;
  OBJFS_ASSIGN_OR_RETURN(pugi::xml_node root,
                         LoadSuccessRoot(doc, body, {"CompleteMultipartUploadResult"},
                                         "CompleteMultipartUpload response"));
  return ETag::Parse(ChildText(root, "ETag"));
}

Result<CopyResult> ParseCopyResult(std::string_view body) {
  constexpr std::string_view kWhat = "copy response";
  pugi::xml_document doc;
  OBJFS_ASSIGN_OR_RETURN(pugi::xml_node root,
                         LoadSuccessRoot(doc, body, {"CopyObjectResult", "CopyPartResult"}, kWhat));
  CopyResult result;
  result.etag = ETag::Parse(ChildText(root, "ETag"));
  if (pugi::xml_node modified = Child(root, "LastModified")) {
    std::string text = Text(modified);
    result.mtime_ns = ParseIso8601(text);
    if (result.mtime_ns == -1) {
      return InternalError("malformed " + std::string(kWhat) + ": <LastModified> is not a date: '" +
                           text + "'");
    }
  }
  return result;
}

Result<std::vector<DeleteFailure>> ParseDeleteResult(std::string_view body) {
  pugi::xml_document doc;
  OBJFS_ASSIGN_OR_RETURN(pugi::xml_node root,
                         LoadSuccessRoot(doc, body, {"DeleteResult"}, "DeleteObjects response"));
  std::vector<DeleteFailure> failures;
  for (pugi::xml_node c = root.first_child(); c; c = c.next_sibling()) {
    if (c.type() != pugi::node_element || LocalName(c) != "Error") continue;
    DeleteFailure f;
    f.key = ChildText(c, "Key");
    f.code = ChildText(c, "Code");
    f.message = ChildText(c, "Message");
    failures.push_back(std::move(f));
  }
  return failures;
}

std::string BuildCompleteMultipartUpload(const std::vector<std::pair<int, ETag>>& parts) {
  std::string out = "<CompleteMultipartUpload xmlns=\"";
  out += kS3Namespace;
  out += "\">";
  for (const auto& [number, etag] : parts) {
    out += "<Part><PartNumber>";
    out += std::to_string(number);
    out += "</PartNumber><ETag>\"";
    out += XmlEscape(etag.value());
    out += "\"</ETag></Part>";
  }
  out += "</CompleteMultipartUpload>";
  return out;
}

std::string BuildDeleteObjects(const std::vector<std::string>& keys) {
  std::string out = "<Delete xmlns=\"";
  out += kS3Namespace;
  out += "\"><Quiet>true</Quiet>";
  for (const std::string& key : keys) {
    out += "<Object><Key>";
    out += XmlEscape(key);
    out += "</Key></Object>";
  }
  out += "</Delete>";
  return out;
}

int64_t ParseIso8601(std::string_view s) {
  int year, month, day, hour, minute, second;
  if (!TakeDigits(s, 4, year) || !TakeChar(s, '-') || !TakeDigits(s, 2, month) ||
      !TakeChar(s, '-') || !TakeDigits(s, 2, day)) {
    return -1;
  }
  if (!TakeChar(s, 'T') && !TakeChar(s, 't')) return -1;
  if (!TakeDigits(s, 2, hour) || !TakeChar(s, ':') || !TakeDigits(s, 2, minute) ||
      !TakeChar(s, ':') || !TakeDigits(s, 2, second)) {
    return -1;
  }
  int64_t nanos = 0;
  if (TakeChar(s, '.')) {
    size_t digits = 0;
    int64_t scale = 100'000'000;
    while (!s.empty() && s.front() >= '0' && s.front() <= '9') {
      nanos += (s.front() - '0') * scale;  // digits beyond the ninth are below a nanosecond
      scale /= 10;
      ++digits;
      s.remove_prefix(1);
    }
    if (digits == 0) return -1;
  }
  int64_t offset_s = 0;
  if (TakeChar(s, 'Z') || TakeChar(s, 'z')) {
    // UTC
  } else if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    const int sign = s.front() == '-' ? -1 : 1;
    s.remove_prefix(1);
    int oh, om;
    if (!TakeDigits(s, 2, oh) || !TakeChar(s, ':') || !TakeDigits(s, 2, om) || oh > 23 || om > 59) {
      return -1;
    }
    offset_s = sign * (int64_t{oh} * 3600 + int64_t{om} * 60);
  } else {
    return -1;
  }
  if (!s.empty()) return -1;
  return ToEpochNs(year, month, day, hour, minute, second, nanos, offset_s);
}

int64_t ParseHttpDate(std::string_view s) {
  // "Sun, 30 Aug 2015 12:36:00 GMT" (RFC 1123, the form HTTP/1.1 servers send).
  if (s.size() < 4 || !IsWeekdayName(s.substr(0, 3))) return -1;
  s.remove_prefix(3);
  int day, year, hour, minute, second;
  if (!TakeChar(s, ',') || !TakeChar(s, ' ')) return -1;
  if (!TakeDigits(s, 2, day) && !TakeDigits(s, 1, day)) return -1;
  if (!TakeChar(s, ' ') || s.size() < 3) return -1;
  int month = MonthFromName(s.substr(0, 3));
  if (month == 0) return -1;
  s.remove_prefix(3);
  if (!TakeChar(s, ' ') || !TakeDigits(s, 4, year) || !TakeChar(s, ' ') ||
      !TakeDigits(s, 2, hour) || !TakeChar(s, ':') || !TakeDigits(s, 2, minute) ||
      !TakeChar(s, ':') || !TakeDigits(s, 2, second)) {
    return -1;
  }
  if (s != " GMT") return -1;
  return ToEpochNs(year, month, day, hour, minute, second, 0, 0);
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\t':
      case '\n':
        out += c;
        break;
      default: {
        const auto u = static_cast<unsigned char>(c);
        // A raw CR would be read back as LF (end-of-line normalisation); other control
        // characters cannot appear raw in XML 1.0 at all.
        if (u < 0x20) {
          static constexpr char kHex[] = "0123456789ABCDEF";
          out += "&#x";
          if (u >= 0x10) out += kHex[u >> 4];
          out += kHex[u & 0xf];
          out += ';';
        } else {
          out += c;
        }
      }
    }
  }
  return out;
}

std::string UrlDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace objfs::s3
