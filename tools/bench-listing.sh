#!/usr/bin/env bash
# Measures `ls -l` of one large directory on a throwaway Ceph RGW, in one run: objfs on a fresh
# mount (empty cache_dir), objfs on the next mount over the same cache_dir (which keeps what the
# first mount's HEADs found), and s3fs. For each, the seconds `ls -l` took and the daemon's peak
# resident memory (VmHWM of /proc/PID/status), as a Markdown table. Not a test: numbers, not
# assertions.
#
# usage: tools/bench-listing.sh [N]   (as root; N objects of one byte, default 100000)
# env:   OBJFS_BENCH_OBJFS_OPTIONS  extra -o options of both objfs mounts
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
N=${1:-100000}
case $N in '' | *[!0-9]*) echo "bench-listing.sh: N must be a number, not '$N'" >&2; exit 2 ;; esac

bash tools/install-deps.sh >/dev/null
dpkg-query -W -f='${Status}' s3fs 2>/dev/null | grep -q 'install ok installed' ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends s3fs >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
nice ninja -C build -j2 objfs >/dev/null

# shellcheck source=bench-lib.sh
. tools/bench-lib.sh
bench_start_rgw bench-listing

# N objects of one byte: a few curl processes, each uploading a range of names (curl's URL
# globbing) over parallel reused connections.
printf x > "$WORK/one-byte"
t0=$(date +%s.%N)
CHUNK=5000
upload_range() {  # upload_range FIRST LAST
  s3curl --no-progress-meter -Z --parallel-max 16 -T "$WORK/one-byte" -o /dev/null \
    "$EP/bench/many/f[$1-$2]"
}
export -f s3curl upload_range
export WORK EP
# shellcheck disable=SC2016  # the arguments expand in the child bash
for start in $(seq 1 "$CHUNK" "$N"); do
  end=$((start + CHUNK - 1))
  [ "$end" -le "$N" ] || end=$N
  echo "$start $end"
done | xargs -P 4 -L 1 bash -c 'upload_range "$0" "$1"'
t1=$(date +%s.%N)
listed=$(s3curl "$EP/bench?list-type=2&max-keys=1&prefix=many%2F" | grep -c '<Key>' || true)
[ "$listed" -ge 1 ] || { echo "bench-listing.sh: the objects were not created" >&2; exit 1; }
awk -v n="$N" -v t0="$t0" -v t1="$t1" \
  'BEGIN { printf "created %d objects in %.0f s\n\n", n, t1 - t0 }' >&2

echo "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" > "$WORK/s3fs.passwd"
chmod 600 "$WORK/s3fs.passwd"

mount_tool() {  # mount_tool objfs|s3fs
  case $1 in
    objfs) build/objfs s3://bench "$MNT" -f \
             -o "endpoint=$EP,cache_dir=$WORK/objfs-cache${OBJFS_BENCH_OBJFS_OPTIONS:+,$OBJFS_BENCH_OBJFS_OPTIONS}" &
           PID=$! ;;
    s3fs) s3fs bench "$MNT" -f -o "url=$EP,use_path_request_style,passwd_file=$WORK/s3fs.passwd" \
            >/dev/null 2>&1 & PID=$! ;;
  esac
  wait_mounted
}
sample() {  # sample LABEL TOOL
  if ! mount_tool "$2"; then echo "| $1 | did not mount | | |"; unmount_all; return; fi
  local t0 t1 lines hwm
  t0=$(date +%s.%N)
  # shellcheck disable=SC2012  # ls -l is what is measured
  lines=$(ls -l "$MNT/many" | wc -l)
  t1=$(date +%s.%N)
  hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$PID/status")
  unmount_all
  awk -v t0="$t0" -v t1="$t1" -v l="$1" -v n="$((lines - 1))" -v hwm="$hwm" \
    'BEGIN { printf "| %s | %.1f | %.1f | %d |\n", l, t1 - t0, hwm / 1024, n }'
}

echo "| \`ls -l\` of $N objects | seconds | peak RSS (MiB) | names listed |"
echo "|---|---|---|---|"
rm -rf "$WORK/objfs-cache"
sample "objfs, fresh mount" objfs
sample "objfs, next mount (same cache_dir)" objfs
sample "s3fs" s3fs
