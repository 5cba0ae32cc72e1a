// The interface every backend implements: an S3 bucket, an SFTP directory, the in-memory fake.
//
// This is objfs's equivalent of leveldb's Env: the filesystem and caches above talk only to an
// ObjectStore, so they can be tested over the fake, and wrappers (prefix, metrics, fault
// injection) stack on ForwardingStore without knowing which backend sits underneath.
//
// Contracts that hold for every implementation (checked by
// tests/conformance/object_store_conformance.h):
// - Every method is safe to call from many threads at once.
// - Keys are UTF-8 strings of 1..1024 bytes; '/' separates directory levels in listings only.
//   A key ending in '/' is a directory marker.
// - A failed call returns a non-ok Status and has no partial effect that a later call can see
//   (a failed put leaves the old object, a failed copy leaves no destination).
// - A server error or a timeout is never reported as NotFound.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/etag.h"
#include "backend/status.h"

namespace objfs {

// User metadata without the transport prefix: for S3, header "x-amz-meta-mode: 33188" is
// {"mode", "33188"}. Names are lowercase.
//
// A name that begins with ':' holds instead one of the headers S3 calls system-defined metadata
// that a client sets, which a copy with new metadata, a copy made of parts or a new version of
// the object must name again or lose (S3: Cache-Control, Content-Disposition, Content-Encoding,
// Content-Language, Content-Type, Expires, x-amz-website-redirect-location): ':' and the
// header's name in lower case, {":cache-control", "max-age=60"}. A header name is a token,
// which never holds a ':', so no x-amz-meta- name collides with them. They travel with the user
// metadata (chmod, rename, an edit, records kept on disk) and do not count towards S3's limit
// on it.
using Metadata = std::map<std::string, std::string>;
inline constexpr char kHeaderMetadataMark = ':';
inline constexpr char kContentTypeMetadata[] = ":content-type";
inline bool IsHeaderMetadata(std::string_view name) {
  return !name.empty() && name.front() == kHeaderMetadataMark;
}
// The user metadata alone: `metadata` without the headers kept in it.
inline Metadata WithoutHeaderMetadata(Metadata metadata) {
  std::erase_if(metadata, [](const auto& entry) { return IsHeaderMetadata(entry.first); });
  return metadata;
}
// `metadata` with the headers kept as metadata of `object` in place of its own: a metadata
// change made to one version and applied to another must not give it the old one's headers
// (a Content-Encoding that no longer describes the bytes).
inline Metadata WithHeaderMetadataOf(Metadata metadata, const Metadata& object) {
  metadata = WithoutHeaderMetadata(std::move(metadata));
  for (const auto& [name, value] : object) {
    if (IsHeaderMetadata(name)) metadata[name] = value;
  }
  return metadata;
}

// How an S3 object is encrypted at rest, as the server's reply named it: the
// x-amz-server-side-encryption algorithm ("AES256", "aws:kms", "aws:kms:dsse"; empty: not
// encrypted) and the KMS key. A copy or an overwrite passes it on, so that a file another
// client encrypted does not lose its encryption to a cp, mv, chmod or edit through the mount.
struct AtRestEncryption {
  std::string algorithm;
  std::string kms_key_id;
  bool operator==(const AtRestEncryption&) const = default;
};

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  ETag etag;
  int64_t mtime_ns = 0;  // the server's Last-Modified, in ns since the epoch
  std::string content_type;
  Metadata metadata;
  // False for listing entries, which carry no user metadata: a HEAD would give it.
  bool has_metadata = false;
  // S3: as the HEAD, GET or PUT reply said. Unset where no reply said (listings, records kept
  // on disk, SFTP): a store that needs it asks the server.
  std::optional<AtRestEncryption> encryption;
  // Set by a copy (or set_attributes) that proved it copied the bytes of the version it was
  // asked to match (CopyOptions::if_match_source): the ETag above, new or not, names the
  // source's bytes. Never kept or listed; false where nothing was proved.
  bool same_bytes_as_source = false;
  // S3: how many object tags the version has, as a HEAD's x-amz-tagging-count said; 0 where
  // no HEAD said (listings, PUT and copy replies). Never kept or listed.
  uint32_t tag_count = 0;
};

