#!/usr/bin/env bash
# Measures what the page cache kept across opens and the disk cache (-o data_cache) give, on a
# throwaway Ceph RGW (bluestore: a 1 GiB object would sit in a memstore's RAM) and a loopback
# sshd, in one run, for each backend:
#   - a second sequential read of a SIZE_MIB file in the same mount: both reads' speed and the
#     backend read requests of the second (none expected);
#   - with -o data_cache: the first read into an empty cache, and the read after a remount with
#     the kernel's caches dropped: speed, and the backend read requests of the second (only
#     HEADs or stats expected, which are not read requests);
#   - random 4 KiB reads of a cached 1 GiB file (read_buffer=4K, so 4 KiB blocks), with the page
#     cache dropped first, by 1 and by 16 threads: reads/s, and the backend reads they made; and
#     the same reads of the cache's own file, the disk's ceiling;
#   - data_cache_size=256M while 1 GiB is read twice: the most the cache directory, and its
#     blocks alone, held at any sample (every 20 ms, allocated bytes: the files are sparse)
#     against 256 MiB plus a block.
# Prints a Markdown table: the median of OBJFS_BENCH_ROUNDS rounds (default 3) for the reads.
# Not a test: numbers, not assertions.
#
# usage: tools/bench-cache.sh [SIZE_MIB]   (as root; default 512)
# env:   OBJFS_BENCH_RANDOM_READS=20000  random 4 KiB reads per backend
#        OBJFS_BENCH_BACKENDS="s3 sftp"
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=bench-common.sh
. tools/bench-common.sh
SIZE_MIB=${1:-512}
BIG_MIB=1024

bash tools/install-deps.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build objfs >/dev/null

# shellcheck source=bench-lib.sh
. "$ROOT/tools/bench-lib.sh"
bench_start_rgw bench-cache
cleanup_all() {
  bench_cleanup_sshd
  bench_cleanup
}
bench_cleanup_sshd() {
  tests/fixtures/sshd.sh stop "$WORK/sshd" >/dev/null 2>&1 || true
}
trap cleanup_all EXIT
tests/fixtures/sshd.sh start "$WORK/sshd" >/dev/null
# shellcheck disable=SC1091
. "$WORK/sshd/env"
SFTP_URL=sftp://$OBJFS_TEST_SFTP_USER@$OBJFS_TEST_SFTP_HOST:$OBJFS_TEST_SFTP_PORT$OBJFS_TEST_SFTP_ROOT/bench
SFTP_OPTS=identity=$OBJFS_TEST_SFTP_KEY,known_hosts=$OBJFS_TEST_SFTP_KNOWN_HOSTS
mkdir -p "$OBJFS_TEST_SFTP_ROOT/bench"

# The same bytes on both servers.
head -c $((SIZE_MIB << 20)) /dev/urandom > "$OBJFS_TEST_SFTP_ROOT/bench/mid.bin"
head -c $((BIG_MIB << 20)) /dev/urandom > "$OBJFS_TEST_SFTP_ROOT/bench/big.bin"
s3curl -T "$OBJFS_TEST_SFTP_ROOT/bench/mid.bin" "$EP/bench/mid.bin" >/dev/null
s3curl -T "$OBJFS_TEST_SFTP_ROOT/bench/big.bin" "$EP/bench/big.bin" >/dev/null

BACKEND=
mount_objfs() {  # mount_objfs [objfs options]
  case $BACKEND in
    s3) build/objfs s3://bench "$MNT" -f \
          -o "endpoint=$EP,cache_dir=$WORK/objfs-cache${1:+,$1}" & PID=$! ;;
    sftp) build/objfs "$SFTP_URL" "$MNT" -f \
          -o "$SFTP_OPTS,cache_dir=$WORK/objfs-cache${1:+,$1}" & PID=$! ;;
  esac
  wait_mounted
}
stats_counter() {  # stats_counter NAME: one counter of the mount's user.objfs.stats
  getfattr --absolute-names --only-values -n user.objfs.stats "$MNT" |
    awk -F= -v n="$1" '$1 == n { print $2 }'
}
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# timed_read FILE MIB: MiB/s of a sequential read of FILE
timed_read() {
  local t0 t1
  t0=$(now)
  dd if="$MNT/$1" of=/dev/null bs=1M status=none
  t1=$(now)
  awk -v s="$2" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.0f", s / (t1 - t0) }'
}

