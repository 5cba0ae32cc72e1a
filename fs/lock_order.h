// The one place that states in which order objfs's mutexes may be taken, so that no two
// threads of the FUSE loop can deadlock. A thread holding a lock may only take locks further
// down this list; each lock's owner says which entry it is.
//
//   1. Inode::mu          per-inode state (staging file, unsaved data, pending metadata).
//                         At most one at a time. MakeRoomInStaging (a full cache_dir), holding
//                         one, only try-locks others: it never waits for a second.
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
#pragma once
