#include "fs/metadata_coalescer.h"

#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fs/object_metadata.h"
#include "fs/xattr.h"

namespace objfs {

namespace {

// How far the server's clock may run ahead of this machine's before a held metadata change
// left by a crash is taken to be older than the object's last change: 15 minutes, the most
// S3 itself allows between a client's clock and the server's (SigV4 refuses more).
constexpr int64_t kHeldChangeClockSlackNs = int64_t{15} * 60 * 1000000000;

}  // namespace

std::string ChangedMetadataNames(const Metadata& from, const Metadata& to) {
  auto xattrs = [](const Metadata& metadata) {
    auto it = metadata.find(kXattrMetadata);
    if (it == metadata.end()) return XattrMap();
    return DecodeXattrs(it->second).value_or(XattrMap());
  };
  std::vector<std::string> names;
  // Kept headers (`:content-type`) are not a change anyone makes through the mount: a held
  // change may only lack what the server added since.
  auto differ = [&names](const auto& before, const auto& after, std::string_view skip) {
    auto named = [skip](const std::string& name) {
      return name != skip && !IsHeaderMetadata(name);
    };
    for (const auto& [name, value] : after) {
      auto it = before.find(name);
      if (named(name) && (it == before.end() || it->second != value)) names.push_back(name);
    }
    for (const auto& [name, value] : before) {
      if (named(name) && after.find(name) == after.end()) names.push_back(name);
    }
  };
  differ(xattrs(from), xattrs(to), "");
  differ(from, to, kXattrMetadata);
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::optional<HeldChange> MetadataCoalescer::Hold(const std::string& key, const ObjectInfo& object,
                                                  bool own_write, const Metadata& metadata) {
  if (object.etag.empty()) return std::nullopt;
  auto record = staging_->CreateAttrs(key, object.etag, metadata);
  if (!record.ok()) return std::nullopt;  // the cache disk is full: a change now
  HeldChange held;
  held.object = object;
  held.object.key = key;
  held.own_write = own_write;
  held.metadata = metadata;
  held.record = std::move(*record);
  return held;
}

Status MetadataCoalescer::Join(HeldChange& held, const std::string& key, Metadata metadata) {
  OBJFS_RETURN_IF_ERROR(held.record->Describe(key, held.object.etag, metadata));
  held.metadata = std::move(metadata);
  return Status::Ok();
}

Result<MetadataCoalescer::Applied> MetadataCoalescer::Apply(HeldChange& held,
                                                            const std::string& key) {
  SetAttributesOptions set;
  set.source_known_current = held.own_write;
  Result<ObjectInfo> result = InternalError("unreachable");
  for (int attempt = 0;; ++attempt) {
    set.expected = held.object;
    set.expected.key = key;
    result = store_->set_attributes(key, held.metadata, set);
    if (result.ok() || result.status().code() != StatusCode::kPreconditionFailed || attempt > 0) {
      break;
    }
    // Replaced elsewhere since: the change applies to what is there now.
    invalidate_(key);
    Result<ObjectInfo> now = store_->head(key);
    if (!now.ok()) {
      result = now.status();
      break;
    }
    held.object = *now;
    held.metadata = WithHeaderMetadataOf(std::move(held.metadata), now->metadata);
    set.source_known_current = false;
    // The crash record follows: with the old ETag the next mount would drop the change.
    if (held.record != nullptr) (void)held.record->Describe(key, now->etag, held.metadata);
  }
  Applied applied;
  if (!result.ok()) {
    invalidate_(key);
    if (IsPermanentRefusal(result.status())) {
      applied.outcome = Outcome::kRefused;
      applied.reason = result.status();
      return applied;
    }
    if (result.status().code() == StatusCode::kNotFound) {
      // Removed elsewhere: nothing is left to change.
      log_(LogLevel::kWarn,
           "dropping a metadata change of " + key + ": " + result.status().message());
      applied.outcome = Outcome::kGone;
      return applied;
    }
    return result.status().WithContext("changing the metadata of " + key);
  }
  applied.info = *result;
  applied.info.size = held.object.size;
  applied.info.metadata = held.metadata;
  applied.info.has_metadata = true;
  return applied;
}

void MetadataCoalescer::Carry(std::optional<HeldChange>& held, CarriedChange& carried) {
  if (!held) return;
  if (held->record != nullptr) {
    Forget(carried);
    carried.record = std::move(held->record);
    carried.etag = held->object.etag;
    carried.metadata = held->metadata;
    carried.object = held->object;
    carried.own_write = held->own_write;
  }
  held.reset();  // its record, if any, is `carried`'s now
}

std::optional<HeldChange> MetadataCoalescer::Uncarry(CarriedChange& carried) {
  if (carried.record == nullptr) return std::nullopt;
  HeldChange held;
  held.object = std::move(carried.object);
  held.own_write = carried.own_write;
  held.metadata = std::move(carried.metadata);
  held.record = std::move(carried.record);
  carried = CarriedChange();
  return held;
}

void MetadataCoalescer::Forget(std::optional<HeldChange>& held) {
  if (!held) return;
  if (held->record != nullptr) held->record->Remove();
  held.reset();
}

void MetadataCoalescer::Forget(CarriedChange& carried) {
  if (carried.record == nullptr) return;
  carried.record->Remove();
  carried.record.reset();
  carried.metadata.clear();
}

Status MetadataCoalescer::Recover() {
  std::vector<std::string> dropped;
  OBJFS_ASSIGN_OR_RETURN(auto changes, staging_->AttrsLeftovers(&dropped));
  for (const std::string& path : dropped) {
    log_(LogLevel::kError,
         "a metadata change held by an earlier mount is lost: its record " + path + " is damaged");
  }
  Status first;
  for (const AttrsLeftover& left : changes) {
    Result<ObjectInfo> now = store_->head(left.key);
    if (!now.ok() && now.status().code() != StatusCode::kNotFound) {
      if (first.ok()) {
        first = now.status().WithContext("recovering a metadata change of " + left.key);
      }
      continue;
    }
    // A self-copy (another client's chmod) keeps a single-part ETag, so the ETag alone cannot
    // tell that the object changed after this record was written: its Last-Modified can. The
    // slack allows for this machine's clock running behind the server's.
    if (now.ok() && left.changed_ns > 0 &&
        now->mtime_ns > left.changed_ns + kHeldChangeClockSlackNs) {
      log_(LogLevel::kWarn, "dropping a metadata change of " + left.key +
                                " held by an earlier mount: the object was changed after it");
      ::unlink(left.path.c_str());
      continue;
    }
    if (now.ok() && (left.etag.empty() || now->etag == left.etag)) {
      SetAttributesOptions set;
      set.expected = *now;
      Result<ObjectInfo> copied = store_->set_attributes(left.key, left.metadata, set);
      if (!copied.ok() && IsPermanentRefusal(copied.status())) {
        log_(LogLevel::kWarn, "dropping a metadata change of " + left.key + " (" +
                                  ChangedMetadataNames(now->metadata, left.metadata) +
                                  ") held by an earlier mount: the server refuses it for good (" +
                                  copied.status().ToString() + ")");
      } else if (!copied.ok() && copied.status().code() != StatusCode::kPreconditionFailed &&
                 copied.status().code() != StatusCode::kNotFound) {
        if (first.ok()) first = copied.status().WithContext("recovering a metadata change");
        continue;
      }
      invalidate_(left.key);
    }
    ::unlink(left.path.c_str());
  }
  return first;
}

}  // namespace objfs
