#include "backend/metrics.h"

namespace objfs {

std::string Metrics::ToText() const {
  std::string out;
  auto line = [&out](const char* name, const std::atomic<uint64_t>& v) {
    out += name;
    out += '=';
    out += std::to_string(v.load(std::memory_order_relaxed));
    out += '\n';
  };
  line("head_requests", head_requests);
  line("read_requests", read_requests);
  line("list_requests", list_requests);
  line("put_requests", put_requests);
  line("copy_requests", copy_requests);
  line("set_attributes_requests", set_attributes_requests);
  line("remove_requests", remove_requests);
  line("rename_requests", rename_requests);
  line("upload_requests", upload_requests);
  line("streamed_parts", streamed_parts);
  line("streamed_fallbacks", streamed_fallbacks);
  line("unfinished_set_aside", unfinished_set_aside);
  line("failed_requests", failed_requests);
  line("in_flight_requests", in_flight_requests);
  line("abandoned_uploads", abandoned_uploads);
  line("bytes_read", bytes_read);
  line("bytes_written", bytes_written);
  line("server_copies", server_copies);
  line("bytes_copied_on_server", bytes_copied_on_server);
  line("bytes_hashed", bytes_hashed);
  line("parts_sent_again", parts_sent_again);
  line("server_md5s", server_md5s);
  line("server_md5_probes", server_md5_probes);
  line("server_cps", server_cps);
  line("etags_reused", etags_reused);
  line("http_requests", http_requests);
  line("retries", retries);
  line("sftp_read_requests", sftp_read_requests);
  line("writeback_failures", writeback_failures);
  line("metadata_deferred", metadata_deferred);
  line("attrs_kept", attrs_kept);
  line("open_files", open_files);
  line("kernel_reads", kernel_reads);
  line("page_cache_keeps", page_cache_keeps);
  line("page_cache_drops", page_cache_drops);
  line("page_cache_invalidations", page_cache_invalidations);
  line("cache_hits", cache_hits);
  line("cache_misses", cache_misses);
  line("data_cache_hit_bytes", data_cache_hit_bytes);
  line("data_cache_miss_bytes", data_cache_miss_bytes);
  line("data_cache_evictions", data_cache_evictions);
  line("data_cache_corrupt", data_cache_corrupt);
  line("data_cache_bytes", data_cache_bytes);
  return out;
}

}  // namespace objfs
