#include "cache/codec.h"

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace objfs {
namespace {

std::array<uint8_t, 16> Md5Of(uint8_t first) {
  std::array<uint8_t, 16> md5;
  for (size_t i = 0; i < md5.size(); ++i) md5[i] = static_cast<uint8_t>(first + i);
  return md5;
}

template <typename Codec, typename Record>
std::string Encoded(const Record& record) {
  std::string out;
  Codec::Encode(record, out);
  return out;
}

// Decodes from a heap buffer of exactly the input's size, so that a read past the end is a
// heap overflow (reported by AddressSanitizer builds) rather than a read of a string's spare
// capacity.
template <typename Codec>
auto DecodeExact(std::string_view bytes) {
  std::unique_ptr<char[]> buf(new char[bytes.size()]);
  if (!bytes.empty()) std::memcpy(buf.get(), bytes.data(), bytes.size());
  return Codec::Decode(std::string_view(buf.get(), bytes.size()));
}

// Recomputes the trailing checksum, to build records that are well sealed but malformed.
std::string Reseal(std::string bytes) {
  const size_t covered = bytes.size() - 4;
  uint32_t crc = Crc32c(std::string_view(bytes).substr(0, covered));
  for (int i = 0; i < 4; ++i) bytes[covered + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  return bytes;
}

void StoreU32(std::string& bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t BitwiseCrc32c(std::string_view data) {
  uint32_t crc = 0xffffffff;
  for (unsigned char c : data) {
    crc ^= c;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78 : crc >> 1;
  }
  return ~crc;
}

ContentETagRecord SampleContentETag() {
  return {"/home/user/projects/objfs/README.md", 123456789, 1700000000123456789, Md5Of(0xa0)};
}

ObjectMetaRecord SampleObjectMeta(std::string_view etag) {
  ObjectMetaRecord r;
  r.key = "photos/2024/IMG_0001.jpg";
  r.size = 4 << 20;
  r.listed_ns = 1700000000123000000;
  r.modified_ns = -5;
  r.metadata = {{"gid", "100"},
                {"mode", "33188"},
                {"mtime", "1700000000.5"},
                {"uid", "1000"},
                {"xattr", "{\"user.k\":\"dg==\"}"}};
  r.etag = ETag::Parse(etag);
  return r;
}

StagedUploadRecord SampleStagedUpload(bool with_metadata) {
  StagedUploadRecord r;
  r.key = "logs/app.log";
  if (with_metadata) {
    r.metadata = {{"mode", "33188"}, {"mtime", "1700000000.5"}, {"xattr", "{\"user.k\":\"dg==\"}"}};
    // ... and a sparse file's base.
    r.base_key = "logs/app.log";
    r.base_etag = ETag::Parse("0123456789abcdef0123456789abcdef-2");
    r.base_size = 64 << 20;
    r.base_limit = 64 << 20;
    r.present = {{0, 1 << 20}, {64 << 20, (64 << 20) + 4096}};
  }
  return r;
}

PendingAttrsRecord SamplePendingAttrs(std::string_view etag) {
  PendingAttrsRecord r;
  r.key = "photos/2024/IMG_0001.jpg";
  r.etag = ETag::Parse(etag);
  r.metadata = {{"gid", "100"}, {"mode", "33152"}, {"mtime", "1700000001"}, {"uid", "1000"}};
  r.changed_ns = int64_t{1700000002} * 1000000000 + 123456789;
  return r;
}

// ---- CRC32C -------------------------------------------------------------------------------

TEST(Crc32cTest, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32cPortable("123456789"), 0xe3069283u);
}

TEST(Crc32cTest, MatchesABitwiseReferenceAtEveryLengthAndContinues) {
  std::mt19937 rng(42);
  std::string data(200, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t n = 0; n <= data.size(); ++n) {
    std::string_view prefix = std::string_view(data).substr(0, n);
    ASSERT_EQ(Crc32c(prefix), BitwiseCrc32c(prefix)) << "length " << n;
    ASSERT_EQ(Crc32cPortable(prefix), BitwiseCrc32c(prefix)) << "length " << n;
    const size_t split = n / 3;
    ASSERT_EQ(Crc32c(prefix.substr(split), Crc32c(prefix.substr(0, split))), Crc32c(prefix));
    ASSERT_EQ(Crc32cPortable(prefix.substr(split), Crc32cPortable(prefix.substr(0, split))),
              Crc32c(prefix));
  }
}

// ---- Round trips and layout ---------------------------------------------------------------

TEST(ContentETagCodecTest, RoundTrips) {
  for (const ContentETagRecord& r :
       {SampleContentETag(), ContentETagRecord{},
        ContentETagRecord{std::string(4096, 'p'), UINT64_MAX, INT64_MIN, Md5Of(0xf0)}}) {
    std::string bytes = Encoded<ContentETagCodec>(r);
    EXPECT_EQ(bytes.size(), ContentETagCodec::EncodedSize(r));
    auto decoded = DecodeExact<ContentETagCodec>(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, r);
  }
}

TEST(ContentETagCodecTest, WritesTheDocumentedLayout) {
  ContentETagRecord r{"ab", 0x0102030405060708, -2, Md5Of(0x10)};
  std::string bytes = Encoded<ContentETagCodec>(r);
  std::string expected(
      "\x01\x01"                           // tag, version
      "\x02\0\0\0ab"                       // path
      "\x08\x07\x06\x05\x04\x03\x02\x01"   // size
      "\xfe\xff\xff\xff\xff\xff\xff\xff",  // mtime_ns
      2 + 6 + 8 + 8);
  for (uint8_t b : r.md5) expected += static_cast<char>(b);
  ASSERT_EQ(bytes.size(), expected.size() + 4);
  EXPECT_EQ(bytes.substr(0, expected.size()), expected);
  EXPECT_EQ(bytes, Reseal(bytes));  // the last four bytes are the CRC32C of the rest
}

TEST(ContentETagCodecTest, EncodeAppends) {
  std::string out = "prefix";
  ContentETagCodec::Encode(SampleContentETag(), out);
  ASSERT_EQ(out.substr(0, 6), "prefix");
  auto decoded = ContentETagCodec::Decode(std::string_view(out).substr(6));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, SampleContentETag());
}

TEST(ObjectMetaCodecTest, RoundTripsEveryETagKind) {
  for (std::string_view etag : {"", "0123456789abcdef0123456789abcdef",
                                "0123456789abcdef0123456789abcdef-12", "opaque-etag/xyz"}) {
    ObjectMetaRecord r = SampleObjectMeta(etag);
    std::string bytes = Encoded<ObjectMetaCodec>(r);
    EXPECT_EQ(bytes.size(), ObjectMetaCodec::EncodedSize(r));
    auto decoded = DecodeExact<ObjectMetaCodec>(bytes);
    ASSERT_TRUE(decoded.ok()) << etag << ": " << decoded.status().ToString();
    EXPECT_EQ(*decoded, r);
    EXPECT_EQ(decoded->etag.kind(), r.etag.kind()) << etag;
    EXPECT_EQ(decoded->etag.parts(), r.etag.parts()) << etag;
  }
}

TEST(ObjectMetaCodecTest, RoundTripsNoMetadataAndEmptyValues) {
  ObjectMetaRecord r = SampleObjectMeta("0123456789abcdef0123456789abcdef");
  r.metadata.clear();
  auto decoded = DecodeExact<ObjectMetaCodec>(Encoded<ObjectMetaCodec>(r));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, r);
  r.metadata = {{"", ""}, {"a", ""}};
  decoded = DecodeExact<ObjectMetaCodec>(Encoded<ObjectMetaCodec>(r));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, r);
}

