#include "fs/inode_table.h"

#include "fs/object_attrs.h"

namespace objfs {

namespace {

bool IsUnder(const std::string& key, const std::string& prefix) {
  if (prefix.empty()) return true;
  return key == prefix || (key.size() > prefix.size() &&
                           key.compare(0, prefix.size(), prefix) == 0 && key[prefix.size()] == '/');
}

}  // namespace

std::optional<FileAttr> LocalAttrOf(const Inode& inode) {
  if (!inode.staged && !inode.pending_metadata) return std::nullopt;
  FileAttr attr = WithStoredTimes(inode.attr, inode.extra_metadata);
  attr.size = inode.staged ? inode.staged->size() : inode.pending_metadata->object.size;
  if (inode.removed()) attr.nlink = 0;  // removed while open: no name leads to it any more
  return attr;
}

ServerWorkScope::ServerWorkScope(Inode& inode, const std::optional<FileAttr>& otherwise)
    : inode_(inode) {
  std::optional<FileAttr> local = LocalAttrOf(inode);
  MutexLock lock(&inode_.work_mu);
  outer_ = inode_.server_work;
  if (local || otherwise) {
    inode_.server_work = Inode::ServerWork{local ? *local : *otherwise, local.has_value()};
  }
}

ServerWorkScope::~ServerWorkScope() {
  MutexLock lock(&inode_.work_mu);
  inode_.server_work = outer_;
}

void NoteRetagged(Inode& inode, const std::string& key, const ETag& from, const ETag& to) {
  if (from.empty() || to.empty() || from == to) return;
  if (inode.retagged.size() >= Inode::kMaxRetagged) inode.retagged.erase(inode.retagged.begin());
  inode.retagged.push_back(Inode::Retag{inode.retag_serial.fetch_add(1) + 1, key, from, to});
}

ETag RetaggedVersion(const Inode& inode, const std::string& key, const ETag& version,
                     uint64_t seen) {
  ETag now;
  for (const Inode::Retag& retag : inode.retagged) {
    if (retag.serial > seen && retag.key == key && retag.from == (now.empty() ? version : now)) {
      now = retag.to;
    }
  }
  return now;
}

InodeTable::InodeTable() {
  Slot root;
  root.key = "";
  root.lookups = 1;  // the kernel never forgets the root
  root.inode = std::make_shared<Inode>();
  slots_.emplace(kRootIno, std::move(root));
  by_key_.emplace("", kRootIno);
}

uint64_t InodeTable::Acquire(const std::string& key, uint64_t lookups) {
  MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    slots_[it->second].lookups += lookups;
    return it->second;
  }
  uint64_t ino = next_ino_++;
  Slot slot;
  slot.key = key;
  slot.lookups = lookups;
  slots_.emplace(ino, std::move(slot));
  by_key_.emplace(key, ino);
  return ino;
}

bool InodeTable::AddLookup(uint64_t ino) {
  MutexLock lock(&mu_);
  auto it = slots_.find(ino);
  if (it == slots_.end()) return false;
  ++it->second.lookups;
  return true;
}

void InodeTable::Forget(uint64_t ino, uint64_t n) {
  if (ino == kRootIno) return;
  MutexLock lock(&mu_);
  auto it = slots_.find(ino);
  if (it == slots_.end()) return;
  it->second.lookups = it->second.lookups > n ? it->second.lookups - n : 0;
  MaybeEraseLocked(ino);
}

void InodeTable::MaybeEraseLocked(uint64_t ino) {
  auto it = slots_.find(ino);
  if (it == slots_.end() || ino == kRootIno) return;
  const Slot& slot = it->second;
  if (slot.lookups > 0 || (slot.inode != nullptr && (slot.inode->open_handles.load() > 0 ||
                                                     slot.inode->has_local_data.load()))) {
    return;
  }
  if (slot.bound) {
    auto k = by_key_.find(slot.key);
    if (k != by_key_.end() && k->second == ino) by_key_.erase(k);
  }
  slots_.erase(it);
}

std::optional<std::string> InodeTable::KeyOf(uint64_t ino) const {
  MutexLock lock(&mu_);
  auto it = slots_.find(ino);
  if (it == slots_.end()) return std::nullopt;
  return it->second.key;
}

uint64_t InodeTable::InoOf(const std::string& key) const {
  MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  return it == by_key_.end() ? 0 : it->second;
}

std::shared_ptr<Inode> InodeTable::Get(uint64_t ino) {
  MutexLock lock(&mu_);
  auto it = slots_.find(ino);
  if (it == slots_.end()) return nullptr;
  if (it->second.inode == nullptr) it->second.inode = std::make_shared<Inode>();
  return it->second.inode;
}

std::shared_ptr<Inode> InodeTable::Find(uint64_t ino) const {
  MutexLock lock(&mu_);
  auto it = slots_.find(ino);
  return it == slots_.end() ? nullptr : it->second.inode;
}

void InodeTable::Rename(const std::string& from, const std::string& to, bool subtree) {
  MutexLock lock(&mu_);
  std::vector<std::pair<std::string, uint64_t>> moves;
  if (subtree) {
    for (const auto& [key, ino] : by_key_) {
      if (key == from || (IsUnder(key, from) && !from.empty())) moves.emplace_back(key, ino);
    }
  } else if (auto it = by_key_.find(from); it != by_key_.end()) {
    moves.emplace_back(it->first, it->second);
  }
  // Whatever held a target name was replaced: it keeps its number but loses the name.
  for (const auto& [key, ino] : moves) {
    std::string target = to + key.substr(from.size());
    auto old = by_key_.find(target);
    if (old != by_key_.end() && old->second != ino) {
      slots_[old->second].bound = false;
      by_key_.erase(old);
    }
  }
  for (const auto& [key, ino] : moves) by_key_.erase(key);
  for (const auto& [key, ino] : moves) {
    std::string target = to + key.substr(from.size());
    slots_[ino].key = target;
    by_key_[target] = ino;
  }
}

void InodeTable::Unbind(const std::string& key) {
  MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end() || it->second == kRootIno) return;
  uint64_t ino = it->second;
  slots_[ino].bound = false;
  by_key_.erase(it);
  MaybeEraseLocked(ino);
}

std::vector<std::pair<uint64_t, std::shared_ptr<Inode>>> InodeTable::WithLocalData(
    const std::string& prefix) const {
  MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, std::shared_ptr<Inode>>> out;
  for (const auto& [ino, slot] : slots_) {
    if (slot.inode != nullptr && slot.inode->has_local_data.load() && IsUnder(slot.key, prefix)) {
      out.emplace_back(ino, slot.inode);
    }
  }
  return out;
}

size_t InodeTable::size() const {
  MutexLock lock(&mu_);
  return slots_.size();
}

}  // namespace objfs
