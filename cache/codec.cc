#include "cache/codec.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstring>
#include <map>
#include <utility>

namespace objfs {
namespace {

// ---- CRC32C -------------------------------------------------------------------------------

using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr CrcTables MakeCrcTables() {
  constexpr uint32_t kReflectedPoly = 0x82f63b78;  // Castagnoli, bit-reversed
  CrcTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kReflectedPoly : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
  return t;
}

constexpr CrcTables kCrcTables = MakeCrcTables();

// ---- Little-endian fixed-width integers ---------------------------------------------------

inline uint32_t ToLe(uint32_t v) {
  if constexpr (std::endian::native == std::endian::big) return __builtin_bswap32(v);
  return v;
}
inline uint64_t ToLe(uint64_t v) {
  if constexpr (std::endian::native == std::endian::big) return __builtin_bswap64(v);
  return v;
}
inline uint32_t LoadLe32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return ToLe(v);
}
inline uint64_t LoadLe64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return ToLe(v);
}

constexpr size_t kHeaderBytes = 2;  // tag, version
constexpr size_t kCrcBytes = 4;
constexpr size_t kFramingBytes = kHeaderBytes + kCrcBytes;
constexpr size_t kStringBytes = 4;  // the u32 byte count before a string

// Writes one record into space reserved at the end of `out`; Seal() appends the checksum.
class Writer {
 public:
  Writer(std::string& out, size_t encoded_size, uint8_t tag, uint8_t version)
      : out_(out), start_(out.size()) {
    out.resize(start_ + encoded_size);
    p_ = out.data() + start_;
    U8(tag);
    U8(version);
  }
  void U8(uint8_t v) { *p_++ = static_cast<char>(v); }
  void U32(uint32_t v) {
    v = ToLe(v);
    std::memcpy(p_, &v, sizeof(v));
    p_ += sizeof(v);
  }
  void U64(uint64_t v) {
    v = ToLe(v);
    std::memcpy(p_, &v, sizeof(v));
    p_ += sizeof(v);
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Bytes(const void* data, size_t n) {
    std::memcpy(p_, data, n);
    p_ += n;
  }
  void String(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  void Seal() {
    const char* begin = out_.data() + start_;
    U32(Crc32c(std::string_view(begin, static_cast<size_t>(p_ - begin))));
    assert(p_ == out_.data() + out_.size());
  }

 private:
  std::string& out_;
  size_t start_;
  char* p_;
};

// Reads the fields of a record body; every read checks the bytes left first.
class Reader {
 public:
  explicit Reader(std::string_view body) : p_(body.data()), end_(body.data() + body.size()) {}
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  bool U8(uint8_t& v) {
    if (left() < 1) return false;
    v = static_cast<uint8_t>(*p_++);
    return true;
  }
  bool U32(uint32_t& v) {
    if (left() < 4) return false;
    v = LoadLe32(p_);
    p_ += 4;
    return true;
  }
  bool U64(uint64_t& v) {
    if (left() < 8) return false;
    v = LoadLe64(p_);
    p_ += 8;
    return true;
  }
  bool I64(int64_t& v) {
    uint64_t u;
    if (!U64(u)) return false;
    v = static_cast<int64_t>(u);
    return true;
  }
  bool Bytes(void* out, size_t n) {
    if (left() < n) return false;
    std::memcpy(out, p_, n);
    p_ += n;
    return true;
  }
  bool StringView(std::string_view& s) {
    uint32_t n;
    if (!U32(n) || left() < n) return false;
    s = std::string_view(p_, n);
    p_ += n;
    return true;
  }
  bool String(std::string& s) {
    std::string_view v;
    if (!StringView(v)) return false;
    s.assign(v.data(), v.size());
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

[[gnu::cold, gnu::noinline]] Status Corrupt(const char* type, const char* why) {
  std::string m = "corrupt ";
  m += type;
  m += " record: ";
  m += why;
  return InternalError(std::move(m));
}

// Checks what every record shares (size, tag, version, checksum) and returns the bytes between
// the header and the checksum. `min_body` is the smallest body the type can have.
[[gnu::always_inline]] inline Status CheckEnvelope(std::string_view in, uint8_t tag,
                                                   uint8_t version, size_t min_body,
                                                   const char* type, std::string_view& body) {
  if (in.size() < kFramingBytes + min_body) return Corrupt(type, "truncated");
  if (static_cast<uint8_t>(in[0]) != tag) return Corrupt(type, "wrong record tag");
  if (static_cast<uint8_t>(in[1]) != version) return Corrupt(type, "unknown version");
  const size_t covered = in.size() - kCrcBytes;
  if (Crc32c(in.substr(0, covered)) != LoadLe32(in.data() + covered)) {
    return Corrupt(type, "checksum mismatch");
  }
  body = in.substr(kHeaderBytes, covered - kHeaderBytes);
  return Status::Ok();
}

uint8_t ETagKindByte(ETag::Kind kind) {
  switch (kind) {
    case ETag::Kind::kNone:
      return 0;
    case ETag::Kind::kPlainMd5:
      return 1;
    case ETag::Kind::kMultipart:
      return 2;
    case ETag::Kind::kOpaque:
      return 3;
  }
  return 0;
}

bool ETagKindFromByte(uint8_t b, ETag::Kind& kind) {
  switch (b) {
    case 0:
      kind = ETag::Kind::kNone;
      return true;
    case 1:
      kind = ETag::Kind::kPlainMd5;
      return true;
    case 2:
      kind = ETag::Kind::kMultipart;
      return true;
    case 3:
      kind = ETag::Kind::kOpaque;
      return true;
    default:
      return false;
  }
}

using MetadataMap = std::map<std::string, std::string>;

size_t MetadataBytes(const MetadataMap& metadata) {
  size_t size = 4;  // the count
  for (const auto& [name, value] : metadata) size += 2 * kStringBytes + name.size() + value.size();
  return size;
}

void WriteMetadata(Writer& w, const MetadataMap& metadata) {
  w.U32(static_cast<uint32_t>(metadata.size()));
  for (const auto& [name, value] : metadata) {
    w.String(name);
    w.String(value);
  }
}

// Reads a count and that many (name, value) pairs in strictly increasing name order.
Status ReadMetadata(Reader& r, const char* type, MetadataMap& metadata) {
  uint32_t count = 0;
  if (!r.U32(count)) return Corrupt(type, "length past the end");
  // Each pair takes at least two length fields: a count the bytes cannot hold is corrupt
  // before anything is allocated for it.
  if (count > r.left() / (2 * kStringBytes)) return Corrupt(type, "length past the end");
  std::string_view previous;
  for (uint32_t i = 0; i < count; ++i) {
    std::string_view name, value;
    if (!r.StringView(name) || !r.StringView(value)) return Corrupt(type, "length past the end");
    if (i > 0 && name <= previous) return Corrupt(type, "metadata out of order");
    previous = name;
    metadata.emplace_hint(metadata.end(), name, value);
  }
  return Status::Ok();
}

size_t ETagBytes(const ETag& etag) { return 1 + kStringBytes + etag.value().size(); }

void WriteETag(Writer& w, const ETag& etag) {
  w.U8(ETagKindByte(etag.kind()));
  w.String(etag.value());
}

// Reads a kind byte and the ETag's text. Only the canonical text of the stated kind is
// accepted: what Parse would change was not written by WriteETag.
Status ReadETag(Reader& r, const char* type, ETag& etag) {
  uint8_t kind_byte = 0;
  std::string_view text;
  if (!r.U8(kind_byte) || !r.StringView(text)) return Corrupt(type, "length past the end");
  ETag::Kind kind;
  if (!ETagKindFromByte(kind_byte, kind)) return Corrupt(type, "unknown ETag kind");
  if (kind != ETag::Kind::kNone || !text.empty()) {
    etag = ETag::Parse(text);
    if (etag.kind() != kind || etag.value() != text) return Corrupt(type, "invalid ETag");
    // It goes into request headers (If-Match): no line break or other control character.
    if (std::any_of(text.begin(), text.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      return Corrupt(type, "invalid ETag");
    }
  }
  return Status::Ok();
}

}  // namespace

uint32_t Crc32cPortable(std::string_view data, uint32_t crc) {
  const auto& t = kCrcTables;
  const char* p = data.data();
  size_t n = data.size();
  crc = ~crc;
  while (n >= 8) {
    uint64_t word = LoadLe64(p) ^ crc;
    crc = t[7][word & 0xff] ^ t[6][(word >> 8) & 0xff] ^ t[5][(word >> 16) & 0xff] ^
          t[4][(word >> 24) & 0xff] ^ t[3][(word >> 32) & 0xff] ^ t[2][(word >> 40) & 0xff] ^
          t[1][(word >> 48) & 0xff] ^ t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = t[0][(crc ^ static_cast<uint8_t>(*p++)) & 0xff] ^ (crc >> 8);
  return ~crc;
}

#if defined(__x86_64__)
namespace {

// The SSE4.2 crc32 instruction computes exactly this CRC (same polynomial, same bit order).
[[gnu::target("sse4.2")]] uint32_t Crc32cSse42(std::string_view data, uint32_t crc) {
  const char* p = data.data();
  size_t n = data.size();
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));
    c = __builtin_ia32_crc32di(c, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  if (n >= 4) {
    uint32_t word;
    std::memcpy(&word, p, sizeof(word));
    c32 = __builtin_ia32_crc32si(c32, word);
    p += 4;
    n -= 4;
  }
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, static_cast<uint8_t>(*p++));
  return ~c32;
}

bool DetectSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}

// Read without a guard on every call; a call during static initialisation that runs before
// this is set sees false and takes the portable path, which gives the same result.
const bool kHasSse42 = DetectSse42();

}  // namespace

uint32_t Crc32c(std::string_view data, uint32_t crc) {
  return kHasSse42 ? Crc32cSse42(data, crc) : Crc32cPortable(data, crc);
}
#else
uint32_t Crc32c(std::string_view data, uint32_t crc) { return Crc32cPortable(data, crc); }
#endif

// ---- ContentETagCodec ---------------------------------------------------------------------

namespace {
constexpr size_t kContentETagFixedBody = kStringBytes + 8 + 8 + 16;
}  // namespace

size_t ContentETagCodec::EncodedSize(const ContentETagRecord& record) {
  return kFramingBytes + kContentETagFixedBody + record.path.size();
}

void ContentETagCodec::Encode(const ContentETagRecord& record, std::string& out) {
  Writer w(out, EncodedSize(record), kTag, kVersion);
  w.String(record.path);
  w.U64(record.size);
  w.I64(record.mtime_ns);
  w.Bytes(record.md5.data(), record.md5.size());
  w.Seal();
}

Result<ContentETagRecord> ContentETagCodec::Decode(std::string_view in) {
  static constexpr char kType[] = "content ETag";
  std::string_view body;
  if (Status s = CheckEnvelope(in, kTag, kVersion, kContentETagFixedBody, kType, body); !s.ok()) {
    return s;
  }
  // The only variable-size field is the path, so its length fixes the size of the whole body.
  const uint32_t path_size = LoadLe32(body.data());
  if (body.size() - kContentETagFixedBody != path_size) {
    return Corrupt(kType, path_size > body.size() - kContentETagFixedBody
                              ? "path length past the end"
                              : "trailing bytes");
  }
  const char* path = body.data() + kStringBytes;
  const char* p = path + path_size;
  Result<ContentETagRecord> record(ContentETagRecord{
      std::string(path, path_size), LoadLe64(p), static_cast<int64_t>(LoadLe64(p + 8)), {}});
  std::memcpy(record->md5.data(), p + 16, record->md5.size());
  return record;
}

// ---- ObjectMetaCodec ----------------------------------------------------------------------

namespace {
// key, size, listed_ns, modified_ns, metadata count, etag kind, etag text length.
constexpr size_t kObjectMetaFixedBody = kStringBytes + 8 + 8 + 8 + 4 + 1 + kStringBytes;
}  // namespace

size_t ObjectMetaCodec::EncodedSize(const ObjectMetaRecord& record) {
  return kFramingBytes + kStringBytes + record.key.size() + 8 + 8 + 8 +
         MetadataBytes(record.metadata) + ETagBytes(record.etag);
}

void ObjectMetaCodec::Encode(const ObjectMetaRecord& record, std::string& out) {
  Writer w(out, EncodedSize(record), kTag, kVersion);
  w.String(record.key);
  w.U64(record.size);
  w.I64(record.listed_ns);
  w.I64(record.modified_ns);
  WriteMetadata(w, record.metadata);
  WriteETag(w, record.etag);
  w.Seal();
}

Result<ObjectMetaRecord> ObjectMetaCodec::Decode(std::string_view in) {
  static constexpr char kType[] = "object metadata";
  std::string_view body;
  if (Status s = CheckEnvelope(in, kTag, kVersion, kObjectMetaFixedBody, kType, body); !s.ok()) {
    return s;
  }
  Reader r(body);
  ObjectMetaRecord record;
  if (!r.String(record.key) || !r.U64(record.size) || !r.I64(record.listed_ns) ||
      !r.I64(record.modified_ns)) {
    return Corrupt(kType, "length past the end");
  }
  OBJFS_RETURN_IF_ERROR(ReadMetadata(r, kType, record.metadata));
  OBJFS_RETURN_IF_ERROR(ReadETag(r, kType, record.etag));
  if (r.left() != 0) return Corrupt(kType, "trailing bytes");
  return record;
}

// ---- StagedUploadCodec --------------------------------------------------------------------

namespace {
// key length, metadata count (and state, size from version 3; base key length, base ETag kind
// and text length, base size, base limit, extent count from version 4).
constexpr size_t kStagedUploadV2FixedBody = kStringBytes + 4;
constexpr size_t kStagedUploadV3FixedBody = kStagedUploadV2FixedBody + 1 + 8;
constexpr size_t kStagedUploadV4FixedBody =
    kStagedUploadV3FixedBody + kStringBytes + 1 + kStringBytes + 8 + 8 + 4;
// (encryption known, algorithm length, KMS key id length from version 5)
constexpr size_t kStagedUploadV5FixedBody = kStagedUploadV4FixedBody + 1 + 2 * kStringBytes;
// (condition, its ETag's kind and text length from version 6)
constexpr size_t kStagedUploadFixedBody = kStagedUploadV5FixedBody + 1 + 1 + kStringBytes;
enum : uint8_t { kNoCondition = 0, kIfMatch = 1, kIfNoneMatch = 2 };
}  // namespace

size_t StagedUploadCodec::EncodedSize(const StagedUploadRecord& record) {
  return kFramingBytes + kStringBytes + record.key.size() + 1 + 8 + MetadataBytes(record.metadata) +
         kStringBytes + record.base_key.size() + ETagBytes(record.base_etag) + 8 + 8 + 4 +
         record.present.size() * 16 + 1 + 2 * kStringBytes +
         (record.encryption
              ? record.encryption->algorithm.size() + record.encryption->kms_key_id.size()
              : 0) +
         1 + ETagBytes(record.condition.if_match.value_or(ETag()));
}

void StagedUploadCodec::Encode(const StagedUploadRecord& record, std::string& out) {
  Writer w(out, EncodedSize(record), kTag, kVersion);
  w.String(record.key);
  w.U8(static_cast<uint8_t>(record.state));
  w.U64(record.size);
  WriteMetadata(w, record.metadata);
  w.String(record.base_key);
  WriteETag(w, record.base_etag);
  w.U64(record.base_size);
  w.U64(record.base_limit);
  w.U32(static_cast<uint32_t>(record.present.size()));
  for (const auto& [start, end] : record.present) {
    w.U64(start);
    w.U64(end);
  }
  w.U8(record.encryption ? 1 : 0);
  w.String(record.encryption ? record.encryption->algorithm : std::string());
  w.String(record.encryption ? record.encryption->kms_key_id : std::string());
  w.U8(record.condition.if_match        ? kIfMatch
       : record.condition.if_none_match ? kIfNoneMatch
                                        : kNoCondition);
  WriteETag(w, record.condition.if_match.value_or(ETag()));
  w.Seal();
}

Result<StagedUploadRecord> StagedUploadCodec::Decode(std::string_view in) {
  static constexpr char kType[] = "staged upload";
  const uint8_t version = in.size() > 1 ? static_cast<uint8_t>(in[1]) : 0;
  const bool v2 = version == 2;
  const bool v3 = version == 3;
  const bool v4 = version == 4;
  const bool v5 = version == 5;
  std::string_view body;
  if (Status s = CheckEnvelope(in, kTag, v2 || v3 || v4 || v5 ? version : kVersion,
                               v2   ? kStagedUploadV2FixedBody
                               : v3 ? kStagedUploadV3FixedBody
                               : v4 ? kStagedUploadV4FixedBody
                               : v5 ? kStagedUploadV5FixedBody
                                    : kStagedUploadFixedBody,
                               kType, body);
      !s.ok()) {
    return s;
  }
  Reader r(body);
  StagedUploadRecord record;
  if (!r.String(record.key)) return Corrupt(kType, "length past the end");
  if (!v2) {
    uint8_t state = 0;
    if (!r.U8(state) || !r.U64(record.size)) return Corrupt(kType, "length past the end");
    if (state > static_cast<uint8_t>(StagedUploadRecord::State::kAccepted)) {
      return Corrupt(kType, "unknown state");
    }
    record.state = static_cast<StagedUploadRecord::State>(state);
  }
  OBJFS_RETURN_IF_ERROR(ReadMetadata(r, kType, record.metadata));
  if (!v2 && !v3) {
    if (!r.String(record.base_key)) return Corrupt(kType, "length past the end");
    OBJFS_RETURN_IF_ERROR(ReadETag(r, kType, record.base_etag));
    uint32_t count = 0;
    if (!r.U64(record.base_size) || !r.U64(record.base_limit) || !r.U32(count)) {
      return Corrupt(kType, "length past the end");
    }
    if (count > r.left() / 16) return Corrupt(kType, "extent count past the end");
    if (record.base_limit > record.base_size) return Corrupt(kType, "base limit past its size");
    record.present.reserve(count);
    uint64_t last_end = 0;
    for (uint32_t i = 0; i < count; ++i) {
      uint64_t start = 0, end = 0;
      if (!r.U64(start) || !r.U64(end)) return Corrupt(kType, "length past the end");
      if (start >= end || (i > 0 && start <= last_end)) {
        return Corrupt(kType, "extents out of order");
      }
      last_end = end;
      record.present.emplace_back(start, end);
    }
  }
  if (!v2 && !v3 && !v4) {
    uint8_t known = 0;
    AtRestEncryption encryption;
    if (!r.U8(known) || !r.String(encryption.algorithm) || !r.String(encryption.kms_key_id)) {
      return Corrupt(kType, "length past the end");
    }
    if (known > 1) return Corrupt(kType, "unknown encryption flag");
    if (known == 0 && (!encryption.algorithm.empty() || !encryption.kms_key_id.empty())) {
      return Corrupt(kType, "encryption named but not known");
    }
    if (known == 1) record.encryption = std::move(encryption);
  }
  if (!v2 && !v3 && !v4 && !v5) {
    uint8_t condition = 0;
    ETag etag;
    if (!r.U8(condition)) return Corrupt(kType, "length past the end");
    OBJFS_RETURN_IF_ERROR(ReadETag(r, kType, etag));
    if (condition > kIfNoneMatch) return Corrupt(kType, "unknown condition");
    if ((condition == kIfMatch) == etag.empty()) {
      return Corrupt(kType, "an If-Match without an ETag, or an ETag without an If-Match");
    }
    if (condition == kIfMatch) record.condition.if_match = std::move(etag);
    record.condition.if_none_match = condition == kIfNoneMatch;
  }
  if (r.left() != 0) return Corrupt(kType, "trailing bytes");
  return record;
}

// ---- PendingAttrsCodec --------------------------------------------------------------------

namespace {
// key length, etag kind, etag text length, metadata count (and changed_ns from version 2).
constexpr size_t kPendingAttrsV1FixedBody = kStringBytes + 1 + kStringBytes + 4;
constexpr size_t kPendingAttrsFixedBody = kPendingAttrsV1FixedBody + 8;
}  // namespace

size_t PendingAttrsCodec::EncodedSize(const PendingAttrsRecord& record) {
  return kFramingBytes + kStringBytes + record.key.size() + ETagBytes(record.etag) + 8 +
         MetadataBytes(record.metadata);
}

void PendingAttrsCodec::Encode(const PendingAttrsRecord& record, std::string& out) {
  Writer w(out, EncodedSize(record), kTag, kVersion);
  w.String(record.key);
  WriteETag(w, record.etag);
  w.I64(record.changed_ns);
  WriteMetadata(w, record.metadata);
  w.Seal();
}

Result<PendingAttrsRecord> PendingAttrsCodec::Decode(std::string_view in) {
  static constexpr char kType[] = "pending metadata change";
  // Records of the previous version (no time) are still applied, by their ETag alone.
  const bool v1 = in.size() > 1 && static_cast<uint8_t>(in[1]) == 1;
  std::string_view body;
  if (Status s = CheckEnvelope(in, kTag, v1 ? 1 : kVersion,
                               v1 ? kPendingAttrsV1FixedBody : kPendingAttrsFixedBody, kType, body);
      !s.ok()) {
    return s;
  }
  Reader r(body);
  PendingAttrsRecord record;
  if (!r.String(record.key)) return Corrupt(kType, "length past the end");
  OBJFS_RETURN_IF_ERROR(ReadETag(r, kType, record.etag));
  if (!v1 && !r.I64(record.changed_ns)) return Corrupt(kType, "length past the end");
  OBJFS_RETURN_IF_ERROR(ReadMetadata(r, kType, record.metadata));
  if (r.left() != 0) return Corrupt(kType, "trailing bytes");
  return record;
}

// ---- OpenUploadCodec ----------------------------------------------------------------------

namespace {
constexpr size_t kOpenUploadFixedBody = 2 * kStringBytes;
}  // namespace

size_t OpenUploadCodec::EncodedSize(const OpenUploadRecord& record) {
  return kFramingBytes + kOpenUploadFixedBody + record.name.size() + record.upload_id.size();
}

void OpenUploadCodec::Encode(const OpenUploadRecord& record, std::string& out) {
  Writer w(out, EncodedSize(record), kTag, kVersion);
  w.String(record.name);
  w.String(record.upload_id);
  w.Seal();
}

Result<OpenUploadRecord> OpenUploadCodec::Decode(std::string_view in) {
  static constexpr char kType[] = "open upload";
  std::string_view body;
  if (Status s = CheckEnvelope(in, kTag, kVersion, kOpenUploadFixedBody, kType, body); !s.ok()) {
    return s;
  }
  Reader r(body);
  OpenUploadRecord record;
  if (!r.String(record.name) || !r.String(record.upload_id)) {
    return Corrupt(kType, "length past the end");
  }
  if (r.left() != 0) return Corrupt(kType, "trailing bytes");
  if (record.name.empty()) return Corrupt(kType, "no name");
  return record;
}

// ---- DataBlockCodec -----------------------------------------------------------------------

namespace {
// name length, key length, etag kind, etag text length, offset, block_size, length, crc, stamp.
constexpr size_t kDataBlockFixedBody = 2 * kStringBytes + 1 + kStringBytes + 8 + 4 + 4 + 4 + 8;
}  // namespace

size_t DataBlockCodec::EncodedSize(const DataBlockRecord& record) {
  return kFramingBytes + 2 * kStringBytes + record.name.size() + record.key.size() +
         ETagBytes(record.etag) + 8 + 4 + 4 + 4 + 8;
}

void DataBlockCodec::Encode(const DataBlockRecord& record, std::string& out) {
  Writer w(out, EncodedSize(record), kTag, kVersion);
  w.String(record.name);
  w.String(record.key);
  WriteETag(w, record.etag);
  w.U64(record.offset);
  w.U32(record.block_size);
  w.U32(record.length);
  w.U32(record.crc32c);
  w.U64(record.stamp);
  w.Seal();
}

Result<DataBlockRecord> DataBlockCodec::Decode(std::string_view in) {
  static constexpr char kType[] = "data block";
  std::string_view body;
  if (Status s = CheckEnvelope(in, kTag, kVersion, kDataBlockFixedBody, kType, body); !s.ok()) {
    return s;
  }
  Reader r(body);
  DataBlockRecord record;
  if (!r.String(record.name) || !r.String(record.key)) {
    return Corrupt(kType, "length past the end");
  }
  OBJFS_RETURN_IF_ERROR(ReadETag(r, kType, record.etag));
  if (!r.U64(record.offset) || !r.U32(record.block_size) || !r.U32(record.length) ||
      !r.U32(record.crc32c) || !r.U64(record.stamp)) {
    return Corrupt(kType, "length past the end");
  }
  if (r.left() != 0) return Corrupt(kType, "trailing bytes");
  if (record.name.empty()) return Corrupt(kType, "no name");
  if (record.block_size == 0 || record.length == 0 || record.length > record.block_size ||
      record.offset % record.block_size != 0) {
    return Corrupt(kType, "bad block range");
  }
  return record;
}

// ---- TombstoneCodec -----------------------------------------------------------------------

namespace {
constexpr size_t kTombstoneFixedBody = 1 + kStringBytes;
}  // namespace

size_t TombstoneCodec::EncodedSize(const TombstoneRecord& record) {
  return kFramingBytes + kTombstoneFixedBody + record.key.size();
}

void TombstoneCodec::Encode(const TombstoneRecord& record, std::string& out) {
  Writer w(out, EncodedSize(record), kTag, kVersion);
  w.U8(record.record_tag);
  w.String(record.key);
  w.Seal();
}

Result<TombstoneRecord> TombstoneCodec::Decode(std::string_view in) {
  static constexpr char kType[] = "tombstone";
  std::string_view body;
  if (Status s = CheckEnvelope(in, kTag, kVersion, kTombstoneFixedBody, kType, body); !s.ok()) {
    return s;
  }
  Reader r(body);
  TombstoneRecord record;
  if (!r.U8(record.record_tag) || !r.String(record.key)) {
    return Corrupt(kType, "length past the end");
  }
  if (r.left() != 0) return Corrupt(kType, "trailing bytes");
  return record;
}

}  // namespace objfs