TEST(StagedUploadCodecTest, RoundTripsWithAndWithoutMetadata) {
  for (bool with_metadata : {true, false}) {
    StagedUploadRecord r = SampleStagedUpload(with_metadata);
    std::string bytes = Encoded<StagedUploadCodec>(r);
    EXPECT_EQ(bytes.size(), StagedUploadCodec::EncodedSize(r));
    auto decoded = DecodeExact<StagedUploadCodec>(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, r);
  }
  // Names and values are bytes: newlines, '=' and NULs survive.
  StagedUploadRecord odd{std::string("a\nb=c\0d", 8), {{std::string("n\0=", 3), "v\r\n"}}};
  auto decoded = DecodeExact<StagedUploadCodec>(Encoded<StagedUploadCodec>(odd));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, odd);
}

TEST(PendingAttrsCodecTest, RoundTripsEveryKindOfETag) {
  for (std::string_view etag : {"", "0123456789abcdef0123456789abcdef",
                                "0123456789abcdef0123456789abcdef-3", "v1:opaque"}) {
    PendingAttrsRecord r = SamplePendingAttrs(etag);
    std::string bytes = Encoded<PendingAttrsCodec>(r);
    EXPECT_EQ(bytes.size(), PendingAttrsCodec::EncodedSize(r));
    auto decoded = DecodeExact<PendingAttrsCodec>(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, r);
    EXPECT_EQ(decoded->etag.kind(), r.etag.kind());
  }
}