struct ListOptions {
  std::string prefix;
  std::string delimiter;           // usually "/" or empty for a recursive listing
  std::string continuation_token;  // from the previous page's Listing::next_token
  std::string start_after;
  int max_keys = 1000;
  // The caller uses the listed objects' metadata (a directory listing for `ls -l`), which a
  // wrapper that keeps it for S3 then fills in (cache/listing_attr_store.h). Stores whose
  // listings carry metadata anyway (SFTP) ignore it.
  bool want_metadata = false;
};

struct Listing {
  std::vector<ObjectInfo> objects;           // in key order
  std::vector<std::string> common_prefixes;  // with the delimiter at the end, in order
  std::string next_token;                    // empty when this is the last page
  bool truncated() const { return !next_token.empty(); }
};

// A random-access source of the bytes to upload. read_at may be called from several threads
// at once (parts of a multipart upload are read in parallel).
// An MD5 digest, or none.
using OptionalMd5 = std::optional<std::array<uint8_t, 16>>;

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads up to buf.size() bytes at offset; fewer only at the end of the source.
  virtual Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const = 0;
};

// Bytes in memory that outlive the upload.
class MemorySource : public ByteSource {
 public:
  explicit MemorySource(std::span<const std::byte> data) : data_(data) {}
  explicit MemorySource(std::string_view data)
      : data_(reinterpret_cast<const std::byte*>(data.data()), data.size()) {}
  uint64_t size() const override { return data_.size(); }
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override;

 private:
  std::span<const std::byte> data_;
};

// An open file descriptor (not owned), read with pread so that parts can be read in parallel.
class FileSource : public ByteSource {
 public:
  FileSource(int fd, uint64_t size) : fd_(fd), size_(size) {}
  uint64_t size() const override { return size_; }
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override;

 private:
  int fd_;
  uint64_t size_;
};

// A file as the writer of the file that replaces it last knew it (PutOptions::replaced).
struct ReplacedFile {
  uint32_t permissions = 0;  // 07777
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::optional<std::pair<uint32_t, uint32_t>> owner;  // uid, gid where known
};

struct PutOptions {
  Metadata metadata;
  std::string content_type;
  std::optional<ETag> if_match;  // fail with PreconditionFailed unless the current ETag is this
  bool if_none_match = false;    // fail with AlreadyExists (or PreconditionFailed) if it exists
  // The encryption of the object this one replaces, kept when the mount sets none of its own
  // (S3; others ignore both). Unset with replaces_object: S3 asks the server for it first.
  std::optional<AtRestEncryption> keep_encryption;
  bool replaces_object = false;  // the key held an object when the file was opened
  // The file this one replaces as its writer last knew it. A store whose files carry enforced
  // permissions (SFTP) keeps a chmod another client made since, where the file there is still
  // that one (its size, mtime and owner) and this put's own mode is still the one it had: a
  // `chmod 600` made during a rewrite stays, rather than the rewrite widening it back. Unset:
  // the put's mode, as given.
  std::optional<ReplacedFile> replaced;
};