# random_reads FILE THREADS: reads/s of OBJFS_BENCH_RANDOM_READS random 4 KiB preads of FILE,
# shared out among THREADS threads, with the kernel's read-ahead off for the reader.
random_reads() {
  python3 - "$1" "${OBJFS_BENCH_RANDOM_READS:-20000}" "$2" <<'PY'
import os, random, sys, threading, time
path, count, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
failed = []
def run(seed):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    pages = os.fstat(fd).st_size // 4096
    rng = random.Random(seed)
    for off in [rng.randrange(pages) * 4096 for _ in range(count // jobs)]:
        if len(os.pread(fd, 4096, off)) != 4096:
            failed.append(off)
    os.close(fd)
threads = [threading.Thread(target=run, args=(seed,)) for seed in range(jobs)]
t0 = time.monotonic()
for t in threads: t.start()
for t in threads: t.join()
if failed: sys.exit("short read")
print(f"{count // jobs * jobs / (time.monotonic() - t0):.0f}")
PY
}

SAMPLES=$WORK/samples.txt
: > "$SAMPLES"
sample() { echo "$BACKEND: $1|$2|" >> "$SAMPLES"; }

for _ in $(seq "${OBJFS_BENCH_ROUNDS:-3}"); do
  for BACKEND in ${OBJFS_BENCH_BACKENDS:-s3 sftp}; do
    # The page cache kept across opens.
    rm -rf "$WORK/objfs-cache"
    mount_objfs
    drop_caches
    sample "first read $SIZE_MIB MiB, MiB/s" "$(timed_read mid.bin "$SIZE_MIB")"
    r0=$(stats_counter read_requests)
    sample "second read, same mount, MiB/s" "$(timed_read mid.bin "$SIZE_MIB")"
    sample "second read, same mount, backend read requests" "$(($(stats_counter read_requests) - r0))"
    unmount_all

    # The disk cache across a remount.
    rm -rf "$WORK/objfs-cache" "$WORK/data-cache"
    DOPTS="data_cache=$WORK/data-cache,data_cache_size=$((SIZE_MIB + 64))M"
    mount_objfs "$DOPTS"
    drop_caches
    sample "data_cache: first read, MiB/s" "$(timed_read mid.bin "$SIZE_MIB")"
    unmount_all
    mount_objfs "$DOPTS"
    drop_caches
    r0=$(stats_counter read_requests)
    sample "data_cache: read after a remount, MiB/s" "$(timed_read mid.bin "$SIZE_MIB")"
    sample "data_cache: read after a remount, backend read requests" \
      "$(($(stats_counter read_requests) - r0))"
    unmount_all
  done
done
awk -F'|' -v what="reads" -v unit="" -f tools/bench-median.awk "$SAMPLES" | sed 's/\.00\b//g'

for BACKEND in ${OBJFS_BENCH_BACKENDS:-s3 sftp}; do
  # Random 4 KiB reads of a cached 1 GiB file, by 1 and by 16 threads (each its own
  # descriptor), and, as the ceiling, the same reads of the cache's own file on this disk.
  rm -rf "$WORK/objfs-cache" "$WORK/data-cache"
  ROPTS="data_cache=$WORK/data-cache,data_cache_size=$((BIG_MIB + 64))M,read_buffer=4K"
  mount_objfs "$ROPTS"
  dd if="$MNT/big.bin" of=/dev/null bs=1M status=none
  unmount_all
  mount_objfs "$ROPTS"
  for threads in 1 16; do
    drop_caches
    r0=$(stats_counter read_requests)
    rate=$(random_reads "$MNT/big.bin" "$threads")
    echo "| $BACKEND: random 4 KiB reads of a cached $BIG_MIB MiB file, page cache dropped, $threads thread(s) | $rate reads/s, $(($(stats_counter read_requests) - r0)) backend reads |"
  done
  unmount_all
  for threads in 1 16; do
    drop_caches
    echo "| $BACKEND: the same reads of the disk cache's file itself (the disk's ceiling), $threads thread(s) | $(random_reads "$(find "$WORK/data-cache/objects" -type f | head -1)" "$threads") reads/s |"
  done

  # The size bound while 1 GiB is read twice through a 256 MiB cache.
  rm -rf "$WORK/objfs-cache" "$WORK/data-cache"
  mount_objfs "data_cache=$WORK/data-cache,data_cache_size=256M"
  # Allocated bytes of the whole directory (blocks, index, its compaction copy, directories),
  # and of the blocks alone. (A file renamed under du makes it fail: that sample is skipped.)
  (
    set +e
    while :; do
      echo "$(du -s --block-size=1 "$WORK/data-cache" 2>/dev/null | cut -f1) $(du -s --block-size=1 "$WORK/data-cache/objects" 2>/dev/null | cut -f1)"
      sleep 0.02
    done
  ) > "$WORK/du.txt" &
  sampler=$!
  for _ in 1 2; do
    drop_caches
    dd if="$MNT/big.bin" of=/dev/null bs=1M status=none
  done
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  max=$(awk '$1 > m { m = $1 } END { print m + 0 }' "$WORK/du.txt")
  max_blocks=$(awk '$2 > m { m = $2 } END { print m + 0 }' "$WORK/du.txt")
  echo "| $BACKEND: data_cache_size=256M, $BIG_MIB MiB read twice: the most the directory held at any sample | $((max >> 10)) KiB, its blocks $((max_blocks >> 10)) KiB, in $(wc -l < "$WORK/du.txt") samples 20 ms apart (bound: 262144 KiB plus a block of 1024), $(stats_counter data_cache_evictions) evictions |"
  unmount_all
done
