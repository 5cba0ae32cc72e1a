#!/usr/bin/env bash
# Measures objfs's sftp:// mounts against sshfs, `sftp get` and `ssh cat` on the same throwaway
# OpenSSH sshd on 127.0.0.1, in one run:
#   - sequential read of a SIZE_MIB file (objfs, sshfs with ssh's default and with objfs's
#     cipher; objfs and sshfs-with-AES-GCM with -o direct_io; and as ceilings `ssh cat` with
#     both ciphers and `sftp get`), with the client's CPU seconds per GiB read: the median of
#     OBJFS_BENCH_ROUNDS rounds (default 3) that each read once with every tool;
#   - a second sequential read of that file in the same mount (objfs, and the baseline): first
#     and second read's speed, and the bytes the second read fetched from the server;
#   - `cp` of that file within the mount (objfs uses the server's copy-data);
#   - `rsync -a` of 300 files of 8 KiB into the mount;
#   - `cp` of a SIZE_MIB file into the mount, close included (objfs uploads parts while cp
#     writes, and its close returns with the file on the server's disk), against sshfs and
#     `ssh cat > file` with the AES-GCM cipher objfs prefers, with and without a `sync` of the
#     file on the server after it.
# Prints a Markdown table. Not a test: numbers, not assertions.
#
# usage: tools/bench-sftp.sh [SIZE_MIB]   (as root; default 512)
# env:   OBJFS_BASELINE=PATH  another objfs binary, measured in the same rounds ("baseline" rows)
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
dpkg-query -W -f='${Status}' sshfs 2>/dev/null | grep -q 'install ok installed' ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends sshfs >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build objfs >/dev/null

WORK=$(mktemp -d /tmp/objfs-bench-sftp.XXXXXX)
MNT=$WORK/mnt
mkdir -p "$MNT"
PID=
unmount_all() {
  if mountpoint -q "$MNT"; then fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" || true; fi
  if [ -n "$PID" ]; then
    for _ in $(seq 1200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  PID=
}
cleanup() {
  unmount_all
  tests/fixtures/sshd.sh stop "$WORK/sshd" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

tests/fixtures/sshd.sh start "$WORK/sshd" >/dev/null
# shellcheck disable=SC1091
. "$WORK/sshd/env"
H=$OBJFS_TEST_SFTP_HOST P=$OBJFS_TEST_SFTP_PORT U=$OBJFS_TEST_SFTP_USER
KEY=$OBJFS_TEST_SFTP_KEY KH=$OBJFS_TEST_SFTP_KNOWN_HOSTS DATA=$OBJFS_TEST_SFTP_ROOT/bench
mkdir -p "$DATA"
head -c $((SIZE_MIB << 20)) /dev/urandom > "$DATA/big.bin"
mkdir -p "$WORK/small"
for i in $(seq 1 300); do head -c 8192 /dev/urandom > "$WORK/small/f$i"; done
SSH_OPTS=(-i "$KEY" -o "UserKnownHostsFile=$KH" -o StrictHostKeyChecking=yes -o BatchMode=yes)

wait_mounted() {
  for _ in $(seq 300); do mountpoint -q "$MNT" && return 0; sleep 0.1; done
  echo "mount did not come up" >&2; return 1
}
mount_tool() {  # mount_tool NAME; NAME baseline-X: tool X with $OBJFS_BASELINE
  local bin=build/objfs tool=$1
  case $tool in baseline-*) bin=$BASELINE; tool=${tool#baseline-} ;; esac
  case $tool in
    objfs) "$bin" "sftp://$U@$H:$P$DATA" "$MNT" -f \
             -o "identity=$KEY,known_hosts=$KH,cache_dir=$WORK/objfs-cache" & PID=$! ;;
    objfs-direct_io) "$bin" "sftp://$U@$H:$P$DATA" "$MNT" -f \
             -o "identity=$KEY,known_hosts=$KH,cache_dir=$WORK/objfs-cache,direct_io" & PID=$! ;;
    objfs-writeback) "$bin" "sftp://$U@$H:$P$DATA" "$MNT" -f \
             -o "identity=$KEY,known_hosts=$KH,cache_dir=$WORK/objfs-cache,writeback=5" & PID=$! ;;
    sshfs) sshfs "$U@$H:$DATA" "$MNT" -f -p "$P" -o "IdentityFile=$KEY,UserKnownHostsFile=$KH" \
             -o StrictHostKeyChecking=yes >/dev/null 2>&1 & PID=$! ;;
    sshfs-aesgcm) sshfs "$U@$H:$DATA" "$MNT" -f -p "$P" -o "IdentityFile=$KEY,UserKnownHostsFile=$KH" \
             -o StrictHostKeyChecking=yes -o Ciphers=aes128-gcm@openssh.com >/dev/null 2>&1 & PID=$! ;;
    sshfs-aesgcm-direct_io) sshfs "$U@$H:$DATA" "$MNT" -f -p "$P" \
             -o "IdentityFile=$KEY,UserKnownHostsFile=$KH" -o StrictHostKeyChecking=yes \
             -o Ciphers=aes128-gcm@openssh.com -o direct_io >/dev/null 2>&1 & PID=$! ;;
  esac
  wait_mounted
}
# The processes whose CPU a read costs the client: objfs alone; sshfs and the ssh it runs for
# its connection. sshfs forks twice to start ssh, so ssh is not its child: find it by the port.
client_pids() {  # client_pids TOOL PID
  echo "$2"
  case $1 in
    sshfs*) pgrep -f -- "^ssh .*-oPort=$P( |\$)" || true ;;
  esac
}
cpu_ticks() {  # cpu_ticks PID...
  local total=0 p
  for p in "$@"; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$total"
}
HZ=$(getconf CLK_TCK)

