// Running objfs: from the command line's arguments to a served mount, for every URL scheme a
// build of the command line knows.
//
// The shipped binary (cli/main.cc) knows s3:// and sftp:// (StandardSchemes). A build for tests
// adds schemes of its own, such as memory:// over the in-memory store, and otherwise runs exactly
// the same code, so that a mount of it through the kernel exercises everything but the network.
// A scheme is its URL syntax and options (SchemeSyntax, parsed and checked like every other
// option) and a factory that opens the ObjectStore the filesystem mounts.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/log.h"
#include "backend/metrics.h"
#include "backend/object_store.h"
#include "backend/status.h"
#include "cache/upload_records.h"
#include "fs/cli/mount_options.h"

namespace objfs {

// What a store factory gets. It runs after the cache directory exists and is locked, before the
// kernel mount; an error it returns is printed as objfs's one-line error (exit status 1).
// How a store clears one upload it noted (S3: AbortMultipartUpload; SFTP: removes the temporary
// file); `kind` names such an upload in the log.
struct UploadClearing {
  std::function<Status(const OpenUploadRecord&)> clear;
  std::string kind;
};

struct StoreContext {
  const MountOptions& options;
  Metrics& metrics;
  // Where the store notes the uploads the server holds until they complete, so that the next
  // mount over the same cache directory can clear those a crash left.
  std::shared_ptr<UploadRecords> uploads;
  LogFunction log;  // one line to stderr, or syslog in the background
  // Threads the store started (checking the server) do not survive the fork to the background:
  // the store may set these to stop them before it and start them again after it.
  std::function<void()>* stop_threads = nullptr;
  std::function<void()>* start_threads = nullptr;
  // Set by the store: how it removes from the server an upload noted in `uploads` whose abort
  // failed (the server was away then), while the mount runs and at the unmount.
  UploadClearing* clear_upload = nullptr;
  // For a store whose URL does not name its server (S3: the endpoint): called with the server
  // once the store knows it, before the store touches what an earlier mount left (its uploads);
  // an error (the cache directory holds another server's staged writes) refuses the mount.
  std::function<Status(std::string_view server)> check_server;
};

struct Scheme {
  // For s3 and sftp only the name is used: their syntax and options are built in.
  SchemeSyntax syntax;
  std::function<Result<std::shared_ptr<ObjectStore>>(const StoreContext&)> open;
};

// s3:// and sftp://.
std::vector<Scheme> StandardSchemes();

// --version: objfs's version and those of the libraries it runs with, one a line.
std::string VersionText();

// main(): parses `argv`, mounts and serves until unmounted; the exit status. `objfs stats
// MOUNTPOINT` prints a mount's counters instead (cli/stats_command.h). `schemes` are the
// URL schemes this build mounts, StandardSchemes() and any added to them.
int RunObjfs(int argc, char** argv, const std::vector<Scheme>& schemes);

}  // namespace objfs