struct CopyOptions {
  // Empty: the destination keeps the source's metadata (S3 MetadataDirective COPY).
  // Set: the destination gets exactly this metadata (REPLACE). New attributes of one object
  // (chmod, touch) are set_attributes(), not a copy onto itself.
  std::optional<Metadata> replace_metadata;
  std::optional<std::string> content_type;  // only with replace_metadata
  bool if_match_source = true;              // the copy fails if the source no longer has src.etag
  // The caller itself wrote src.etag moments ago. For a plain-MD5 source under the single-copy
  // limit, S3 then sends the condition without first HEADing the source, which it otherwise
  // does for servers that ignore x-amz-copy-source-if-match (RGW): a result whose ETag is not
  // src.etag still fails with PreconditionFailed, but after the destination was written. SFTP
  // then sets attributes in place without a STAT first.
  bool source_known_current = false;
  // The encryption the copy gets when the mount sets none of its own (S3): that of the file
  // whose contents it replaces (cp onto an existing file). Unset: the source's, unless
  // replaces_destination, when S3 asks the server for the destination's first.
  std::optional<AtRestEncryption> keep_encryption;
  bool replaces_destination = false;
  // A rename: where the source's Content-Type is the one its name gives, the destination gets
  // the one the new name gives (S3, from the mount's mime table; s3fs does the same). rsync
  // and editors write under a temporary name whose extension gives none. A type set otherwise
  // (by another client) stays. The source's metadata goes with the new type: replace_metadata,
  // or src.metadata with source_known_current, or else what a HEAD finds.
  bool retype_by_name = false;
  // The destination keeps the source's object tags (S3): a rename, or set_attributes' copy onto
  // itself. RGW's CopyObject and every copy made of parts would drop them, so the store reads
  // them first (where the source's HEAD counts any) and puts them on the result. A copy of the
  // bytes into another file (cp) starts with none, as a new file does.
  bool keep_tags = false;
};

struct SetAttributesOptions {
  // The version of the object the caller saw: its size, ETag, content type and metadata (the
  // key is set_attributes' own). With an ETag, the call fails with PreconditionFailed when the
  // object no longer has it; without one nothing is checked. Its size chooses how S3 copies,
  // and its metadata tells SFTP whether the owner changes.
  ObjectInfo expected;
  std::optional<std::string> content_type;  // unset: the object keeps its content type
  // The caller itself wrote expected.etag moments ago: S3 does not HEAD a plain-MD5 object
  // under the single-copy limit first (see CopyOptions::source_known_current: an object
  // replaced meanwhile then gets the new metadata and the call fails with PreconditionFailed
  // after it), and SFTP sets the attributes without a STAT first.
  bool source_known_current = false;
};

// What statfs reports: the capacity of the file system the store's files live on.
struct StoreSpace {
  uint64_t block_size = 0;  // the unit of the block counts
  uint64_t blocks = 0;
  uint64_t blocks_free = 0;
  uint64_t blocks_available = 0;  // free to an unprivileged user
  uint64_t files = 0;
  uint64_t files_free = 0;
  uint64_t name_max = 0;
};

struct Capabilities {
  std::string scheme;                // "s3", "sftp", "fake"
  bool server_side_copy = false;     // copy() runs on the server, no bytes through this machine
  bool native_etags = false;         // the server computes ETags (S3) or objfs does (SFTP)
  uint64_t multipart_threshold = 0;  // put() above this size is multipart (0: never)
  uint64_t part_size = 0;
  uint64_t copy_part_threshold = 0;  // copy() above this size uses UploadPartCopy (0: never)
  bool native_rename = false;        // rename() moves a file or a directory on the server
  // set_attributes() rewrites the object on the server (S3: a copy onto itself, whose cost
  // grows with the object's size, and a new Last-Modified), so that changes are worth holding
  // back and coalescing. False: it sets them in place, cheaply (SFTP's SETSTAT).
  bool attributes_by_copy = false;
  // put() keeps the "uid" and "gid" metadata it is given (S3); false: the server decides who
  // owns a new file (SFTP: the account logged in).
  bool stores_owner = false;
  // head() of the marker "x/" of any directory x answers with that directory's own attributes
  // (SFTP: a stat of the directory), whether a listing shows the marker or only keys under it;
  // false: only a marker object has attributes, a directory implied by its keys has none (S3).
  bool directory_attributes = false;
  // read() splits a read into requests of this many bytes (SFTP: the server's max read
  // length), so a read of a multiple of it has no short request at its end. 0: one request.
  uint64_t read_unit = 0;
  // The largest object put() can store (S3: 5 TiB); 0: no limit.
  uint64_t max_object_size = 0;
  // start_upload() gives upload sessions (Upload, below); false: it is Unsupported.
  bool upload_sessions = false;
  // Upload::copy() copies ranges of an existing object on the server (S3 UploadPartCopy, SFTP
  // copy-data); false: it is Unsupported, and an edit is uploaded whole.
  bool copy_ranges = false;
  // The part layout of upload sessions (S3: every part but the last at least 5 MiB, at most
  // 10,000 parts; SFTP: any range, 0s). Upload::part_size() already respects them.
  uint64_t min_part_size = 0;
  uint64_t max_parts = 0;
  // Parts of one upload, copy or edit the store wants sent at once (S3: parallel_parts); 0:
  // the mount's own bound (4).
  size_t parts_in_flight = 0;
  // The longest key, in bytes, that the store accepts (S3: 1,024, less a mount's prefix); 0: no
  // limit beyond the names'. A name whose key would be longer fails at once with NameTooLong.
  uint64_t max_key_bytes = 0;
  // Keys are UTF-8 (S3: a name that is not is refused with InvalidObjectName); false: any
  // bytes but '/' and NUL (SFTP's file names). A new name that is not fails at once.
  bool utf8_keys = false;
  // Names beginning with this are the store's own, hidden from listings (SFTP: ".objfs-", its
  // temporary files, commit locks and directory markers); a new name that does fails at once
  // with InvalidArgument, as a lookup of one does. Empty: none.
  std::string reserved_prefix{};
  // User extended attributes (setfattr user.*) are kept with the object, in its metadata (S3,
  // as s3fs keeps them); false: the server has nowhere to keep them (SFTP v3 has no extended
  // attributes), and setting one fails with EOPNOTSUPP rather than vanish unsaved.
  bool user_xattrs = false;
  // put() keeps a "mode" whose type is a FIFO, socket or device with the object, so that such
  // special files can be zero-byte objects, as s3fs stores them (S3); false: they cannot be
  // made.
  bool special_files = false;
  // Uploads and copies keep an object's encryption at rest (ObjectInfo::encryption, the
  // keep_encryption options): S3 without an encryption of the mount's own.
  bool keeps_encryption = false;
};

