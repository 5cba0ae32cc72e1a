#!/usr/bin/env bash
# Measures objfs against s3fs and rclone mount on the same throwaway Ceph RGW, in one run:
#   - sequential read of a 512 MiB file (objfs with read_buffer 4K, 64K, 1M, 8M; s3fs; rclone;
#     objfs and s3fs with -o direct_io; and a plain curl GET as the ceiling), with the client's
#     CPU seconds per GiB read: the median of OBJFS_BENCH_ROUNDS rounds (default 3) that each
#     read once with every tool, since the server's own speed drifts within a run;
#   - a second sequential read of that file in the same mount (objfs, and the baseline): first
#     and second read's speed, and the bytes the second read fetched from the bucket;
#   - `cp` of that file within the mount;
#   - `ls -l` of a directory of 1,000 objects on a fresh mount, and again on the next mount
#     (the median of rounds too), and on a fresh objfs mount with -o listing_attrs;
#   - `rsync -a` of 300 files of 8 KiB into the mount (rclone both with --vfs-cache-mode writes,
#     which uploads after close, and at its defaults, where close waits for the upload).
# Prints a Markdown table. Not a test: numbers, not assertions.
#
# usage: tools/bench-s3.sh [SIZE_MIB]   (as root; default 512)
# env:   OBJFS_BENCH_READ_BUFFERS="4K 64K 1M 8M"  the objfs read_buffer rows
#        OBJFS_BASELINE=PATH  another objfs binary, measured in the same rounds ("baseline" rows)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=bench-common.sh
. tools/bench-common.sh
SIZE_MIB=${1:-512}
BASELINE=${OBJFS_BASELINE:-}
if [ -n "$BASELINE" ] && [ ! -x "$BASELINE" ]; then
  echo "OBJFS_BASELINE=$BASELINE is not an executable" >&2; exit 2
fi

bash tools/install-deps.sh >/dev/null
for p in s3fs rclone; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build objfs >/dev/null

