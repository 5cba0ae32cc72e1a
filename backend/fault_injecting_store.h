// An ObjectStore wrapper that makes chosen calls fail, for testing how the layers above recover
// from a failed upload, a throttled listing or a timeout in the middle of a copy.
//
// A failed call never reaches the wrapped store, so the failure has no effect there, as the
// ObjectStore contract promises for real failures.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "backend/mutex.h"
#include "backend/object_store.h"

namespace objfs {

enum class StoreOp { kHead, kRead, kList, kPut, kCopy, kRemove, kRemoveMany, kSetAttributes };

class FaultInjectingStore : public ForwardingStore {
 public:
  explicit FaultInjectingStore(std::shared_ptr<ObjectStore> target)
      : ForwardingStore(std::move(target)) {}

  // The k-th call of kind `op` (1-based, counted from now) fails with `status` (which must not be
  // ok). Several such rules may be pending at once.
  void FailNth(StoreOp op, int k, Status status);
  // Every call of kind `op` fails with `status` until Clear().
  void FailAll(StoreOp op, Status status);
  // Runs `hook` when the k-th call of kind `op` (1-based, counted from now) arrives, before it
  // goes on (or fails): a test's view of the moment, such as a crash in the middle of a
  // download.
  void BeforeNth(StoreOp op, int k, std::function<void()> hook);
  // Drops every pending failure and hook; the call counts stay.
  void Clear();
  // How many calls of kind `op` this store has received, failed ones included.
  int calls(StoreOp op) const;

  Result<ObjectInfo> head(std::string_view key) override;
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override;
  Result<Listing> list(const ListOptions& options) override;
  Result<ObjectInfo> put(std::string_view key, const ByteSource& source,
                         const PutOptions& options) override;
  Result<ObjectInfo> copy(const ObjectInfo& src, std::string_view dst,
                          const CopyOptions& options) override;
  Result<ObjectInfo> set_attributes(std::string_view key, const Metadata& metadata,
                                    const SetAttributesOptions& options) override;
  Status remove(std::string_view key) override;
  Status remove_if_match(std::string_view key, const ETag& etag, bool known_current) override;
  Status remove_many(const std::vector<std::string>& keys) override;

 private:
  static constexpr size_t kOpCount = 8;

  struct PendingFailure {
    int call;  // the value of the call count at which to fail
    Status status;
  };
  struct PendingHook {
    int call;
    std::function<void()> hook;
  };
  struct OpState {
    int calls = 0;
    std::vector<PendingFailure> pending;
    std::vector<PendingHook> hooks;
    std::optional<Status> fail_all;
  };

  // Counts a call of kind `op`; returns the Status it must fail with, or ok to forward it.
  Status Admit(StoreOp op);

  mutable Mutex mu_;  // lock 23 of fs/lock_order.h
  std::array<OpState, kOpCount> ops_ GUARDED_BY(mu_);
};

}  // namespace objfs
