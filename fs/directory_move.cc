#include "fs/directory_move.h"

#include <functional>
#include <future>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cache/io_pool.h"
#include "fs/dir_listing.h"

namespace objfs {

Status MoveDirectoryObjects(ObjectStore& store, IoPool& pool, const std::string& from,
                            const std::string& to, bool has_marker, size_t max_objects,
                            const LogFunction& log) {
  const std::string prefix = from + "/";
  std::vector<ObjectInfo> objects;
  ListOptions list;
  list.prefix = prefix;
  std::set<uint64_t> tokens;
  do {
    OBJFS_ASSIGN_OR_RETURN(Listing page, store.list(list));
    if (Status looped = NoteListingToken(prefix, page.next_token, &tokens); !looped.ok()) {
      log(LogLevel::kError, "cannot rename directory " + from + ": " + looped.message());
      return looped;
    }
    for (ObjectInfo& obj : page.objects) objects.push_back(std::move(obj));
    if (objects.size() > max_objects) {
      Status refused = InvalidArgumentError("cannot rename directory " + from +
                                            ": it has more than " + std::to_string(max_objects) +
                                            " objects; raise -o max_rename_objects");
      log(LogLevel::kError, refused.message());
      return refused;
    }
    list.continuation_token = page.next_token;
  } while (!list.continuation_token.empty());
  // A key that would grow past what the store takes fails the whole move before any copy.
  if (const uint64_t max_key = store.capabilities().max_key_bytes; max_key != 0) {
    for (const ObjectInfo& obj : objects) {
      const size_t length = obj.key.size() - from.size() + to.size();
      if (length > max_key) {
        std::string message = "cannot rename directory ";
        message.append(from).append(" to ").append(to).append(": ").append(obj.key);
        message.append(" would get a key of ").append(std::to_string(length));
        message.append(" bytes; the store takes at most ").append(std::to_string(max_key));
        return Status(StatusCode::kNameTooLong, message);
      }
    }
  }

  // Copies run in parallel on the I/O pool; all must succeed before anything is deleted.
  std::vector<std::future<Status>> copies;
  copies.reserve(objects.size());
  CopyOptions copy;
  copy.keep_tags = true;
  for (const ObjectInfo& obj : objects) {
    std::string dst = to + "/" + obj.key.substr(prefix.size());
    copies.push_back(pool.Async(
        [&store, obj, dst, copy]() -> Status { return store.copy(obj, dst, copy).status(); }));
  }
  Status first;
  for (auto& f : copies) {
    Status s = f.get();
    if (!s.ok() && first.ok()) first = s;
  }
  if (!first.ok()) return first.WithContext("renaming " + from);
  std::vector<std::string> old_keys;
  old_keys.reserve(objects.size());
  for (const ObjectInfo& obj : objects) old_keys.push_back(obj.key);
  // With no marker listed (a directory implied by its keys, or a plain directory of a
  // hierarchical store) the marker key still goes along: removing it is what removes such a
  // directory there, and on an object store it is a no-op.
  if (!has_marker) old_keys.push_back(prefix);
  if (!old_keys.empty()) OBJFS_RETURN_IF_ERROR(store.remove_many(old_keys));
  return Status::Ok();
}

}  // namespace objfs
