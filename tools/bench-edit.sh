#!/usr/bin/env bash
# Measures edits of a large existing file through the mount, close included, on a throwaway
# bluestore Ceph RGW and OpenSSH sshd on 127.0.0.1, in rounds that alternate the tools:
#   - append 1 MiB to a SIZE_MIB file (`cat >>`);
#   - then write 4 KiB into its middle (`dd conv=notrunc`).
# s3:// against s3fs, sftp:// against sshfs. SFTP runs on the server's ext4 directory, with
# objfs's default (which tries a clone by cp once per mount, fails on ext4, and copies with
# copy-data) and with no_server_cp (copy-data only), and again on an XFS file system made on a
# loop device, where cp clones, when mkfs.xfs is installed. objfs's cp and md5sum run in the
# account's shell, whose start-up files are read first (root's here may run programs), so the
# "-fast" rows are objfs again through a second sshd that gives the sessions an empty HOME: what
# an account whose start-up files return at once costs. The file edited is on the server's disk
# (synced) before each round, as a file is that was not just written: a clone of a file whose
# bytes are still in the page cache makes its fsync write them out. Each row gives the median
# time and the client's /proc/PID/io rchar + wchar (objfs; s3fs; sshfs and its ssh): bytes
# through read(2)- and write(2)-like calls, FUSE's device, staged files and pipes. Sockets read
# and written with recv/send (libcurl and libssh: objfs, s3fs) are not in it; OpenSSH's ssh uses
# read/write, so sshfs's network bytes are. Every round checks the server's copy against the expected bytes
# ("WRONG" in the table otherwise). Not a test: numbers, not assertions.
#
# usage: tools/bench-edit.sh [SIZE_MIB]   (as root; default 512)
# env:   OBJFS_BENCH_ROUNDS (default 3)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=bench-common.sh
. tools/bench-common.sh
SIZE_MIB=${1:-512}
ROUNDS=${OBJFS_BENCH_ROUNDS:-3}

bash tools/install-deps.sh >/dev/null
for pkg in s3fs sshfs; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build objfs >/dev/null

# shellcheck source=bench-lib.sh
. tools/bench-lib.sh
bench_start_rgw bench-edit
# sshd first: bench_cleanup removes $WORK, where sshd.sh finds what to stop.
trap 'tests/fixtures/sshd.sh stop "$WORK/sshd" >/dev/null 2>&1 || true; tests/fixtures/sshd.sh stop "$WORK/sshd-fast" >/dev/null 2>&1 || true; bench_cleanup' EXIT
tests/fixtures/sshd.sh start "$WORK/sshd" >/dev/null
mkdir -p "$WORK/home"
OBJFS_SSHD_HOME=$WORK/home tests/fixtures/sshd.sh start "$WORK/sshd-fast" >/dev/null
# shellcheck disable=SC1091
. "$WORK/sshd-fast/env"
FAST_P=$OBJFS_TEST_SFTP_PORT FAST_KEY=$OBJFS_TEST_SFTP_KEY FAST_KH=$OBJFS_TEST_SFTP_KNOWN_HOSTS
# shellcheck disable=SC1091
. "$WORK/sshd/env"
H=$OBJFS_TEST_SFTP_HOST P=$OBJFS_TEST_SFTP_PORT U=$OBJFS_TEST_SFTP_USER
KEY=$OBJFS_TEST_SFTP_KEY KH=$OBJFS_TEST_SFTP_KNOWN_HOSTS DATA=$OBJFS_TEST_SFTP_ROOT/bench
mkdir -p "$DATA"
# The same server directory on XFS (reflink on: mkfs.xfs's default since xfsprogs 5.1).
XFS_DATA=$OBJFS_TEST_SFTP_ROOT/xfs
XFS_TOOLS=""
if command -v mkfs.xfs >/dev/null; then
  truncate -s $((SIZE_MIB * 4 + 1024))M "$WORK/xfs.img"
  mkfs.xfs -q "$WORK/xfs.img"
  mkdir -p "$XFS_DATA"
  mount -o loop "$WORK/xfs.img" "$XFS_DATA"
  trap 'umount "$XFS_DATA" 2>/dev/null || true; tests/fixtures/sshd.sh stop "$WORK/sshd" >/dev/null 2>&1 || true; tests/fixtures/sshd.sh stop "$WORK/sshd-fast" >/dev/null 2>&1 || true; bench_cleanup' EXIT
  XFS_TOOLS="objfs-sftp-xfs objfs-sftp-xfs-fast sshfs-xfs"
fi
data_of() {  # data_of TOOL: the server directory TOOL's SFTP mount shows
  case $1 in *-xfs|*-xfs-fast) echo "$XFS_DATA" ;; *) echo "$DATA" ;; esac
}
echo "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" > "$WORK/s3fs.passwd"
chmod 600 "$WORK/s3fs.passwd"

