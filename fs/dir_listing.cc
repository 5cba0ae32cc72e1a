#include "fs/dir_listing.h"

#include <functional>
#include <string_view>

namespace objfs {

namespace {

constexpr size_t kMaxNameBytes = 255;

// Records `name` (as the listing orders it: `sort_key` is "name" for a file, "name/" for a
// directory) in `cursor`; false when it was given already or cannot be a file name.
bool Admit(const std::string& name, const std::string& sort_key, bool is_dir, DirCursor* cursor,
           uint64_t* skipped) {
  if (!IsValidName(name)) {
    ++*skipped;
    return false;
  }
  // Keys come in order, so a name is repeated only by the same key (a marker object and its
  // common prefix) or by a file "name" and a directory "name/" a few keys later.
  std::erase_if(cursor->recent_files, [&](const std::string& file) {
    return std::string_view(sort_key) > std::string_view(file + "/");
  });
  if (sort_key == cursor->last_sort_key) return false;
  cursor->last_sort_key = sort_key;
  if (is_dir && cursor->recent_files.count(name) > 0) return false;
  if (!is_dir) cursor->recent_files.insert(name);
  cursor->local_names.erase(name);
  if (!cursor->names_overflow) {
    if (cursor->names.size() < kListingNamesKept) {
      cursor->names.push_back(name);
    } else {
      cursor->names_overflow = true;
      cursor->names.clear();
      cursor->names.shrink_to_fit();
    }
  }
  return true;
}

}  // namespace

Status NoteListingToken(const std::string& prefix, const std::string& token,
                        std::set<uint64_t>* seen) {
  if (token.empty() || seen->insert(std::hash<std::string>{}(token)).second) return Status::Ok();
  return IoError("listing " + (prefix.empty() ? std::string("the bucket's root") : prefix) +
                 ": the server gave the continuation token '" + token.substr(0, 64) +
                 "' a second time, so its listing would never end");
}

bool IsValidName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos && name.size() <= kMaxNameBytes;
}

std::vector<ListedName> NamesOfPage(const Listing& page, const std::string& prefix,
                                    const ObjectAttrs& attrs, int64_t implicit_mtime_ns,
                                    DirCursor* cursor, uint64_t* skipped) {
  std::vector<ListedName> out;
  // Objects and common prefixes, merged in key order.
  size_t oi = 0;
  size_t pi = 0;
  while (oi < page.objects.size() || pi < page.common_prefixes.size()) {
    if (pi == page.common_prefixes.size() ||
        (oi < page.objects.size() && page.objects[oi].key <= page.common_prefixes[pi])) {
      const ObjectInfo& obj = page.objects[oi++];
      if (obj.key.size() < prefix.size() + 1) continue;  // the marker of this directory
      std::string name = obj.key.substr(prefix.size());
      const std::string sort_key = name;
      bool is_dir = false;
      if (name.back() == '/') {
        name.pop_back();
        is_dir = true;
      }
      MetaRecord rec = is_dir ? attrs.ImplicitDir(obj.mtime_ns) : attrs.FromInfo(obj, false);
      // A listing with the objects' metadata (SFTP's READDIR, or a store that kept what an
      // earlier HEAD found) needs no HEAD per file; S3's has sizes and times only.
      rec.complete = !is_dir && obj.has_metadata;
      // (A file object whose "mode" says directory is one.)
      if (!Admit(name, sort_key, rec.is_dir, cursor, skipped)) continue;
      out.push_back(ListedName{std::move(name), std::move(rec)});
    } else {
      const std::string& cp = page.common_prefixes[pi++];
      if (cp.size() <= prefix.size()) continue;
      std::string name = cp.substr(prefix.size(), cp.size() - prefix.size() - 1);
      if (!Admit(name, cp.substr(prefix.size()), /*is_dir=*/true, cursor, skipped)) continue;
      MetaRecord rec = attrs.ImplicitDir(implicit_mtime_ns);
      rec.complete = false;
      out.push_back(ListedName{std::move(name), std::move(rec)});
    }
  }
  return out;
}

}  // namespace objfs