echo "| what | tool | result | client CPU s/GiB |"
echo "|---|---|---|---|"
# Each read is one sample; rounds alternate the tools and the table shows the median. Every
# read starts with the page cache dropped (the server's copy of the file too).
READS=$WORK/reads.txt
: > "$READS"
sample() {  # sample LABEL T0 T1 [C0 C1]: one read's rate (and client CPU) into $READS
  awk -v s="$SIZE_MIB" -v t0="$2" -v t1="$3" -v c0="${4:-}" -v c1="${5:-}" -v hz="$HZ" -v l="$1" \
    'BEGIN { printf "%s|%.0f|%s\n", l, s / (t1 - t0),
             c0 == "" ? "" : sprintf("%.2f", (c1 - c0) / hz / (s / 1024)) }' >> "$READS"
}
for _ in $(seq "${OBJFS_BENCH_ROUNDS:-3}"); do
  # ssh's default cipher (chacha20-poly1305), and the AES-GCM that objfs prefers on CPUs with
  # AES instructions, for a like-for-like ceiling.
  for cipher in default aes128-gcm@openssh.com; do
    extra=()
    [ "$cipher" = default ] || extra=(-c "$cipher")
    sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now)
    ssh "${SSH_OPTS[@]}" "${extra[@]}" -p "$P" "$U@$H" cat "$DATA/big.bin" > /dev/null
    t1=$(now)
    sample "ssh cat, $cipher cipher (ceiling)" "$t0" "$t1"
  done
  sync; echo 3 > /proc/sys/vm/drop_caches
  t0=$(now)
  echo "get $DATA/big.bin /dev/null" | sftp "${SSH_OPTS[@]}" -P "$P" -q -b - "$U@$H" > /dev/null
  t1=$(now)
  sample "sftp get" "$t0" "$t1"
  for tool in objfs ${BASELINE:+baseline-objfs} sshfs sshfs-aesgcm objfs-direct_io \
      ${BASELINE:+baseline-objfs-direct_io} sshfs-aesgcm-direct_io; do
    if ! mount_tool "$tool"; then echo "$tool|did not mount|" >> "$READS"; unmount_all; continue; fi
    sync; echo 3 > /proc/sys/vm/drop_caches
    mapfile -t pids < <(client_pids "$tool" "$PID")
    case $tool in sshfs*) [ "${#pids[@]}" -eq 2 ] || { echo "no ssh process for $tool" >&2; exit 1; } ;; esac
    c0=$(cpu_ticks "${pids[@]}"); t0=$(now)
    dd if="$MNT/big.bin" of=/dev/null bs=1M status=none
    t1=$(now); c1=$(cpu_ticks "${pids[@]}")
    sample "$tool" "$t0" "$t1" "$c0" "$c1"
    unmount_all
  done
done
awk -F'|' -v what="sequential read $SIZE_MIB MiB" -v unit=MiB/s -f tools/bench-median.awk \
  "$READS"