// Version 1 had no time of the change: such a record (a crash under an older build) still
// decodes, with changed_ns 0, which recovery takes as "not known".
TEST(PendingAttrsCodecTest, DecodesAVersionOneRecord) {
  const std::string etag = "0123456789abcdef0123456789abcdef";
  PendingAttrsRecord r = SamplePendingAttrs(etag);
  std::string v1 = Encoded<PendingAttrsCodec>(r);
  const size_t changed_at = 2 + 4 + r.key.size() + 1 + 4 + etag.size();
  v1.erase(changed_at, 8);
  v1[1] = 1;
  auto decoded = DecodeExact<PendingAttrsCodec>(Reseal(v1));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  r.changed_ns = 0;
  EXPECT_EQ(*decoded, r);
  // The same bytes claiming version 2 are a record cut short.
  v1[1] = 2;
  EXPECT_FALSE(DecodeExact<PendingAttrsCodec>(Reseal(v1)).ok());
  v1[1] = 3;
  EXPECT_NE(DecodeExact<PendingAttrsCodec>(Reseal(v1)).status().message().find("unknown version"),
            std::string::npos);
}

TEST(TombstoneCodecTest, RoundTrips) {
  TombstoneRecord r{ObjectMetaCodec::kTag, "dir/file"};
  auto decoded = DecodeExact<TombstoneCodec>(Encoded<TombstoneCodec>(r));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, r);
}

TEST(OpenUploadCodecTest, RoundTripsBothKindsOfUpload) {
  for (const OpenUploadRecord& r :
       {OpenUploadRecord{"dir/big.iso", "2~hZ3mD9hXAb-Q0uTz0xFJqzMy3y7wg2N"},
        OpenUploadRecord{"/srv/data/dir/.objfs-tmp-0123456789abcdef", ""}}) {
    std::string bytes = Encoded<OpenUploadCodec>(r);
    EXPECT_EQ(bytes.size(), OpenUploadCodec::EncodedSize(r));
    auto decoded = DecodeExact<OpenUploadCodec>(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, r);
  }
}

TEST(OpenUploadCodecTest, RejectsARecordWithoutAName) {
  std::string bytes = Encoded<OpenUploadCodec>(OpenUploadRecord{"", "id"});
  EXPECT_NE(DecodeExact<OpenUploadCodec>(bytes).status().message().find("no name"),
            std::string::npos);
}

void ExpectCorrupt(const Status& status, std::string_view why);

DataBlockRecord SampleDataBlock(std::string_view etag) {
  DataBlockRecord r;
  r.name = "0123456789abcdef0123456789abcdef";
  r.key = "datasets/train/shard-0001.tfrecord";
  r.etag = ETag::Parse(etag);
  r.offset = uint64_t{5} << 30;
  r.block_size = 1 << 20;
  r.length = 12345;
  r.crc32c = 0xdeadbeef;
  r.stamp = 42;
  return r;
}

TEST(DataBlockCodecTest, RoundTripsEveryKindOfVersion) {
  for (std::string_view etag : {"\"0123456789abcdef0123456789abcdef\"",
                                "\"0123456789abcdef0123456789abcdef-12\"", "v1-4096-17000000001"}) {
    const DataBlockRecord r = SampleDataBlock(etag);
    std::string bytes = Encoded<DataBlockCodec>(r);
    EXPECT_EQ(bytes.size(), DataBlockCodec::EncodedSize(r));
    auto decoded = DecodeExact<DataBlockCodec>(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, r);
  }
}

TEST(DataBlockCodecTest, RejectsCorruptAndImpossibleRecords) {
  const DataBlockRecord good = SampleDataBlock("\"0123456789abcdef0123456789abcdef\"");
  std::string bytes = Encoded<DataBlockCodec>(good);
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::string flipped = bytes;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x01);
    EXPECT_FALSE(DecodeExact<DataBlockCodec>(flipped).ok()) << "byte " << at;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeExact<DataBlockCodec>(bytes.substr(0, n)).ok()) << n << " bytes";
  }
  ExpectCorrupt(DecodeExact<DataBlockCodec>(Reseal(bytes + "x")).status(), "trailing bytes");

  DataBlockRecord r = good;
  r.length = r.block_size + 1;
  ExpectCorrupt(DecodeExact<DataBlockCodec>(Encoded<DataBlockCodec>(r)).status(), "block range");
  r = good;
  r.length = 0;
  ExpectCorrupt(DecodeExact<DataBlockCodec>(Encoded<DataBlockCodec>(r)).status(), "block range");
  r = good;
  r.offset += 1;
  ExpectCorrupt(DecodeExact<DataBlockCodec>(Encoded<DataBlockCodec>(r)).status(), "block range");
  r = good;
  r.name.clear();
  ExpectCorrupt(DecodeExact<DataBlockCodec>(Encoded<DataBlockCodec>(r)).status(), "no name");
}

