// Encode and decode throughput of the typed record codecs (cache/codec.h) against a generic
// key=value text encoding of the same records, parsed through a std::map<string, string> the way
// a reflective or JSON codec would. items/s is records encoded or decoded per second.
#include <benchmark/benchmark.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cache/codec.h"

namespace objfs {
namespace {

constexpr size_t kRecords = 256;  // rotated through so that one record's branches are not learned

std::array<uint8_t, 16> Md5Of(size_t seed) {
  std::array<uint8_t, 16> md5;
  for (size_t i = 0; i < md5.size(); ++i) md5[i] = static_cast<uint8_t>(seed * 31 + i * 7);
  return md5;
}

std::string PathOf(size_t i) {
  // 30 to 60 bytes: typical of a home directory or bucket path.
  std::string p = "/home/user/projects/data/dir" + std::to_string(i % 17) + "/file-" +
                  std::to_string(i) + ".bin";
  p.append(i % 23, 'x');
  return p;
}

std::vector<ContentETagRecord> ContentETagRecords() {
  std::vector<ContentETagRecord> v;
  for (size_t i = 0; i < kRecords; ++i) {
    v.push_back(
        {PathOf(i), 1000 + i * 4096, 1700000000000000000 + static_cast<int64_t>(i), Md5Of(i)});
  }
  return v;
}

std::vector<ObjectMetaRecord> ObjectMetaRecords() {
  std::vector<ObjectMetaRecord> v;
  for (size_t i = 0; i < kRecords; ++i) {
    ObjectMetaRecord r;
    r.key = PathOf(i).substr(1);
    r.size = 1000 + i * 4096;
    r.listed_ns = 1700000000000000000 + static_cast<int64_t>(i) * 1000000;
    r.modified_ns = r.listed_ns / 1000000000 * 1000000000;
    r.etag = i % 4 == 0 ? ETag::Parse(HexMd5(Md5Of(i)) + "-" + std::to_string(i % 9 + 1))
                        : ETag::FromMd5(Md5Of(i));
    // What objfs and s3fs write: mode, owner and mtime.
    r.metadata = {{"gid", "1000"},
                  {"mode", "33188"},
                  {"mtime", std::to_string(1700000000 + i)},
                  {"uid", "1000"}};
    v.push_back(std::move(r));
  }
  return v;
}

// What objfs writes beside a staged file, and for a held chmod or touch: mode, owner, mtime.
std::map<std::string, std::string> MetadataOf(size_t i) {
  return {{"gid", "1000"},
          {"mode", i % 3 == 0 ? "33261" : "33188"},
          {"mtime", std::to_string(1700000000 + i) + "." + std::to_string(i % 1000)},
          {"uid", "1000"}};
}

std::vector<StagedUploadRecord> StagedUploadRecords() {
  std::vector<StagedUploadRecord> v;
  for (size_t i = 0; i < kRecords; ++i) {
    StagedUploadRecord r{PathOf(i).substr(1), MetadataOf(i)};
    if (i % 2 == 0) {  // a sparse file: its base and the ranges written or fetched
      r.base_key = r.key;
      r.base_etag = ETag::FromMd5(Md5Of(i));
      r.base_size = uint64_t{64} << 20;
      r.base_limit = r.base_size;
      r.present = {{0, 1 << 20}, {r.base_size, r.base_size + 4096}};
    }
    v.push_back(std::move(r));
  }
  return v;
}

std::vector<PendingAttrsRecord> PendingAttrsRecords() {
  std::vector<PendingAttrsRecord> v;
  for (size_t i = 0; i < kRecords; ++i) {
    v.push_back({PathOf(i).substr(1),
                 i % 4 == 0 ? ETag::Parse(HexMd5(Md5Of(i)) + "-" + std::to_string(i % 9 + 1))
                            : ETag::FromMd5(Md5Of(i)),
                 MetadataOf(i), 1700000000000000000 + static_cast<int64_t>(i) * 1000003});
  }
  return v;
}

// The disk cache's index: one record per cached block of a few objects.
std::vector<DataBlockRecord> DataBlockRecords() {
  std::vector<DataBlockRecord> v;
  for (size_t i = 0; i < kRecords; ++i) {
    v.push_back({.name = HexMd5(Md5Of(i)),
                 .key = PathOf(i / 16).substr(1),
                 .etag = ETag::FromMd5(Md5Of(i / 16)),
                 .offset = uint64_t{i % 16} << 20,
                 .block_size = 1 << 20,
                 .length = 1 << 20,
                 .crc32c = static_cast<uint32_t>(i * 2654435761u),
                 .stamp = i});
  }
  return v;
}

template <typename Record>
std::vector<Record> Records();
template <>
std::vector<ContentETagRecord> Records() {
  return ContentETagRecords();
}
template <>
std::vector<ObjectMetaRecord> Records() {
  return ObjectMetaRecords();
}
template <>
std::vector<StagedUploadRecord> Records() {
  return StagedUploadRecords();
}
template <>
std::vector<PendingAttrsRecord> Records() {
  return PendingAttrsRecords();
}
template <>
std::vector<DataBlockRecord> Records() {
  return DataBlockRecords();
}

// ---- The generic baseline -----------------------------------------------------------------

using Fields = std::map<std::string, std::string>;

// "name=value\n" per field, values escaped for '\n' and '\\'.
void PutField(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out += '=';
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out += c;
    }
  }
  out += '\n';
}