struct UploadOptions {
  // The size the object is expected to reach (0: unknown); with the store's limits it chooses
  // the part size, so that a file of this size fits in the parts a store allows. A streaming
  // writer passes what it knows (the size being copied, or 0) and may exceed it: the layout
  // then holds Upload::max_size() bytes.
  uint64_t size_hint = 0;
  // The part size wanted (0: the store's own); raised to the store's minimum and to what
  // size_hint needs. An edit asks for a size that divides the base's unchanged ranges well, so
  // that whole parts of it can be copied.
  uint64_t part_size = 0;
  // The metadata and content type the object will have, when known: S3 gives them to the
  // multipart upload as it starts, and a complete() with other ones then costs a server-side
  // self-copy (set_attributes) after the object became visible with these.
  Metadata metadata;
  std::string content_type;
  // As in PutOptions: S3 gives it to the multipart upload as it starts.
  std::optional<AtRestEncryption> keep_encryption;
  bool replaces_object = false;
};

// One object being put together on the server from pieces, made visible under its key only by
// complete(): S3 a multipart upload, SFTP a temporary file renamed into place, MemoryStore a
// buffer. It serves (a) a file streamed while it is still being written, its parts sent in
// parallel, each read from a ByteSource (the staged file: memory stays bounded), and (b) an
// edit of an existing object assembled from server-side copies of its unchanged ranges and
// uploads of the changed ones.
//
// Layout: part i is the range [i * part_size(), (i + 1) * part_size()) of the new object. With
// whole_parts() (S3) every write() or copy() is one whole part: `offset` a multiple of
// part_size() and `length` part_size(), except for the part that ends the object, which is
// shorter (a part holding both changed and unchanged bytes is uploaded whole, the unchanged
// ones read from the base by the caller). Without whole_parts() (SFTP, MemoryStore) a call may
// cover any range; part_size() is then only a good unit of work.
//
// Failures: a failed write() or copy() leaves the upload usable and may be repeated (a
// repeated range replaces what was there). complete() checks that the calls that succeeded
// cover [0, size) (InvalidArgument otherwise; on S3 the part that ends the object must end
// exactly at `size`, parts past it are dropped); a failed complete() aborts the upload.
// Usually the object under the key is then unchanged, but not always: the step that publishes
// it (S3 CompleteMultipartUpload, SFTP posix-rename) may have taken effect with its reply lost,
// or a step after it failed (S3: the metadata self-copy, the -N ETag check). A caller that
// retries with if_match must therefore expect PreconditionFailed against its own object, and
// HEAD the key before taking the failure as the last word. Nothing is ever visible under the
// key before complete() publishes it: a crash leaves the old object, and the server-side leftovers
// are noted in the store's UploadJournal (upload_journal.h) until complete() or abort() removes
// them.
//
// Threads: write() and copy() may run in parallel, for distinct ranges. complete() and abort()
// come after every write() and copy() has returned, once; abort() is idempotent and a no-op
// after complete(). An Upload destroyed without complete() is aborted. It must not outlive the
// store that made it.
class Upload {
 public:
  virtual ~Upload() = default;