WORK=$(mktemp -d /tmp/objfs-bench.XXXXXX)
MNT=$WORK/mnt
mkdir -p "$MNT"
PID=
cleanup() {
  unmount_all
  tests/fixtures/rgw.sh stop "$WORK/rgw" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
unmount_all() {
  if mountpoint -q "$MNT"; then fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" || true; fi
  if [ -n "$PID" ]; then
    # Daemons upload what they still hold before exiting: wait for that, up to two minutes.
    for _ in $(seq 1200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  PID=
}
trap cleanup EXIT

RGW_ENV=$WORK/rgw/env
RGW_BLOCK=${RGW_BLOCK:-}
tests/fixtures/rgw.sh start "$WORK/rgw" >/dev/null
# shellcheck disable=SC1090
. "$RGW_ENV"
export AWS_ACCESS_KEY_ID=$OBJFS_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$OBJFS_TEST_S3_SECRET_KEY
EP=$OBJFS_TEST_S3_ENDPOINT
s3curl() {
  curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}
s3curl -X PUT "$EP/bench" >/dev/null

head -c $((SIZE_MIB << 20)) /dev/urandom > "$WORK/big.bin"
s3curl -T "$WORK/big.bin" "$EP/bench/big.bin" >/dev/null
rm -f "$WORK/big.bin"
# 1,000 small objects for the listing.
printf x > "$WORK/one-byte"
seq 1 1000 | xargs -P 16 -I{} curl -fsS --aws-sigv4 aws:amz:us-east-1:s3 \
  --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
  -T "$WORK/one-byte" -o /dev/null "$EP/bench/many/f{}"
mkdir -p "$WORK/small"
for i in $(seq 1 300); do head -c 8192 /dev/urandom > "$WORK/small/f$i"; done

echo "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" > "$WORK/s3fs.passwd"
chmod 600 "$WORK/s3fs.passwd"
export RCLONE_CONFIG_RGW_TYPE=s3 RCLONE_CONFIG_RGW_PROVIDER=Ceph RCLONE_CONFIG_RGW_ENDPOINT=$EP \
  RCLONE_CONFIG_RGW_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID \
  RCLONE_CONFIG_RGW_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY

wait_mounted() {
  for _ in $(seq 300); do mountpoint -q "$MNT" && return 0; sleep 0.1; done
  echo "mount did not come up" >&2; return 1
}
mount_tool() {  # mount_tool NAME [objfs options]; NAME baseline-X: tool X with $OBJFS_BASELINE
  local bin=build/objfs tool=$1
  case $tool in baseline-*) bin=$BASELINE; tool=${tool#baseline-} ;; esac
  case $tool in
    objfs) "$bin" s3://bench "$MNT" -f -o "endpoint=$EP,cache_dir=$WORK/objfs-cache${2:+,$2}" &
           PID=$! ;;
    # Uploads 5 s after the last close, like rclone's --vfs-write-back default.
    objfs-writeback) "$bin" s3://bench "$MNT" -f \
                       -o "endpoint=$EP,cache_dir=$WORK/objfs-cache,writeback=5" & PID=$! ;;
    s3fs) s3fs bench "$MNT" -f -o "url=$EP,use_path_request_style,passwd_file=$WORK/s3fs.passwd" \
            >/dev/null 2>&1 & PID=$! ;;
    s3fs-direct_io) s3fs bench "$MNT" -f \
            -o "url=$EP,use_path_request_style,passwd_file=$WORK/s3fs.passwd,direct_io" \
            >/dev/null 2>&1 & PID=$! ;;
    # rclone's S3 client refuses AWS_CA_BUNDLE ("unsupported transport"); it needs none here.
    rclone) env -u AWS_CA_BUNDLE rclone mount rgw:bench "$MNT" --vfs-cache-mode writes \
              --cache-dir "$WORK/rclone-cache" >"$WORK/rclone.log" 2>&1 & PID=$! ;;
    # rclone's own default, --vfs-cache-mode off: a file is uploaded as it is written, and close
    # returns once it is in the bucket (as objfs's does without writeback=).
    rclone-defaults) env -u AWS_CA_BUNDLE rclone mount rgw:bench "$MNT" \
              >"$WORK/rclone.log" 2>&1 & PID=$! ;;
  esac
  wait_mounted
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "| what | tool | result | daemon CPU s/GiB |"
echo "|---|---|---|---|"
# Each read is one sample; rounds alternate the tools, so that the server's drift within the
# run (a fifth, between minutes) is spread over all of them, and the table shows the median.
READS=$WORK/reads.txt
: > "$READS"
seq_read() {  # seq_read LABEL TOOL [opts]
  if ! mount_tool "$2" "${3:-}"; then
    echo "$1|did not mount|" >> "$READS"; unmount_all; return
  fi
  sync; echo 3 > /proc/sys/vm/drop_caches
  local t0 c0 t1 c1
  c0=$(cpu_ticks "$PID"); t0=$(now)
  dd if="$MNT/big.bin" of=/dev/null bs=1M status=none
  t1=$(now); c1=$(cpu_ticks "$PID")
  local hz; hz=$(getconf CLK_TCK)
  awk -v s="$SIZE_MIB" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v hz="$hz" -v l="$1" \
    'BEGIN { printf "%s|%.0f|%.2f\n", l, s / (t1 - t0), (c1 - c0) / hz / (s / 1024) }' >> "$READS"
  unmount_all
}
curl_read() {
  local t0 t1
  sync; echo 3 > /proc/sys/vm/drop_caches
  t0=$(now)
  s3curl -o /dev/null "$EP/bench/big.bin"
  t1=$(now)
  awk -v s="$SIZE_MIB" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "curl GET (ceiling)|%.0f|\n", s / (t1 - t0) }' >> "$READS"
}
for _ in $(seq "${OBJFS_BENCH_ROUNDS:-3}"); do
  curl_read
  for rb in ${OBJFS_BENCH_READ_BUFFERS:-4K 64K 1M 8M}; do
    seq_read "objfs read_buffer=$rb" objfs "read_buffer=$rb"
    [ -z "$BASELINE" ] || seq_read "baseline read_buffer=$rb" baseline-objfs "read_buffer=$rb"
  done
  # Without the page cache: one copy less per byte.
  seq_read "objfs -o direct_io" objfs direct_io
  [ -z "$BASELINE" ] || seq_read "baseline -o direct_io" baseline-objfs direct_io
  seq_read "s3fs -o direct_io" s3fs-direct_io
  seq_read s3fs s3fs
  seq_read "rclone mount" rclone