void PutField(std::string& out, std::string_view name, uint64_t value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  PutField(out, name, std::string_view(buf, static_cast<size_t>(end - buf)));
}

void PutField(std::string& out, std::string_view name, int64_t value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  PutField(out, name, std::string_view(buf, static_cast<size_t>(end - buf)));
}

bool ParseFields(std::string_view in, Fields& fields) {
  while (!in.empty()) {
    size_t nl = in.find('\n');
    if (nl == std::string_view::npos) return false;
    std::string_view line = in.substr(0, nl);
    in.remove_prefix(nl + 1);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return false;
    std::string value;
    for (size_t i = eq + 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        value += line[++i] == 'n' ? '\n' : line[i];
      } else {
        value += line[i];
      }
    }
    fields[std::string(line.substr(0, eq))] = std::move(value);
  }
  return true;
}

template <typename Int>
bool GetInt(const Fields& fields, const std::string& name, Int& out) {
  auto it = fields.find(name);
  if (it == fields.end()) return false;
  const std::string& s = it->second;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool GetString(const Fields& fields, const std::string& name, std::string& out) {
  auto it = fields.find(name);
  if (it == fields.end()) return false;
  out = it->second;
  return true;
}

bool GetMd5(const Fields& fields, const std::string& name, std::array<uint8_t, 16>& out) {
  auto it = fields.find(name);
  if (it == fields.end() || it->second.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    auto [ptr, ec] =
        std::from_chars(it->second.data() + 2 * i, it->second.data() + 2 * i + 2, out[i], 16);
    if (ec != std::errc() || ptr != it->second.data() + 2 * i + 2) return false;
  }
  return true;
}

// The "meta.NAME" fields, as a metadata map.
void GetMetadata(const Fields& fields, std::map<std::string, std::string>& out) {
  out.clear();
  for (const auto& [name, value] : fields) {
    if (name.starts_with("meta.")) out.emplace(name.substr(5), value);
  }
}

void GenericEncode(const ContentETagRecord& r, std::string& out) {
  PutField(out, "type", "content_etag");
  PutField(out, "path", r.path);
  PutField(out, "size", r.size);
  PutField(out, "mtime_ns", r.mtime_ns);
  PutField(out, "md5", HexMd5(r.md5));
}

bool GenericDecode(std::string_view in, ContentETagRecord& r) {
  Fields f;
  return ParseFields(in, f) && f["type"] == "content_etag" && GetString(f, "path", r.path) &&
         GetInt(f, "size", r.size) && GetInt(f, "mtime_ns", r.mtime_ns) && GetMd5(f, "md5", r.md5);
}

void GenericEncode(const ObjectMetaRecord& r, std::string& out) {
  PutField(out, "type", "object_meta");
  PutField(out, "key", r.key);
  PutField(out, "size", r.size);
  PutField(out, "listed_ns", r.listed_ns);
  PutField(out, "modified_ns", r.modified_ns);
  PutField(out, "etag_kind", ETagKindName(r.etag.kind()));
  PutField(out, "etag", r.etag.value());
  for (const auto& [name, value] : r.metadata) PutField(out, "meta." + name, value);
}

bool GenericDecode(std::string_view in, ObjectMetaRecord& r) {
  Fields f;
  if (!ParseFields(in, f) || f["type"] != "object_meta" || !GetString(f, "key", r.key) ||
      !GetInt(f, "size", r.size) || !GetInt(f, "listed_ns", r.listed_ns) ||
      !GetInt(f, "modified_ns", r.modified_ns)) {
    return false;
  }
  GetMetadata(f, r.metadata);
  r.etag = ETag::Parse(f["etag"]);
  return ETagKindName(r.etag.kind()) == f["etag_kind"];
}

void GenericEncode(const StagedUploadRecord& r, std::string& out) {
  PutField(out, "type", "staged_upload");
  PutField(out, "key", r.key);
  for (const auto& [name, value] : r.metadata) PutField(out, "meta." + name, value);
  if (r.base_key.empty()) return;
  PutField(out, "base_key", r.base_key);
  PutField(out, "base_etag", r.base_etag.value());
  PutField(out, "base_size", std::to_string(r.base_size));
  PutField(out, "base_limit", std::to_string(r.base_limit));
  std::string present;
  for (const auto& [start, end] : r.present) {
    present += std::to_string(start) + "-" + std::to_string(end) + ",";
  }
  PutField(out, "present", present);
}

bool GenericDecode(std::string_view in, StagedUploadRecord& r) {
  Fields f;
  if (!ParseFields(in, f) || f["type"] != "staged_upload" || !GetString(f, "key", r.key)) {
    return false;
  }
  GetMetadata(f, r.metadata);
  if (!GetString(f, "base_key", r.base_key)) return true;
  r.base_etag = ETag::Parse(f["base_etag"]);
  if (!GetInt(f, "base_size", r.base_size) || !GetInt(f, "base_limit", r.base_limit)) {
    return false;
  }
  std::string_view present = f["present"];
  while (!present.empty()) {
    const size_t dash = present.find('-');
    const size_t comma = present.find(',');
    if (dash == std::string_view::npos || comma == std::string_view::npos || comma < dash) {
      return false;
    }
    uint64_t start = 0, end = 0;
    std::from_chars(present.data(), present.data() + dash, start);
    std::from_chars(present.data() + dash + 1, present.data() + comma, end);
    r.present.emplace_back(start, end);
    present.remove_prefix(comma + 1);
  }
  return true;
}

void GenericEncode(const PendingAttrsRecord& r, std::string& out) {
  PutField(out, "type", "pending_attrs");
  PutField(out, "key", r.key);
  PutField(out, "etag_kind", ETagKindName(r.etag.kind()));
  PutField(out, "etag", r.etag.value());
  PutField(out, "changed_ns", r.changed_ns);
  for (const auto& [name, value] : r.metadata) PutField(out, "meta." + name, value);
}

bool GenericDecode(std::string_view in, PendingAttrsRecord& r) {
  Fields f;
  if (!ParseFields(in, f) || f["type"] != "pending_attrs" || !GetString(f, "key", r.key) ||
      !GetInt(f, "changed_ns", r.changed_ns)) {
    return false;
  }
  GetMetadata(f, r.metadata);
  r.etag = ETag::Parse(f["etag"]);
  return ETagKindName(r.etag.kind()) == f["etag_kind"];
}

// ---- Benchmarks ---------------------------------------------------------------------------

template <typename Record>
void BM_Encode(benchmark::State& state) {
  using Codec = typename CodecFor<Record>::type;
  const std::vector<Record> records = Records<Record>();
  std::string out;
  size_t i = 0, bytes = 0;
  for (auto _ : state) {
    out.clear();
    Codec::Encode(records[i++ % kRecords], out);
    bytes += out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

template <typename Record>
void BM_Decode(benchmark::State& state) {
  using Codec = typename CodecFor<Record>::type;
  std::vector<std::string> encoded;
  size_t total = 0;
  for (const Record& r : Records<Record>()) {
    encoded.emplace_back();
    Codec::Encode(r, encoded.back());
    total += encoded.back().size();
  }
  size_t i = 0;
  for (auto _ : state) {
    Result<Record> r = Codec::Decode(encoded[i++ % kRecords]);
    benchmark::DoNotOptimize(r);
    if (!r.ok()) state.SkipWithError("decode failed");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * total / kRecords));
  state.counters["record_bytes"] = static_cast<double>(total) / kRecords;
}

template <typename Record>
void BM_EncodeGeneric(benchmark::State& state) {
  const std::vector<Record> records = Records<Record>();
  std::string out;
  size_t i = 0, bytes = 0;
  for (auto _ : state) {
    out.clear();
    GenericEncode(records[i++ % kRecords], out);
    bytes += out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

template <typename Record>
void BM_DecodeGeneric(benchmark::State& state) {
  std::vector<std::string> encoded;
  size_t total = 0;
  for (const Record& r : Records<Record>()) {
    encoded.emplace_back();
    GenericEncode(r, encoded.back());
    total += encoded.back().size();
  }
  size_t i = 0;
  for (auto _ : state) {
    Record r;
    bool ok = GenericDecode(encoded[i++ % kRecords], r);
    benchmark::DoNotOptimize(r);
    if (!ok) state.SkipWithError("decode failed");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * total / kRecords));
  state.counters["record_bytes"] = static_cast<double>(total) / kRecords;
}

void BM_Crc32c(benchmark::State& state) {
  std::string data(static_cast<size_t>(state.range(0)), 'a');
  for ([[maybe_unused]] auto _ : state) benchmark::DoNotOptimize(Crc32c(data));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
}

BENCHMARK_TEMPLATE(BM_Encode, ContentETagRecord);
BENCHMARK_TEMPLATE(BM_EncodeGeneric, ContentETagRecord);
BENCHMARK_TEMPLATE(BM_Decode, ContentETagRecord);
BENCHMARK_TEMPLATE(BM_DecodeGeneric, ContentETagRecord);
BENCHMARK_TEMPLATE(BM_Encode, ObjectMetaRecord);
BENCHMARK_TEMPLATE(BM_EncodeGeneric, ObjectMetaRecord);
BENCHMARK_TEMPLATE(BM_Decode, ObjectMetaRecord);
BENCHMARK_TEMPLATE(BM_DecodeGeneric, ObjectMetaRecord);
BENCHMARK_TEMPLATE(BM_Encode, StagedUploadRecord);
BENCHMARK_TEMPLATE(BM_EncodeGeneric, StagedUploadRecord);
BENCHMARK_TEMPLATE(BM_Decode, StagedUploadRecord);
BENCHMARK_TEMPLATE(BM_DecodeGeneric, StagedUploadRecord);
BENCHMARK_TEMPLATE(BM_Encode, PendingAttrsRecord);
BENCHMARK_TEMPLATE(BM_EncodeGeneric, PendingAttrsRecord);
BENCHMARK_TEMPLATE(BM_Decode, PendingAttrsRecord);
BENCHMARK_TEMPLATE(BM_DecodeGeneric, PendingAttrsRecord);
BENCHMARK_TEMPLATE(BM_Encode, DataBlockRecord);
BENCHMARK_TEMPLATE(BM_Decode, DataBlockRecord);
void BM_Crc32cPortable(benchmark::State& state) {
  std::string data(static_cast<size_t>(state.range(0)), 'a');
  for ([[maybe_unused]] auto _ : state) benchmark::DoNotOptimize(Crc32cPortable(data));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
}

BENCHMARK(BM_Crc32c)->Arg(64)->Arg(4096)->Arg(1 << 20);  // 1 MiB: a data cache block
BENCHMARK(BM_Crc32cPortable)->Arg(64)->Arg(4096);

}  // namespace
}  // namespace objfs