  // The key the object is put under.
  virtual const std::string& key() const = 0;
  virtual uint64_t part_size() const = 0;
  // Each write() and copy() must be a whole part (S3); false: any range.
  virtual bool whole_parts() const = 0;
  // The largest object the layout can hold (S3: part_size() * 10,000); 0: no limit.
  virtual uint64_t max_size() const = 0;

  // Stores `length` bytes of `source`, read from `source_offset`, as [offset, offset + length)
  // of the new object. The source is read by this call only (hashed and sent in pieces), maybe
  // more than once (a repeated attempt; SFTP hashes a range sent ahead of the ranges before it
  // again once they are in): a range whose bytes change meanwhile must be written again, which
  // leaves a store's content MD5 unknown.
  virtual Status write(uint64_t offset, const ByteSource& source, uint64_t source_offset,
                       uint64_t length) = 0;
  // Copies [base_offset, base_offset + length) of the object `base` (its key, size and ETag are
  // used) to [offset, offset + length) on the server, no byte through this machine. With an
  // ETag in `base`, fails with PreconditionFailed when the base is no longer that version, now
  // or (for servers that do not check it on each copy) at complete(). Unsupported unless
  // capabilities().copy_ranges.
  virtual Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
                      uint64_t length) = 0;
  // Copies all of `base` to [0, base.size) at once, where the server has a faster way than
  // copy() by ranges (SFTP: `cp` run on the server, which a file system that can clones
  // without reading or writing a data block). Called first, before any write() or copy().
  // Ok: those bytes are in place, as after copy() of every range. Unsupported: there is no
  // such way here, or it did not work (what it left in the range is overwritten by later
  // calls): copy() the ranges instead. Any other failure leaves the upload unusable (a copy
  // may still be running on the server): abort() it. Also PreconditionFailed as for copy().
  virtual Status copy_whole(const ObjectInfo& base);
  // Makes the object of `size` bytes visible under key(), with options' metadata and content
  // type (on S3 at the cost of a self-copy when they are not UploadOptions'), if
  // options.if_match / if_none_match hold as for put(). Returns the new object's info:
  // S3 its "-N" ETag (checked against the parts' MD5s where the server names it); a store that
  // computes content MD5s (SFTP) returns one only when it hashed every byte of the object in
  // order, and the object's version otherwise.
  virtual Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) = 0;
  // Drops what the server holds of the upload (S3 AbortMultipartUpload, SFTP removes the
  // temporary file). A failure leaves the leftover noted in the journal.
  virtual Status abort() = 0;
};

// Forwards every call to another upload: the wrappers' uploads derive from it.
class ForwardingUpload : public Upload {
 public:
  explicit ForwardingUpload(std::unique_ptr<Upload> target) : target_(std::move(target)) {}

