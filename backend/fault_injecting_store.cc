#include "backend/fault_injecting_store.h"

#include <utility>

namespace objfs {
namespace {

Status NotOk(Status status) {
  if (status.ok()) return InternalError("injected failure");
  return status;
}

}  // namespace

void FaultInjectingStore::FailNth(StoreOp op, int k, Status status) {
  MutexLock lock(&mu_);
  OpState& state = ops_[static_cast<size_t>(op)];
  state.pending.push_back({state.calls + k, NotOk(std::move(status))});
}

void FaultInjectingStore::FailAll(StoreOp op, Status status) {
  MutexLock lock(&mu_);
  ops_[static_cast<size_t>(op)].fail_all = NotOk(std::move(status));
}

void FaultInjectingStore::BeforeNth(StoreOp op, int k, std::function<void()> hook) {
  MutexLock lock(&mu_);
  OpState& state = ops_[static_cast<size_t>(op)];
  state.hooks.push_back({state.calls + k, std::move(hook)});
}

void FaultInjectingStore::Clear() {
  MutexLock lock(&mu_);
  for (OpState& state : ops_) {
    state.pending.clear();
    state.hooks.clear();
    state.fail_all.reset();
  }
}

int FaultInjectingStore::calls(StoreOp op) const {
  MutexLock lock(&mu_);
  return ops_[static_cast<size_t>(op)].calls;
}

Status FaultInjectingStore::Admit(StoreOp op) {
  std::function<void()> hook;
  Status status;
  {
    MutexLock lock(&mu_);
    OpState& state = ops_[static_cast<size_t>(op)];
    ++state.calls;
    for (auto it = state.hooks.begin(); it != state.hooks.end(); ++it) {
      if (it->call == state.calls) {
        hook = std::move(it->hook);
        state.hooks.erase(it);
        break;
      }
    }
    for (auto it = state.pending.begin(); it != state.pending.end(); ++it) {
      if (it->call == state.calls) {
        status = std::move(it->status);
        state.pending.erase(it);
        break;
      }
    }
    if (status.ok() && state.fail_all.has_value()) status = *state.fail_all;
  }
  if (hook) hook();  // without the lock: it may call this store
  return status;
}

Result<ObjectInfo> FaultInjectingStore::head(std::string_view key) {
  OBJFS_RETURN_IF_ERROR(Admit(StoreOp::kHead));
  return ForwardingStore::head(key);
}

Result<size_t> FaultInjectingStore::read(std::string_view key, uint64_t offset,
                                         std::span<std::byte> buf, const ETag* if_match) {
  OBJFS_RETURN_IF_ERROR(Admit(StoreOp::kRead));
  return ForwardingStore::read(key, offset, buf, if_match);
}

Result<Listing> FaultInjectingStore::list(const ListOptions& options) {
  OBJFS_RETURN_IF_ERROR(Admit(StoreOp::kList));
  return ForwardingStore::list(options);
}

Result<ObjectInfo> FaultInjectingStore::put(std::string_view key, const ByteSource& source,
                                            const PutOptions& options) {
  OBJFS_RETURN_IF_ERROR(Admit(StoreOp::kPut));
  return ForwardingStore::put(key, source, options);
}

Result<ObjectInfo> FaultInjectingStore::copy(const ObjectInfo& src, std::string_view dst,
                                             const CopyOptions& options) {
  OBJFS_RETURN_IF_ERROR(Admit(StoreOp::kCopy));
  return ForwardingStore::copy(src, dst, options);
}

Result<ObjectInfo> FaultInjectingStore::set_attributes(std::string_view key,
                                                       const Metadata& metadata,
                                                       const SetAttributesOptions& options) {
  OBJFS_RETURN_IF_ERROR(Admit(StoreOp::kSetAttributes));
  return ForwardingStore::set_attributes(key, metadata, options);
}

Status FaultInjectingStore::remove(std::string_view key) {
  OBJFS_RETURN_IF_ERROR(Admit(StoreOp::kRemove));
  return ForwardingStore::remove(key);
}

Status FaultInjectingStore::remove_if_match(std::string_view key, const ETag& etag,
                                            bool known_current) {
  OBJFS_RETURN_IF_ERROR(Admit(StoreOp::kRemove));
  return ForwardingStore::remove_if_match(key, etag, known_current);
}

Status FaultInjectingStore::remove_many(const std::vector<std::string>& keys) {
  OBJFS_RETURN_IF_ERROR(Admit(StoreOp::kRemoveMany));
  return ForwardingStore::remove_many(keys);
}

}  // namespace objfs