// ---- Rejections of well-sealed but malformed records --------------------------------------

void ExpectCorrupt(const Status& status, std::string_view why) {
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(why), std::string::npos) << status.ToString();
}

TEST(ContentETagCodecTest, RejectsMalformedRecordsWithValidChecksums) {
  const std::string good = Encoded<ContentETagCodec>(SampleContentETag());

  std::string wrong_tag = good;
  wrong_tag[0] = static_cast<char>(ObjectMetaCodec::kTag);
  ExpectCorrupt(DecodeExact<ContentETagCodec>(Reseal(wrong_tag)).status(), "wrong record tag");

  std::string new_version = good;
  new_version[1] = 2;
  ExpectCorrupt(DecodeExact<ContentETagCodec>(Reseal(new_version)).status(), "unknown version");

  std::string long_path = good;
  StoreU32(long_path, 2, static_cast<uint32_t>(SampleContentETag().path.size() + 1));
  ExpectCorrupt(DecodeExact<ContentETagCodec>(Reseal(long_path)).status(), "past the end");

  std::string huge_path = good;
  StoreU32(huge_path, 2, UINT32_MAX);
  ExpectCorrupt(DecodeExact<ContentETagCodec>(Reseal(huge_path)).status(), "past the end");

  std::string trailing = good;
  trailing.insert(trailing.size() - 4, "x");
  ExpectCorrupt(DecodeExact<ContentETagCodec>(Reseal(trailing)).status(), "trailing bytes");

  std::string bad_crc = good;
  bad_crc.back() ^= 1;
  ExpectCorrupt(DecodeExact<ContentETagCodec>(bad_crc).status(), "checksum");

  ExpectCorrupt(DecodeExact<ContentETagCodec>("").status(), "truncated");
}

TEST(ObjectMetaCodecTest, DropsVersionTwoRecordsWhichLackTheHeadersKeptAsMetadata) {
  ObjectMetaRecord r = SampleObjectMeta("0123456789abcdef0123456789abcdef");
  r.metadata[":cache-control"] = "max-age=60";
  const std::string good = Encoded<ObjectMetaCodec>(r);
  auto decoded = DecodeExact<ObjectMetaCodec>(good);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, r);

  std::string version_two = good;
  version_two[1] = 2;
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(version_two)).status(), "unknown version");
}

TEST(ObjectMetaCodecTest, RejectsInvalidETagText) {
  const ObjectMetaRecord plain = SampleObjectMeta("0123456789abcdef0123456789abcdef");
  const std::string good = Encoded<ObjectMetaCodec>(plain);
  const size_t etag_text_at = good.size() - 4 - 32;
  const size_t kind_at = etag_text_at - 4 - 1;
  ASSERT_TRUE(DecodeExact<ObjectMetaCodec>(good).ok());

  std::string upper = good;
  upper[etag_text_at + 10] = 'A';  // Parse lowercases: not what Encode writes
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(upper)).status(), "invalid ETag");

  std::string not_hex = good;
  not_hex[etag_text_at] = 'z';  // parses as opaque, but the record says plain MD5
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(not_hex)).status(), "invalid ETag");

  std::string says_multipart = good;
  says_multipart[kind_at] = 2;
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(says_multipart)).status(), "invalid ETag");

  std::string says_none = good;
  says_none[kind_at] = 0;  // no ETag, yet text
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(says_none)).status(), "invalid ETag");

  std::string unknown_kind = good;
  unknown_kind[kind_at] = 9;
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(unknown_kind)).status(), "unknown ETag kind");

  // An opaque ETag with a line break (it would go into an If-Match header as it is).
  ObjectMetaRecord broken = SampleObjectMeta("opaque");
  std::string b = Encoded<ObjectMetaCodec>(broken);
  b[b.size() - 4 - 3] = '\n';
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(b)).status(), "invalid ETag");

  // Text that Parse would trim or unquote is not canonical either.
  ObjectMetaRecord quoted = SampleObjectMeta("opaque");
  std::string q = Encoded<ObjectMetaCodec>(quoted);
  q.insert(q.size() - 4 - 6, "\"");
  q.insert(q.size() - 4, "\"");
  StoreU32(q, q.size() - 4 - 8 - 4, 8);
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(q)).status(), "invalid ETag");
}