done
awk -F'|' -v what="sequential read $SIZE_MIB MiB" -v unit=MiB/s -f tools/bench-median.awk \
  "$READS"

# A second sequential read in the same mount: the kernel keeps the file's pages across opens
# while the object is unchanged, so it should make no backend read at all. First and second
# read of the file on one mount (caches dropped before the first only), and what the second
# fetched from the bucket (user.objfs.stats: bytes_read, read_requests), in rounds like the
# reads above.
# shellcheck source=bench-second-read.sh
. "$ROOT/tools/bench-second-read.sh"
# The disk cache has its own benchmark on both backends: tools/bench-cache.sh.

# The time the command took, and in brackets the time until the daemon had exited after the
# unmount, i.e. until everything written was in the bucket (rclone uploads after close).
timed() {  # timed LABEL TOOL COMMAND...
  local label=$1 tool=$2; shift 2
  if ! mount_tool "$tool"; then
    echo "| $label | $tool | did not mount | |"; unmount_all; return
  fi
  local t0 t1 t2
  t0=$(now)
  "$@" >/dev/null || echo "| $label | $tool | command failed | |"
  t1=$(now)
  unmount_all
  t2=$(now)
  awk -v t0="$t0" -v t1="$t1" -v t2="$t2" -v l="$label" -v tool="$tool" \
    'BEGIN { printf "| %s | %s | %.2f s (%.2f s to unmounted) | |\n", l, tool, t1 - t0, t2 - t0 }'
}
for tool in objfs ${BASELINE:+baseline-objfs} s3fs rclone; do
  timed "cp ${SIZE_MIB} MiB within the mount" "$tool" cp "$MNT/big.bin" "$MNT/copy-$tool.bin"
done
# Listings, in rounds like the reads: each round lists once on a fresh mount (for objfs an empty
# cache_dir) and once on the next mount (objfs keeps what the first listing's HEADs found).
LISTS=$WORK/lists.txt
: > "$LISTS"
list_sample() {  # list_sample LABEL TOOL [objfs options]
  if ! mount_tool "$2" "${3:-}"; then echo "$1|did not mount|" >> "$LISTS"; unmount_all; return; fi
  local t0 t1
  t0=$(now)
  ls -l "$MNT/many" > /dev/null || { echo "$1|ls failed|" >> "$LISTS"; unmount_all; return; }
  t1=$(now)
  unmount_all
  awk -v t0="$t0" -v t1="$t1" -v l="$1" 'BEGIN { printf "%s|%.3f|\n", l, t1 - t0 }' >> "$LISTS"
}
for _ in $(seq "${OBJFS_BENCH_ROUNDS:-3}"); do
  for tool in objfs ${BASELINE:+baseline-objfs} s3fs rclone; do
    case $tool in *objfs) rm -rf "$WORK/objfs-cache" ;; esac
    list_sample "$tool, fresh mount" "$tool"
    list_sample "$tool, next mount" "$tool"
  done
  # No HEAD per file: the mount's default mode and owner for what the listing lacks.
  rm -rf "$WORK/objfs-cache"
  list_sample "objfs -o listing_attrs, fresh mount" objfs listing_attrs
  if [ -n "$BASELINE" ]; then
    rm -rf "$WORK/objfs-cache"
    list_sample "baseline -o listing_attrs, fresh mount" baseline-objfs listing_attrs
  fi
done
awk -F'|' -v what="ls -l of 1,000 objects" -v unit=s -f tools/bench-median.awk "$LISTS"
for tool in objfs objfs-writeback ${BASELINE:+baseline-objfs baseline-objfs-writeback} s3fs rclone \
    rclone-defaults; do
  timed "rsync -a of 300 x 8 KiB files" "$tool" rsync -a "$WORK/small/" "$MNT/rsync-$tool/"
  # What actually reached the bucket once the daemon had exited.
  stored=$(env -u AWS_CA_BUNDLE rclone lsf "rgw:bench/rsync-$tool/" 2>/dev/null | wc -l || true)
  echo "| objects in the bucket after the rsync | $tool | $stored of 300 | |"
done
