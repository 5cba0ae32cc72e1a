// The one place that states in which order objfs's mutexes may be taken, so that no two
// threads of the FUSE loop can deadlock. A thread holding a lock may only take locks further
// down this list; each lock's owner says which entry it is.
//
//   0. DirHandle::mu (fs/fuse_adapter.cc)  an open directory's listing; held while the
//                         Filesystem reads the next page, so before all of the others.
//   1. Inode::mu          per-inode state (staging file, unsaved data, pending metadata).
//                         At most one at a time. FileWriter::MakeRoom (a full cache_dir),
//                         holding one, only try-locks others: it never waits for a second.
//   2. Filesystem::Handle::mu   per-open-file state (its Prefetcher, copy bookkeeping).
//   3. Filesystem::handles_mu_  the handle map; held only to find, add or erase a handle.
//   4. InodeTable::mu_    ino <-> key maps and lookup counts.
//   5. MetaCache::mu_     cached attributes and negative entries.
//   6. StagingArea::mu_   the staging directory's name counter.
//   7. WritebackQueue::mu_, RecoveryProgress::mu_  the write-back queue and what recovery took
//                         over; leaves, held only to edit them (fs/writeback_queue.h).
//
// Backend calls (ObjectStore) are made with at most lock 1 and 2 held, never 3..6, so slow
// network calls only ever block operations on the same inode.
//
// Below the Filesystem, in the stores, the wrappers and the caches they use:
//
//   8. SftpStore::KeyLock  the changes of one key (keys hashing alike share one); held across
//                         calls to the server on a connection borrowed before it was taken.
//                         At most one at a time.
//   9. ContentEtagStore::records_mu_  a read-check-write of a content ETag record; takes 14.
//  10. Core::mu (cache/prefetcher.cc)  one open file's read-ahead chunks. Never held across a
//                         backend read or IoPool::Submit; dropping a chunk under it returns its
//                         buffer to the BufferPool (19).
//
// The rest are leaves: nothing is locked while one is held.
//
//  11. SftpSessionPool::mu_  idle and borrowed connections, back-off state; the watchdog holds it
//                         while it logs a cut connection, so the log sink must lock nothing here.
//  12. SftpStore::server_mu_  what the first connection learnt about the server.
//  13. ContentEtagStore::copies_mu_  the copies whose content MD5 is shared.
//  14. RecordTable::mu_ (cache/store_db.h)  one persisted record table: its index and log.
//  15. UploadRecords::mu_  the notes of uploads the server holds until completed.
//  16. HttpClient::mu_   the idle curl handles.
//  17. RunParts' mu (backend/s3/s3_store.cc)  the next part of a multipart transfer to hand out.
//  18. IoPool::mu_       the queue of tasks; tasks run without it.
//  19. BufferPool::mu_   idle read-ahead buffers.
//  20. ReplyLog::mu_     the rate limit of failure lines.
//  21. FuseAdapter::mu_  the status of the unmount's last flush.
//  22. MemoryStore::mu_  the in-memory store of the unit tests.
//  23. FaultInjectingStore::mu_  the failures the unit tests inject; hooks run without it.
//  24. ListingAttrStore::mu_  the listings and HEADs under way, and the keys written meanwhile.
//  25. S3Store::Session::mu_, SftpStore::Session::mu_, MemoryStore::MemoryUpload::mu_  one upload
//                         session's parts or ranges and whether it has finished
//                         (backend/object_store.h's Upload); never held across a server call.
//  26. StreamedUpload::mu_ (fs/streamed_upload.h)  the parts of a file streamed while it is
//                         written; taken under Inode::mu, never held across a server call or
//                         IoPool::Submit.
//  27. Filesystem::dir_times_mu_  the directory times this mount moved (fs/filesystem.h).
//  28. PageInvalidator::State::mu (fs/page_invalidator.h)  the inodes whose kernel pages, and the
//                         names whose kernel entries, are to be dropped; never held while the
//                         kernel is notified.
//  29. DataCache::mu_ (cache/data_cache.h)  the disk cache's blocks and their LRU order; never
//                         held across a file or index (14) write, nor an eviction's punch or
//                         removal (done after it, with the range marked as being freed); held
//                         only across the open of an object file not open yet.
//  30. CredentialsHolder::mu_ (backend/s3/credentials.h)  the credentials requests are signed
//                         with; never held while they are resolved again.
//  31. BaseFilledSource::mu_ (fs/file_writer.cc)  the base's blocks an upload read last; never
//                         held across the read of one.
//  32. Inode::work_mu (fs/inode_table.h)  what stat and listings of a file answer while server
//                         work on it holds its Inode::mu; held only to set, clear or read that.
//  33. Filesystem::invalidators_mu_  the kernel invalidation callbacks, which the write-back
//                         thread uses too; held only to set or copy them.
//  34. SftpStore::commit_locks_mu_  the other clients' commit locks this mount found in its
//                         way, and since when, and its own commits whose rename got no reply
//                         (backend/sftp/sftp_store.h).
//  35. KeyResolver::root_mu_  the root's attributes the server last gave (fs/key_resolver.h);
//                         held only to read or set them, never across a request.
//  36. DiskReserve::mu_ (cache/disk_reserve.h)  what may still be staged before cache_dir's
//                         free space is asked again; held across that statvfs only.
//
// The test fixtures' FaultProxy::mu_ and the list of test servers are leaves of the tests.
// Counters (backend/metrics.h, ReadBudget) are atomics, never locks.
//
// Every one of these mutexes is an objfs::Mutex (backend/mutex.h): the fields it guards say so
// with GUARDED_BY and the helpers that expect it held with REQUIRES (FileWriter's methods that
// take an Inode&, the *Locked helpers), and a clang build (-Wthread-safety) checks them. Where
// the analysis cannot follow the code, the escape is as narrow as it gets and says why: an
// inode that may be absent is locked with OptionalInodeLock (fs/inode_table.h) by the two
// functions that opt out (Filesystem::UnlinkLocked, RenameFile), and a callback that runs under
// its caller's lock (RetryWithRoom's retry) asserts it (Mutex::AssertHeld). The order itself is
// checked by this list and by review: Clang's ACQUIRED_AFTER only relates mutexes of one class,
// and no two here nest within one.
#pragma once