TEST(ObjectMetaCodecTest, RejectsMetadataOutOfOrderOrPastTheEnd) {
  ObjectMetaRecord r = SampleObjectMeta("");
  r.metadata = {{"a", "1"}, {"b", "2"}};
  const std::string good = Encoded<ObjectMetaCodec>(r);
  ASSERT_TRUE(DecodeExact<ObjectMetaCodec>(good).ok());
  // The pairs follow key, size, listed_ns and modified_ns: "a" is at count + 4.
  const size_t count_at = 2 + 4 + r.key.size() + 8 + 8 + 8;
  std::string swapped = good;
  swapped[count_at + 4 + 4] = 'b';  // "b", "1", "b", "2": not strictly increasing
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(swapped)).status(), "out of order");
  std::string huge = good;
  StoreU32(huge, count_at, 0x40000000);
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(huge)).status(), "past the end");
  std::string one_more = good;
  StoreU32(one_more, count_at, 3);
  ExpectCorrupt(DecodeExact<ObjectMetaCodec>(Reseal(one_more)).status(), "past the end");
}

TEST(StagedUploadCodecTest, RejectsTheFirstVersionAndMetadataOutOfOrder) {
  // Version 1 had a size, a time and an MD5 where the metadata now is.
  std::string v1 = Encoded<StagedUploadCodec>(SampleStagedUpload(false));
  v1[1] = 1;
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(v1)).status(), "unknown version");

  StagedUploadRecord r{"k", {{"a", "1"}, {"b", "2"}}};
  std::string swapped = Encoded<StagedUploadCodec>(r);
  // tag, version, key, state, size, metadata count, first name's length.
  const size_t first_name_at = 2 + 4 + r.key.size() + 1 + 8 + 4 + 4;
  ASSERT_EQ(swapped[first_name_at], 'a');
  swapped[first_name_at] = 'b';
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(swapped)).status(), "out of order");
}

// What version 4 appends to a record without a base: an empty key, an ETag of kind none with
// an empty text, base size, base limit and an extent count of zero.
constexpr size_t kNoBaseBytes = 4 + 1 + 4 + 8 + 8 + 4;
// What version 5 appends to a record whose encryption is not known: the flag 0 and two empty
// strings.
constexpr size_t kNoEncryptionBytes = 1 + 4 + 4;
// What version 6 appends to a record without a condition: 0, an ETag of kind none with an empty
// text.
constexpr size_t kNoConditionBytes = 1 + 1 + 4;

// Version 4 names the object a sparse staging file was staged from and the ranges it holds.
TEST(StagedUploadCodecTest, CarriesTheBaseOfASparseFile) {
  StagedUploadRecord sparse{"k", {{"mode", "33188"}}, StagedUploadRecord::State::kAccepted, 70};
  sparse.base_key = "old/name";
  sparse.base_etag = ETag::Parse("0123456789abcdef0123456789abcdef");
  sparse.base_size = 64;
  sparse.base_limit = 60;
  sparse.present = {{0, 4}, {10, 12}, {60, 70}};
  std::string bytes = Encoded<StagedUploadCodec>(sparse);
  EXPECT_EQ(bytes.size(), StagedUploadCodec::EncodedSize(sparse));
  auto decoded = DecodeExact<StagedUploadCodec>(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, sparse);

  // The extents: in order, disjoint and not empty, or the record is not trusted.
  const size_t extents_at = bytes.size() - 4 - kNoConditionBytes - kNoEncryptionBytes - 3 * 16;
  std::string overlapping = bytes;
  overlapping[extents_at + 16] = 3;  // the second starts at 3, inside the first
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(overlapping)).status(), "out of order");
  std::string empty_extent = bytes;
  empty_extent[extents_at + 8] = 0;  // [0, 0)
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(empty_extent)).status(), "out of order");
  std::string past_size = bytes;
  past_size[extents_at - 4 - 8] = 65;  // base limit 65 of a 64-byte base
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(past_size)).status(), "past its size");
  std::string too_many = bytes;
  too_many[extents_at - 4] = 4;  // four extents, three there
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(too_many)).status(), "past the end");
}