  const std::string& key() const override { return target_->key(); }
  uint64_t part_size() const override { return target_->part_size(); }
  bool whole_parts() const override { return target_->whole_parts(); }
  uint64_t max_size() const override { return target_->max_size(); }
  Status write(uint64_t offset, const ByteSource& source, uint64_t source_offset,
               uint64_t length) override {
    return target_->write(offset, source, source_offset, length);
  }
  Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
              uint64_t length) override {
    return target_->copy(offset, base, base_offset, length);
  }
  Status copy_whole(const ObjectInfo& base) override { return target_->copy_whole(base); }
  Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) override {
    return target_->complete(size, options);
  }
  Status abort() override { return target_->abort(); }

  Upload& target() { return *target_; }

 private:
  std::unique_ptr<Upload> target_;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // Size, ETag, mtime and user metadata of `key`. NotFound when there is no such object.
  virtual Result<ObjectInfo> head(std::string_view key) = 0;

  // One bulk read of up to buf.size() bytes at `offset`, straight into buf. Returns the number
  // of bytes read: fewer than buf.size() only at the end of the object, 0 at or past the end.
  // With if_match set, fails with PreconditionFailed when the object's ETag differs.
  virtual Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                              const ETag* if_match) = 0;

  // One page of the keys under options.prefix, in key order.
  virtual Result<Listing> list(const ListOptions& options) = 0;

  // Creates or replaces `key` with the bytes of `source` (multipart above the threshold, with
  // parts in parallel). Returns the new object's info, with the ETag the server acknowledged
  // (checked against the MD5 objfs sent). On failure the old object, if any, is unchanged.
  virtual Result<ObjectInfo> put(std::string_view key, const ByteSource& source,
                                 const PutOptions& options) = 0;

  // Server-side copy of the object described by `src` (its key, size and ETag are used) to
  // `dst`. Returns the destination's info, its ETag included.
  virtual Result<ObjectInfo> copy(const ObjectInfo& src, std::string_view dst,
                                  const CopyOptions& options) = 0;

  // Replaces the user metadata (and with options.content_type the content type) of `key`,
  // keeping its bytes. PreconditionFailed when the object is no longer options.expected's
  // ETag, NotFound when there is no such object. Returns the object's new info: its ETag is
  // the old one for a plain-MD5 S3 object copied in one piece. S3: a copy onto itself with
  // MetadataDirective REPLACE (UploadPartCopy above the copy threshold); SFTP: SETSTAT.
  virtual Result<ObjectInfo> set_attributes(std::string_view key, const Metadata& metadata,
                                            const SetAttributesOptions& options) = 0;

  // Deletes `key`. Deleting a key that does not exist succeeds.
  virtual Status remove(std::string_view key) = 0;

  // Deletes `key` while it holds the version `etag` (what this mount last knew there), and
  // only then: another client's version stored since stays, and the call fails with
  // PreconditionFailed. Succeeds when the key holds nothing. The default looks first, which
  // leaves another client the round trip up to the removal; SFTP does so under the key's
  // commit lock, which another objfs client's conditional commit waits for. S3 sends If-Match
  // (which AWS honours, RGW 16 ignores), and looks first unless `known_current` (the caller
  // saw that version there moments ago: a rename's copy of it).
  virtual Status remove_if_match(std::string_view key, const ETag& etag, bool known_current);

  // Deletes many keys (S3 DeleteObjects, 1000 a request). The first failure is returned, and
  // keys that could not be deleted are named in its message.
  virtual Status remove_many(const std::vector<std::string>& keys) = 0;

  // Only when capabilities().native_rename: moves the file or directory `from` to `to` (keys
  // without a trailing slash) in one atomic server operation, replacing a file or an empty
  // directory at `to`. Keeps content, mtime and version. Unsupported elsewhere.
  virtual Status rename(std::string_view from, std::string_view to);

  // Creates `key` as a symbolic link to `target` (which is not interpreted). By default, as s3fs
  // does, an object whose content is the target and whose metadata (options.metadata) has
  // S_IFLNK in its "mode"; SFTP makes a link on the server.
  virtual Result<ObjectInfo> symlink(std::string_view key, std::string_view target,
                                     const PutOptions& options);
  // The target of the link `key`: by default the object's content.
  virtual Result<std::string> read_link(std::string_view key);

  // The capacity of the file system the store's files are on. Unsupported by default: an
  // object store has no meaningful capacity.
  virtual Result<StoreSpace> space();

  // The MD5 of the content of `key` (of `size` bytes, which bounds how long the server may take),
  // computed where it is stored, with none of its bytes through this machine (SFTP: `md5sum`
  // run on the server); nullopt where the store cannot (the default), and the caller reads and
  // hashes the bytes itself. The caller checks that the object did not change meanwhile.
  virtual Result<OptionalMd5> server_md5(std::string_view key, uint64_t size);

  // Starts putting `key` together from pieces (see Upload). Unsupported by default
  // (capabilities().upload_sessions false).
  virtual Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                                       const UploadOptions& options);

  virtual Capabilities capabilities() const = 0;

  // Where this store points, for messages: "s3://bucket/prefix at http://127.0.0.1:8000".
  virtual std::string describe() const = 0;

 protected:
  // remove_if_match's look first: true when `key` holds the version `etag`, false when it holds
  // nothing (the removal has nothing left to do), PreconditionFailed when it holds another.
  Result<bool> HoldsVersion(std::string_view key, const ETag& etag);
};