head -c $((SIZE_MIB << 20)) /dev/urandom > "$WORK/base.bin"
head -c $((1 << 20)) /dev/urandom > "$WORK/tail.bin"
head -c 4096 /dev/urandom > "$WORK/patch.bin"
PATCH_BLOCK=$(((SIZE_MIB << 20) / 2 / 4096))
cp "$WORK/base.bin" "$WORK/want.bin"
cat "$WORK/tail.bin" >> "$WORK/want.bin"
dd if="$WORK/patch.bin" of="$WORK/want.bin" bs=4096 seek="$PATCH_BLOCK" conv=notrunc status=none
WANT=$(md5sum < "$WORK/want.bin" | cut -c1-32)

mount_tool() {  # mount_tool TOOL
  rm -rf "$WORK/objfs-cache"
  case $1 in
    objfs-s3) build/objfs s3://bench "$MNT" -f -o "endpoint=$EP,cache_dir=$WORK/objfs-cache" &
              PID=$! ;;
    s3fs) s3fs bench "$MNT" -f -o "url=$EP,use_path_request_style,passwd_file=$WORK/s3fs.passwd" \
            >/dev/null 2>&1 & PID=$! ;;
    objfs-sftp*) local extra="" port=$P key=$KEY kh=$KH
                 [ "$1" = objfs-sftp-copydata ] && extra=",no_server_cp"
                 [[ $1 = *-fast ]] && port=$FAST_P key=$FAST_KEY kh=$FAST_KH
                 build/objfs "sftp://$U@$H:$port$(data_of "$1")" "$MNT" -f \
                   -o "identity=$key,known_hosts=$kh,cache_dir=$WORK/objfs-cache$extra" & PID=$! ;;
    sshfs*) sshfs "$U@$H:$(data_of "$1")" "$MNT" -f -p "$P" \
              -o "IdentityFile=$KEY,UserKnownHostsFile=$KH" \
              -o StrictHostKeyChecking=yes >/dev/null 2>&1 & PID=$! ;;
  esac
  wait_mounted
}
# The client's processes: sshfs runs ssh for its connection (not as its child: found by port).
client_io() {  # client_io TOOL: rchar + wchar of the client's processes, in bytes
  local pids=("$PID") total=0 p n
  if [[ $1 = sshfs* ]]; then mapfile -t -O 1 pids < <(pgrep -f -- "^ssh .*-oPort=$P( |\$)" || true); fi
  for p in "${pids[@]}"; do
    n=$(awk '/^(rchar|wchar):/ {s += $2} END {print s + 0}' "/proc/$p/io" 2>/dev/null || echo 0)
    total=$((total + n))
  done
  echo "$total"
}
server_md5() {  # server_md5 TOOL
  case $1 in
    objfs-s3|s3fs) s3curl "$EP/bench/f.bin" | md5sum | cut -c1-32 ;;
    *) md5sum < "$(data_of "$1")/f.bin" | cut -c1-32 ;;
  esac
}

APPENDS=$WORK/appends.txt PATCHES=$WORK/patches.txt
: > "$APPENDS"
: > "$PATCHES"
edit_round() {  # edit_round TOOL
  case $1 in
    objfs-s3|s3fs) s3curl -T "$WORK/base.bin" "$EP/bench/f.bin" >/dev/null ;;
    *) cp "$WORK/base.bin" "$(data_of "$1")/f.bin"
       sync "$(data_of "$1")/f.bin" ;;
  esac
  if ! mount_tool "$1"; then echo "$1|did not mount|" >> "$APPENDS"; unmount_all; return; fi
  local t0 t1 t2 io0 io1 io2 got
  io0=$(client_io "$1")
  t0=$(now)
  cat "$WORK/tail.bin" >> "$MNT/f.bin"
  t1=$(now)
  io1=$(client_io "$1")
  dd if="$WORK/patch.bin" of="$MNT/f.bin" bs=4096 seek="$PATCH_BLOCK" conv=notrunc status=none
  t2=$(now)
  io2=$(client_io "$1")
  unmount_all
  got=$(server_md5 "$1")
  local ok=""
  [ "$got" = "$WANT" ] || ok=" WRONG"
  awk -v t0="$t0" -v t1="$t1" -v a="$((io1 - io0))" -v tool="$1$ok" \
    'BEGIN { printf "%s|%.3f|%.1f\n", tool, t1 - t0, a / 1048576 }' >> "$APPENDS"
  awk -v t1="$t1" -v t2="$t2" -v b="$((io2 - io1))" -v tool="$1$ok" \
    'BEGIN { printf "%s|%.3f|%.1f\n", tool, t2 - t1, b / 1048576 }' >> "$PATCHES"
}
for _ in $(seq "$ROUNDS"); do
  for tool in objfs-s3 s3fs objfs-sftp objfs-sftp-fast objfs-sftp-copydata sshfs $XFS_TOOLS; do
    edit_round "$tool"
  done
done
echo "| edit of a $SIZE_MIB MiB file, close included | tool | seconds (median, range, runs) | client rchar+wchar MiB (median) |"
echo "|---|---|---|---|"
# bench-median.awk's third column is "CPU s/GiB"; here it carries the client's rchar+wchar.
awk -F'|' -v what="append 1 MiB" -v unit=s -f tools/bench-median.awk "$APPENDS"
awk -F'|' -v what="write 4 KiB into the middle" -v unit=s -f tools/bench-median.awk "$PATCHES"