// Version 5 names the encryption of the object the data came from, where it was known: SSE-KMS
// with its key, none (a file created here), or not known.
TEST(StagedUploadCodecTest, CarriesTheEncryptionOfTheObjectTheDataCameFrom) {
  StagedUploadRecord r{"k", {{"mode", "33188"}}, StagedUploadRecord::State::kAccepted, 42};
  for (const std::optional<AtRestEncryption>& encryption :
       {std::optional<AtRestEncryption>(AtRestEncryption{"aws:kms", "testkey-2"}),
        std::optional<AtRestEncryption>(AtRestEncryption{"AES256", ""}),
        std::optional<AtRestEncryption>(AtRestEncryption{}), std::optional<AtRestEncryption>()}) {
    r.encryption = encryption;
    std::string bytes = Encoded<StagedUploadCodec>(r);
    EXPECT_EQ(bytes.size(), StagedUploadCodec::EncodedSize(r));
    auto decoded = DecodeExact<StagedUploadCodec>(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(decoded->encryption, encryption);
    EXPECT_EQ(*decoded, r);
  }

  r.encryption.reset();
  const std::string unknown = Encoded<StagedUploadCodec>(r);
  std::string bad_flag = unknown;
  bad_flag[unknown.size() - 4 - kNoConditionBytes - kNoEncryptionBytes] = 2;
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(bad_flag)).status(), "encryption flag");

  // A version 4 record (objfs before this) decodes with the encryption not known.
  std::string v4 = unknown;
  v4.erase(v4.size() - 4 - kNoConditionBytes - kNoEncryptionBytes,
           kNoEncryptionBytes + kNoConditionBytes);
  v4[1] = 4;
  auto old = DecodeExact<StagedUploadCodec>(Reseal(v4));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(*old, r);
  EXPECT_FALSE(old->encryption.has_value());
}

// The condition of the upload: what the mount that accepted the data asked of the key, which
// the next mount's upload asks too.
TEST(StagedUploadCodecTest, CarriesTheConditionOfTheUpload) {
  StagedUploadRecord r{"k", {{"mode", "33188"}}, StagedUploadRecord::State::kAccepted, 42};
  for (const UploadCondition& condition :
       {UploadCondition{}, UploadCondition{ETag::Parse("0123456789abcdef0123456789abcdef"), false},
        UploadCondition{ETag::Parse("0123456789abcdef0123456789abcdef-3"), false},
        UploadCondition{std::nullopt, true}}) {
    r.condition = condition;
    std::string bytes = Encoded<StagedUploadCodec>(r);
    EXPECT_EQ(bytes.size(), StagedUploadCodec::EncodedSize(r));
    auto decoded = DecodeExact<StagedUploadCodec>(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(decoded->condition, condition);
    EXPECT_EQ(*decoded, r);
  }

  r.condition = UploadCondition{};
  const std::string none = Encoded<StagedUploadCodec>(r);
  const size_t condition_at = none.size() - 4 - kNoConditionBytes;
  std::string unknown = none;
  unknown[condition_at] = 3;
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(unknown)).status(), "unknown condition");
  std::string if_match_without_etag = none;
  if_match_without_etag[condition_at] = 1;
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(if_match_without_etag)).status(),
                "without an ETag");
  r.condition = UploadCondition{ETag::Parse("0123456789abcdef0123456789abcdef"), false};
  std::string etag_without_if_match = Encoded<StagedUploadCodec>(r);
  etag_without_if_match[condition_at] = 2;
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(etag_without_if_match)).status(),
                "without an If-Match");

  // A version 5 record (objfs before this) decodes with no condition.
  std::string v5 = none;
  v5.erase(condition_at, kNoConditionBytes);
  v5[1] = 5;
  r.condition = UploadCondition{};
  auto old = DecodeExact<StagedUploadCodec>(Reseal(v5));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(*old, r);
}

// Version 3 records (objfs before sparse staging) decode as whole data.
TEST(StagedUploadCodecTest, ReadsVersionThreeAsWholeData) {
  StagedUploadRecord accepted{"k", {{"mode", "33188"}}, StagedUploadRecord::State::kAccepted, 42};
  std::string v3 = Encoded<StagedUploadCodec>(accepted);
  v3.erase(v3.size() - 4 - kNoConditionBytes - kNoEncryptionBytes - kNoBaseBytes,
           kNoConditionBytes + kNoEncryptionBytes + kNoBaseBytes);
  v3[1] = 3;
  auto old = DecodeExact<StagedUploadCodec>(Reseal(v3));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(*old, accepted);
  EXPECT_TRUE(old->base_key.empty());
}

// Version 3 says whether a close accepted the data, and its size then. Version 2 records still
// decode, as data being written: they did not say.
TEST(StagedUploadCodecTest, CarriesStateAndSizeAndReadsVersionTwo) {
  StagedUploadRecord accepted{"k", {{"mode", "33188"}}, StagedUploadRecord::State::kAccepted, 42};
  auto decoded = DecodeExact<StagedUploadCodec>(Encoded<StagedUploadCodec>(accepted));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, accepted);

  // A version 2 record as objfs 0.2 wrote it: tag, version, key, metadata, CRC.
  std::string v2 = Encoded<StagedUploadCodec>(accepted);
  v2.erase(v2.size() - 4 - kNoConditionBytes - kNoEncryptionBytes - kNoBaseBytes,
           kNoConditionBytes + kNoEncryptionBytes + kNoBaseBytes);
  v2.erase(2 + 4 + accepted.key.size(), 1 + 8);
  v2[1] = 2;
  auto old = DecodeExact<StagedUploadCodec>(Reseal(v2));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->key, "k");
  EXPECT_EQ(old->metadata, accepted.metadata);
  EXPECT_EQ(old->state, StagedUploadRecord::State::kWriting);

  std::string bad_state = Encoded<StagedUploadCodec>(accepted);
  bad_state[2 + 4 + accepted.key.size()] = 7;
  ExpectCorrupt(DecodeExact<StagedUploadCodec>(Reseal(bad_state)).status(), "unknown state");
}