// Forwards every call to another store. Wrappers derive from it and override only what they
// change (leveldb's EnvWrapper).
class ForwardingStore : public ObjectStore {
 public:
  explicit ForwardingStore(std::shared_ptr<ObjectStore> target) : target_(std::move(target)) {}

  Result<ObjectInfo> head(std::string_view key) override { return target_->head(key); }
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override {
    return target_->read(key, offset, buf, if_match);
  }
  Result<Listing> list(const ListOptions& options) override { return target_->list(options); }
  Result<ObjectInfo> put(std::string_view key, const ByteSource& source,
                         const PutOptions& options) override {
    return target_->put(key, source, options);
  }
  Result<ObjectInfo> copy(const ObjectInfo& src, std::string_view dst,
                          const CopyOptions& options) override {
    return target_->copy(src, dst, options);
  }
  Result<ObjectInfo> set_attributes(std::string_view key, const Metadata& metadata,
                                    const SetAttributesOptions& options) override {
    return target_->set_attributes(key, metadata, options);
  }
  Status remove(std::string_view key) override { return target_->remove(key); }
  Status remove_if_match(std::string_view key, const ETag& etag, bool known_current) override {
    return target_->remove_if_match(key, etag, known_current);
  }
  Status remove_many(const std::vector<std::string>& keys) override {
    return target_->remove_many(keys);
  }
  Status rename(std::string_view from, std::string_view to) override {
    return target_->rename(from, to);
  }
  Result<ObjectInfo> symlink(std::string_view key, std::string_view target,
                             const PutOptions& options) override {
    return target_->symlink(key, target, options);
  }
  Result<std::string> read_link(std::string_view key) override { return target_->read_link(key); }
  Result<StoreSpace> space() override { return target_->space(); }
  Result<OptionalMd5> server_md5(std::string_view key, uint64_t size) override {
    return target_->server_md5(key, size);
  }
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override {
    return target_->start_upload(key, options);
  }
  Capabilities capabilities() const override { return target_->capabilities(); }
  std::string describe() const override { return target_->describe(); }

  ObjectStore& target() { return *target_; }

 private:
  std::shared_ptr<ObjectStore> target_;
};

// The longest target a symbolic link may have: a path (PATH_MAX, less its NUL).
inline constexpr uint64_t kMaxLinkTarget = 4095;
// NameTooLong, for a link `key` whose target takes `size` bytes, above kMaxLinkTarget.
Status LinkTargetTooLong(std::string_view key, uint64_t size);

// Reads the whole object into a string (tests and small objects only).
Result<std::string> ReadAll(ObjectStore& store, std::string_view key);
// The same for `key`, whose HEAD gave `info` (its size and ETag), without asking again.
Result<std::string> ReadAllOf(ObjectStore& store, std::string_view key, const ObjectInfo& info);

// Whether `key` in `store` meets the conditions of `options` (If-Match, If-None-Match), checked by
// a HEAD where the request that stores it cannot carry them (a multipart completion on a server
// that ignores them, a move): ok; PreconditionFailed naming `what`; or the HEAD's own failure.
// A round trip's window remains between the check and the request.
Status CheckPutConditions(ObjectStore& store, std::string_view key, const PutOptions& options,
                          const std::string& what);

}  // namespace objfs