# A second sequential read in the same mount: the kernel keeps the file's pages across opens
# while the object is unchanged, so it should make no backend read at all. First and second
# read of the file on one mount (caches dropped before the first only), and what the second
# fetched from the server (user.objfs.stats: bytes_read, read_requests), in rounds like the
# reads above.
# shellcheck source=bench-second-read.sh
. "$ROOT/tools/bench-second-read.sh"

timed() {  # timed LABEL TOOL COMMAND...
  local label=$1 tool=$2; shift 2
  if ! mount_tool "$tool"; then echo "| $label | $tool | did not mount | |"; unmount_all; return; fi
  local t0 t1 t2
  t0=$(now)
  "$@" >/dev/null || echo "| $label | $tool | command failed | |"
  t1=$(now)
  unmount_all
  t2=$(now)
  awk -v t0="$t0" -v t1="$t1" -v t2="$t2" -v l="$label" -v tool="$tool" \
    'BEGIN { printf "| %s | %s | %.2f s (%.2f s to unmounted) | |\n", l, tool, t1 - t0, t2 - t0 }'
}
for tool in objfs ${BASELINE:+baseline-objfs} sshfs; do
  timed "cp ${SIZE_MIB} MiB within the mount" "$tool" cp "$MNT/big.bin" "$MNT/copy-$tool.bin"
done
for tool in objfs objfs-writeback ${BASELINE:+baseline-objfs baseline-objfs-writeback} sshfs; do
  timed "rsync -a of 300 x 8 KiB files" "$tool" rsync -a "$WORK/small/" "$MNT/rsync-$tool/"
  stored=$(find "$DATA/rsync-$tool" -type f 2>/dev/null | wc -l)
  echo "| files on the server after the rsync | $tool | $stored of 300 | |"
done

# Writes: cp into the mount, close included, in alternating rounds; `ssh cat > file` with the
# cipher objfs prefers is the ceiling.
head -c $((SIZE_MIB << 20)) /dev/urandom > "$WORK/src.bin"
WRITES=$WORK/writes.txt
: > "$WRITES"
# Each round starts with another tool (rotated, in tools/bench-common.sh says why).
WRITERS=(objfs ${BASELINE:+baseline-objfs} sshfs sshfs-aesgcm)
for round in $(seq 0 $((${OBJFS_BENCH_ROUNDS:-3} - 1))); do
  t0=$(now)
  ssh "${SSH_OPTS[@]}" -c aes128-gcm@openssh.com -p "$P" "$U@$H" "cat > $DATA/in-ssh.bin" \
    < "$WORK/src.bin"
  t1=$(now)
  awk -v s="$SIZE_MIB" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "ssh cat > file, aes128-gcm (ceiling)|%.0f|\n", s / (t1 - t0) }' >> "$WRITES"
  rm -f "$DATA/in-ssh.bin"
  # The same, with the file on the server's disk when it returns, as objfs's close has it
  # (fsync@openssh.com before the rename); sshfs leaves it in the server's page cache.
  t0=$(now)
  ssh "${SSH_OPTS[@]}" -c aes128-gcm@openssh.com -p "$P" "$U@$H" \
    "cat > $DATA/in-ssh.bin && sync $DATA/in-ssh.bin" < "$WORK/src.bin"
  t1=$(now)
  awk -v s="$SIZE_MIB" -v t0="$t0" -v t1="$t1" 'BEGIN {
    printf "ssh cat > file; sync file, aes128-gcm (durable ceiling)|%.0f|\n", s / (t1 - t0) }' \
    >> "$WRITES"
  rm -f "$DATA/in-ssh.bin"
  for tool in $(rotated "$round" "${WRITERS[@]}"); do
    if ! mount_tool "$tool"; then echo "$tool|did not mount|" >> "$WRITES"; unmount_all; continue; fi
    t0=$(now)
    cp "$WORK/src.bin" "$MNT/in-$tool.bin" || echo "$tool|cp failed|" >> "$WRITES"
    t1=$(now)
    unmount_all
    awk -v s="$SIZE_MIB" -v t0="$t0" -v t1="$t1" -v l="$tool" \
      'BEGIN { printf "%s|%.0f|\n", l, s / (t1 - t0) }' >> "$WRITES"
    rm -f "$DATA/in-$tool.bin"
  done
done
awk -F'|' -v what="cp $SIZE_MIB MiB into the mount, close included" -v unit=MiB/s \
  -f tools/bench-median.awk "$WRITES"