TEST(PendingAttrsCodecTest, RejectsAnETagOfTheWrongKind) {
  std::string good =
      Encoded<PendingAttrsCodec>(SamplePendingAttrs("0123456789abcdef0123456789abcdef"));
  const size_t kind_at = 2 + 4 + SamplePendingAttrs("").key.size();
  std::string says_multipart = good;
  says_multipart[kind_at] = 2;
  ExpectCorrupt(DecodeExact<PendingAttrsCodec>(Reseal(says_multipart)).status(), "invalid ETag");
  std::string unknown_kind = good;
  unknown_kind[kind_at] = 9;
  ExpectCorrupt(DecodeExact<PendingAttrsCodec>(Reseal(unknown_kind)).status(), "unknown ETag kind");
}

TEST(CodecTest, EachCodecRejectsTheOthersRecords) {
  const std::string content = Encoded<ContentETagCodec>(SampleContentETag());
  const std::string meta = Encoded<ObjectMetaCodec>(SampleObjectMeta(""));
  const std::string staged = Encoded<StagedUploadCodec>(SampleStagedUpload(true));
  const std::string attrs = Encoded<PendingAttrsCodec>(SamplePendingAttrs(""));
  const std::string tombstone = Encoded<TombstoneCodec>(TombstoneRecord{1, "k"});
  const std::string upload = Encoded<OpenUploadCodec>(OpenUploadRecord{"k", "id"});
  for (const std::string& other : {content, meta, staged, attrs, tombstone}) {
    EXPECT_FALSE(DecodeExact<OpenUploadCodec>(other).ok());
  }
  EXPECT_FALSE(DecodeExact<StagedUploadCodec>(upload).ok());
  EXPECT_FALSE(DecodeExact<TombstoneCodec>(upload).ok());
  for (const std::string& other : {meta, staged, attrs, tombstone}) {
    EXPECT_FALSE(DecodeExact<ContentETagCodec>(other).ok());
  }
  for (const std::string& other : {content, staged, attrs, tombstone}) {
    EXPECT_FALSE(DecodeExact<ObjectMetaCodec>(other).ok());
  }
  for (const std::string& other : {content, meta, attrs, tombstone}) {
    EXPECT_FALSE(DecodeExact<StagedUploadCodec>(other).ok());
  }
  for (const std::string& other : {content, meta, staged, tombstone}) {
    EXPECT_FALSE(DecodeExact<PendingAttrsCodec>(other).ok());
  }
  for (const std::string& other : {content, meta, staged, attrs}) {
    EXPECT_FALSE(DecodeExact<TombstoneCodec>(other).ok());
  }
}

// A byte inserted before the checksum, or a first string claiming one byte more (which shifts
// every later field), must be rejected by structure alone: the checksum is recomputed to match.
template <typename Codec>
void ExpectSealedLengthErrorsRejected(const std::string& good) {
  std::string trailing = good;
  trailing.insert(trailing.size() - 4, 1, '\0');
  ExpectCorrupt(DecodeExact<Codec>(Reseal(trailing)).status(), "trailing bytes");
  std::string overlong = good;
  const size_t first_string_at = Codec::kTag == TombstoneCodec::kTag ? 3 : 2;
  overlong[first_string_at] = static_cast<char>(overlong[first_string_at] + 1);
  EXPECT_FALSE(DecodeExact<Codec>(Reseal(overlong)).ok());
}

