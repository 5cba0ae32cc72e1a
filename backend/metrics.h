// Counters of one mount: what each operation cost in backend requests, bytes and hashing.
//
// Users and tests read them with `getfattr -n user.objfs.stats MOUNTPOINT`; a test asserts, for
// example, that `cp` within the mount moved 0 bytes through this machine and hashed 0 bytes.
// Plain relaxed atomics: counting must never contend.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace objfs {

struct Metrics {
  // Backend requests by kind (counted by MetricsStore, one per ObjectStore call).
  std::atomic<uint64_t> head_requests{0};
  std::atomic<uint64_t> read_requests{0};
  std::atomic<uint64_t> list_requests{0};
  std::atomic<uint64_t> put_requests{0};
  std::atomic<uint64_t> copy_requests{0};
  // New attributes of one object (chmod, chown, touch, setfattr): S3's self-copy, SFTP's SETSTAT.
  std::atomic<uint64_t> set_attributes_requests{0};
  std::atomic<uint64_t> remove_requests{0};
  std::atomic<uint64_t> rename_requests{0};
  // Upload sessions (ObjectStore::start_upload): their starts, completions and aborts. Their
  // parts count as put_requests (written, in bytes_written) and copy_requests (copied on the
  // server, in bytes_copied_on_server).
  std::atomic<uint64_t> upload_requests{0};
  // Parts of files being written that went up before their close (fs/streamed_upload.h), and
  // the streamed uploads given up for a whole put at close.
  std::atomic<uint64_t> streamed_parts{0};
  std::atomic<uint64_t> streamed_fallbacks{0};
  // Files whose writer's write failed and that were set aside in cache_dir/unfinished/ at its
  // close instead of uploaded (FileWriter::SetAsideUnfinished).
  std::atomic<uint64_t> unfinished_set_aside{0};
  std::atomic<uint64_t> failed_requests{0};
  // Backend calls under way now (a gauge): a number that stays up says the server is slow.
  std::atomic<uint64_t> in_flight_requests{0};
  // Uploads of this mount whose abort failed (the server hung or the connection broke), left on
  // the server until it answers again (a gauge; cache/upload_records.h): S3 multipart uploads,
  // SFTP temporary files.
  std::atomic<uint64_t> abandoned_uploads{0};

  std::atomic<uint64_t> bytes_read{0};     // bytes read from the backend
  std::atomic<uint64_t> bytes_written{0};  // bytes uploaded to the backend
  std::atomic<uint64_t> server_copies{0};  // copies done on the server
  std::atomic<uint64_t> bytes_copied_on_server{0};
  std::atomic<uint64_t> bytes_hashed{0};  // bytes MD5-hashed on this machine
  // S3 parts whose ETag was not the MD5 of the bytes sent, sent again with Content-MD5.
  std::atomic<uint64_t> parts_sent_again{0};
  std::atomic<uint64_t> server_md5s{0};  // MD5s a server computed (SFTP: md5sum run there)
  // SFTP: checks of md5sum on a probe file that it passed (at most one a mount).
  std::atomic<uint64_t> server_md5_probes{0};
  std::atomic<uint64_t> server_cps{0};    // server copies made by SFTP's cp run there
  std::atomic<uint64_t> etags_reused{0};  // copies whose ETag came from the source, unhashed

  // Protocol-level requests below the ObjectStore calls (HTTP requests incl. retries, SFTP
  // READ packets), counted by the backends themselves.
  std::atomic<uint64_t> http_requests{0};
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> sftp_read_requests{0};

  // Uploads of closed files (write-back window) that failed and wait, staged, for a retry.
  std::atomic<uint64_t> writeback_failures{0};

  // chmod, chown, touch and setfattr of closed files held back for metadata_delay, so that
  // what follows (more changes, a rename, an upload) carries them instead of a self-copy each.
  std::atomic<uint64_t> metadata_deferred{0};

  // Listed objects whose metadata came from the cache directory instead of a HEAD.
  std::atomic<uint64_t> attrs_kept{0};

  // Files open through the mount: handles opened and not yet released (a gauge). The kernel
  // releases a file after close(2) returns; this shows when it has.
  std::atomic<uint64_t> open_files{0};

  // Read requests from the kernel (a FUSE read each, at most max_read bytes), whatever served
  // them: shows whether the kernel reads in large pieces.
  std::atomic<uint64_t> kernel_reads{0};

  // The kernel's page cache across opens: opens that kept the cached pages (same version: their
  // reads make no request at all, and show nowhere else), opens that dropped them (the object
  // changed since they were read), and files whose pages lookup, getattr or a rename over them
  // had the kernel drop.
  std::atomic<uint64_t> page_cache_keeps{0};
  std::atomic<uint64_t> page_cache_drops{0};
  std::atomic<uint64_t> page_cache_invalidations{0};

  std::atomic<uint64_t> cache_hits{0};  // metadata or data served without a backend call
  std::atomic<uint64_t> cache_misses{0};

  // The disk cache of object data (-o data_cache, cache/data_cache.h): bytes of reads it served
  // and bytes it had to fetch, blocks evicted to stay under data_cache_size, blocks dropped as
  // damaged (their checksum did not match), and the bytes it holds now (a gauge).
  std::atomic<uint64_t> data_cache_hit_bytes{0};
  std::atomic<uint64_t> data_cache_miss_bytes{0};
  std::atomic<uint64_t> data_cache_evictions{0};
  std::atomic<uint64_t> data_cache_corrupt{0};
  std::atomic<uint64_t> data_cache_bytes{0};

  // "name=value" lines, one counter a line, in a fixed order.
  std::string ToText() const;
};

inline void Bump(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace objfs
