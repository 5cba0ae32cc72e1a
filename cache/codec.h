// Binary codecs for the records of cache/records.h, one hand-written codec per record type.
//
// The records are read back at every mount and on hot lookups (the content ETag of an SFTP
// file), and they come from disk, where a crash leaves truncated tails and media leave flipped
// bits. Each codec therefore writes a fixed layout with no field names or generic machinery,
// and its Decode trusts nothing: it checks the type tag, the version, every length against the
// bytes that are actually there, that nothing trails the record, and a CRC32C over all of it.
//
// Layout (all integers little-endian, fixed width):
//   tag u8 | version u8 | fields in declaration order | crc32c u32 of everything before it
// A string is a u32 byte count followed by the bytes. Field orders are listed per codec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "backend/status.h"
#include "cache/records.h"

namespace objfs {

// CRC32C (Castagnoli) of `data`, continuing from `crc` (0 to start). Uses the CPU's CRC32C
// instruction where there is one (x86-64 with SSE4.2), else Crc32cPortable.
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);
// The same CRC, table-driven (eight bytes per step), on any CPU.
uint32_t Crc32cPortable(std::string_view data, uint32_t crc = 0);

// Encode() appends the record to `out` (so a caller can frame it without a copy). Its strings
// must be shorter than 4 GiB (the store takes records of at most 1 MiB).
// Decode() takes exactly one encoded record: any other input is an error, never a partial or
// guessed record. On success it allocates only the strings the record owns.

// path, size u64, mtime_ns i64, md5[16].
class ContentETagCodec {
 public:
  static constexpr uint8_t kTag = 0x01;
  static constexpr uint8_t kVersion = 1;
  static size_t EncodedSize(const ContentETagRecord& record);
  static void Encode(const ContentETagRecord& record, std::string& out);
  static Result<ContentETagRecord> Decode(std::string_view in);
  static const std::string& Key(const ContentETagRecord& record) { return record.path; }
};

// key, size u64, listed_ns i64, modified_ns i64, metadata count u32, (name, value) * count in
// strictly increasing name order, etag kind u8, etag text. The ETag text must be exactly what
// ETag::Parse makes of it, and of the stated kind. (Version 1 held mode, uid and gid instead
// of the metadata; such records are dropped. So are version 2 records, of the same layout:
// their metadata lacks the headers kept as metadata (":cache-control" and the rest,
// backend/object_store.h), and a chmod trusting one would drop those headers.)
class ObjectMetaCodec {
 public:
  static constexpr uint8_t kTag = 0x02;
  static constexpr uint8_t kVersion = 3;
  static size_t EncodedSize(const ObjectMetaRecord& record);
  static void Encode(const ObjectMetaRecord& record, std::string& out);
  static Result<ObjectMetaRecord> Decode(std::string_view in);
  static const std::string& Key(const ObjectMetaRecord& record) { return record.key; }
};

// key, state u8, size u64, metadata count u32, (name, value) * count in strictly increasing
// name order, base key, base etag kind u8, base etag text, base size u64, base limit u64,
// extent count u32, (start u64, end u64) * count, increasing, disjoint and not touching. The
// base ETag is checked as in ObjectMetaCodec, then encryption known u8 (0 or 1), algorithm,
// KMS key id (both empty when not known), then the condition u8 (0 none, 1 If-Match, 2
// If-None-Match) and its ETag (kind u8, text; kind none and empty unless If-Match, where it is
// not empty and checked as the base's). Version 5 records (without the condition) still decode,
// with none: such an upload replaces what the key holds, as that objfs's recovery did. Version
// 4 records (without the encryption) still decode, with it not known. Version 3 records (without
// the base) still decode, as whole data. Version 2 records (key and metadata only) still decode, as
// kWriting with size 0: they did not say whether a close had accepted the data. (Version 1 held a
// size, a time and an MD5 instead of the metadata; such records do not decode.)
class StagedUploadCodec {
 public:
  static constexpr uint8_t kTag = 0x03;
  static constexpr uint8_t kVersion = 6;
  static size_t EncodedSize(const StagedUploadRecord& record);
  static void Encode(const StagedUploadRecord& record, std::string& out);
  static Result<StagedUploadRecord> Decode(std::string_view in);
  static const std::string& Key(const StagedUploadRecord& record) { return record.key; }
};

// key, etag kind u8, etag text, changed_ns i64, metadata count u32, (name, value) * count in
// strictly increasing name order. The ETag is checked as in ObjectMetaCodec. Version 1 records
// (without changed_ns) still decode, with changed_ns 0.
class PendingAttrsCodec {
 public:
  static constexpr uint8_t kTag = 0x04;
  static constexpr uint8_t kVersion = 2;
  static size_t EncodedSize(const PendingAttrsRecord& record);
  static void Encode(const PendingAttrsRecord& record, std::string& out);
  static Result<PendingAttrsRecord> Decode(std::string_view in);
  static const std::string& Key(const PendingAttrsRecord& record) { return record.key; }
};

// name, upload_id.
class OpenUploadCodec {
 public:
  static constexpr uint8_t kTag = 0x05;
  static constexpr uint8_t kVersion = 1;
  static size_t EncodedSize(const OpenUploadRecord& record);
  static void Encode(const OpenUploadRecord& record, std::string& out);
  static Result<OpenUploadRecord> Decode(std::string_view in);
  static const std::string& Key(const OpenUploadRecord& record) { return record.name; }
};

// name, key, etag kind u8, etag text, offset u64, block_size u32, length u32, crc32c u32,
// stamp u64. The ETag is checked as in ObjectMetaCodec; the name must not be empty, the length
// must be 1..block_size and the offset a multiple of block_size.
class DataBlockCodec {
 public:
  static constexpr uint8_t kTag = 0x06;
  static constexpr uint8_t kVersion = 1;
  static size_t EncodedSize(const DataBlockRecord& record);
  static void Encode(const DataBlockRecord& record, std::string& out);
  static Result<DataBlockRecord> Decode(std::string_view in);
  static const std::string& Key(const DataBlockRecord& record) { return record.name; }
};

// record_tag u8, key.
class TombstoneCodec {
 public:
  static constexpr uint8_t kTag = 0x7f;
  static constexpr uint8_t kVersion = 1;
  static size_t EncodedSize(const TombstoneRecord& record);
  static void Encode(const TombstoneRecord& record, std::string& out);
  static Result<TombstoneRecord> Decode(std::string_view in);
  static const std::string& Key(const TombstoneRecord& record) { return record.key; }
};

// The codec of each record type, for code written once for all of them (the store).
template <typename Record>
struct CodecFor;
template <>
struct CodecFor<ContentETagRecord> {
  using type = ContentETagCodec;
};
template <>
struct CodecFor<ObjectMetaRecord> {
  using type = ObjectMetaCodec;
};
template <>
struct CodecFor<StagedUploadRecord> {
  using type = StagedUploadCodec;
};
template <>
struct CodecFor<PendingAttrsRecord> {
  using type = PendingAttrsCodec;
};
template <>
struct CodecFor<OpenUploadRecord> {
  using type = OpenUploadCodec;
};
template <>
struct CodecFor<DataBlockRecord> {
  using type = DataBlockCodec;
};
template <>
struct CodecFor<TombstoneRecord> {
  using type = TombstoneCodec;
};

}  // namespace objfs