TEST(CodecTest, EveryCodecChecksLengthsEvenWhenTheChecksumMatches) {
  ExpectSealedLengthErrorsRejected<ContentETagCodec>(
      Encoded<ContentETagCodec>(SampleContentETag()));
  ExpectSealedLengthErrorsRejected<ObjectMetaCodec>(
      Encoded<ObjectMetaCodec>(SampleObjectMeta("0123456789abcdef0123456789abcdef")));
  ExpectSealedLengthErrorsRejected<StagedUploadCodec>(
      Encoded<StagedUploadCodec>(SampleStagedUpload(true)));
  ExpectSealedLengthErrorsRejected<StagedUploadCodec>(
      Encoded<StagedUploadCodec>(SampleStagedUpload(false)));
  ExpectSealedLengthErrorsRejected<PendingAttrsCodec>(
      Encoded<PendingAttrsCodec>(SamplePendingAttrs("0123456789abcdef0123456789abcdef-3")));
  ExpectSealedLengthErrorsRejected<TombstoneCodec>(
      Encoded<TombstoneCodec>(TombstoneRecord{ContentETagCodec::kTag, "a/b/c"}));
  ExpectSealedLengthErrorsRejected<OpenUploadCodec>(
      Encoded<OpenUploadCodec>(OpenUploadRecord{"a/b/c", "upload-id"}));
}

// ---- Exhaustive damage: every truncation, every flipped byte, random corruption -----------

// Every strict prefix, every extension by one byte, and every byte of `good` xor-ed with each
// of nine masks must be rejected: structure fixes the length, and a CRC32C detects every error
// burst of up to 32 bits. Random multi-byte damage must be rejected too (a seeded generator, so
// a checksum collision, at odds of 2^-32 per trial, would fail every run, not some).
template <typename Codec>
void ExpectEveryDamageRejected(const std::string& good) {
  ASSERT_TRUE(DecodeExact<Codec>(good).ok());
  for (size_t n = 0; n < good.size(); ++n) {
    ASSERT_FALSE(DecodeExact<Codec>(std::string_view(good).substr(0, n)).ok())
        << "accepted a truncation to " << n << " of " << good.size() << " bytes";
  }
  for (int extra = 0; extra < 256; ++extra) {
    ASSERT_FALSE(DecodeExact<Codec>(good + static_cast<char>(extra)).ok()) << extra;
  }
  constexpr uint8_t kMasks[] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff};
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : kMasks) {
      std::string damaged = good;
      damaged[i] = static_cast<char>(damaged[i] ^ mask);
      ASSERT_FALSE(DecodeExact<Codec>(damaged).ok())
          << "accepted byte " << i << " xor " << static_cast<int>(mask);
    }
  }
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 5000; ++trial) {
    std::string damaged = good;
    const int flips = 2 + static_cast<int>(rng() % 6);
    for (int f = 0; f < flips; ++f) {
      damaged[rng() % damaged.size()] ^= static_cast<char>(1 + rng() % 255);
    }
    if (damaged == good) continue;
    if (rng() % 4 == 0) damaged.resize(rng() % damaged.size());
    ASSERT_FALSE(DecodeExact<Codec>(damaged).ok()) << "trial " << trial;
  }
}

TEST(CodecDamageTest, ContentETag) {
  ExpectEveryDamageRejected<ContentETagCodec>(Encoded<ContentETagCodec>(SampleContentETag()));
  ExpectEveryDamageRejected<ContentETagCodec>(Encoded<ContentETagCodec>(ContentETagRecord{}));
}

TEST(CodecDamageTest, ObjectMeta) {
  for (std::string_view etag : {"", "0123456789abcdef0123456789abcdef",
                                "0123456789abcdef0123456789abcdef-3", "v1:opaque"}) {
    ExpectEveryDamageRejected<ObjectMetaCodec>(Encoded<ObjectMetaCodec>(SampleObjectMeta(etag)));
  }
}

TEST(CodecDamageTest, StagedUpload) {
  for (bool with_metadata : {true, false}) {
    ExpectEveryDamageRejected<StagedUploadCodec>(
        Encoded<StagedUploadCodec>(SampleStagedUpload(with_metadata)));
  }
}

TEST(CodecDamageTest, PendingAttrs) {
  for (std::string_view etag : {"", "0123456789abcdef0123456789abcdef",
                                "0123456789abcdef0123456789abcdef-3", "v1:opaque"}) {
    ExpectEveryDamageRejected<PendingAttrsCodec>(
        Encoded<PendingAttrsCodec>(SamplePendingAttrs(etag)));
  }
}

TEST(CodecDamageTest, OpenUpload) {
  ExpectEveryDamageRejected<OpenUploadCodec>(
      Encoded<OpenUploadCodec>(OpenUploadRecord{"dir/big.iso", "2~upload-id"}));
  ExpectEveryDamageRejected<OpenUploadCodec>(
      Encoded<OpenUploadCodec>(OpenUploadRecord{"/srv/.objfs-tmp-0123456789abcdef", ""}));
}

TEST(CodecDamageTest, Tombstone) {
  ExpectEveryDamageRejected<TombstoneCodec>(
      Encoded<TombstoneCodec>(TombstoneRecord{ContentETagCodec::kTag, "a/b/c"}));
}

}  // namespace
}  // namespace objfs
