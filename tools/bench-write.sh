#!/usr/bin/env bash
# Measures writing one large file into the mount, close included (dd ... conv=fsync: the data
# is in the bucket when dd returns; and `cp`, whose close returns once the object is stored),
# on a throwaway Ceph RGW, in rounds that alternate:
#   - objfs (parts uploaded while the file is written, the rest at fsync/close), at its
#     defaults and with part_checksum=none (parts sent without their Content-MD5);
#   - optionally a second objfs binary, OBJFS_BASELINE=PATH, to compare two builds;
#   - s3fs, the peer;
#   - for cp, a single-stream `curl -T` PUT of the same file, the ceiling; and curl's multipart
#     upload of it in objfs's parts (16 MiB, 4 at a time), the ceiling of any upload that
#     starts before the file's size is known.
# Reports the median MiB/s with its range, and the daemon's peak resident memory (VmHWM) in
# MiB: the median over the rounds. Each written object is deleted before the next round, so the
# memstore OSD holds one at a time. Not a test: numbers, not assertions.
#
# usage: tools/bench-write.sh [SIZE_MIB]   (as root; default 512)
# env:   OBJFS_BENCH_ROUNDS (default 3); OBJFS_BASELINE=PATH of another objfs binary
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=bench-common.sh
. tools/bench-common.sh
SIZE_MIB=${1:-512}
ROUNDS=${OBJFS_BENCH_ROUNDS:-3}
BASELINE=${OBJFS_BASELINE:-}

bash tools/install-deps.sh >/dev/null
dpkg-query -W -f='${Status}' s3fs 2>/dev/null | grep -q 'install ok installed' ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends s3fs >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build objfs >/dev/null

# shellcheck source=bench-lib.sh
. tools/bench-lib.sh
bench_start_rgw bench-write
head -c $((SIZE_MIB << 20)) /dev/urandom > "$WORK/src.bin"
echo "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" > "$WORK/s3fs.passwd"
chmod 600 "$WORK/s3fs.passwd"

mount_tool() {  # mount_tool NAME
  rm -rf "$WORK/objfs-cache"
  case $1 in
    objfs) build/objfs s3://bench "$MNT" -f -o "endpoint=$EP,cache_dir=$WORK/objfs-cache" &
           PID=$! ;;
    objfs-unhashed) build/objfs s3://bench "$MNT" -f \
                      -o "endpoint=$EP,cache_dir=$WORK/objfs-cache,part_checksum=none" &
                    PID=$! ;;
    baseline) "$BASELINE" s3://bench "$MNT" -f -o "endpoint=$EP,cache_dir=$WORK/objfs-cache" &
              PID=$! ;;
    s3fs) s3fs bench "$MNT" -f -o "url=$EP,use_path_request_style,passwd_file=$WORK/s3fs.passwd" \
            >/dev/null 2>&1 & PID=$! ;;
  esac
  wait_mounted
}

SAMPLES=$WORK/samples.txt
: > "$SAMPLES"
write_sample() {  # write_sample LABEL TOOL
  if ! mount_tool "$2"; then echo "$1|did not mount|" >> "$SAMPLES"; unmount_all; return; fi
  local t0 t1 peak
  t0=$(now)
  dd if="$WORK/src.bin" of="$MNT/written.bin" bs=1M conv=fsync status=none ||
    { echo "$1|dd failed|" >> "$SAMPLES"; unmount_all; return; }
  t1=$(now)
  peak=$(awk '/^VmHWM:/ {print $2}' "/proc/$PID/status")
  unmount_all
  s3curl -X DELETE "$EP/bench/written.bin" >/dev/null
  awk -v s="$SIZE_MIB" -v t0="$t0" -v t1="$t1" -v l="$1" -v kb="$peak" \
    'BEGIN { printf "%s|%.0f|%.0f\n", l, s / (t1 - t0), kb / 1024 }' >> "$SAMPLES"
}
# The file in parts of objfs's default size, for curl's multipart upload: what RGW takes in
# parts, 4 at a time as objfs sends them, when nothing else runs on this machine but curl.
mkdir -p "$WORK/parts"
split -b 16M -d -a 4 "$WORK/src.bin" "$WORK/parts/p"
put_part() {  # put_part NUMBER FILE UPLOAD_ID: prints "NUMBER ETAG"
  local etag
  etag=$(s3curl -T "$2" -D - -o /dev/null "$EP/bench/copied.bin?partNumber=$1&uploadId=$3" |
    tr -d '\r' | awk -F': ' 'tolower($1) == "etag" {print $2}')
  echo "$1 $etag"
}
export -f put_part s3curl
export EP
curl_multipart() {  # one multipart upload of $WORK/parts to copied.bin
  local id i=0 f
  id=$(s3curl -X POST "$EP/bench/copied.bin?uploads=" |
    sed -n 's:.*<UploadId>\(.*\)</UploadId>.*:\1:p')
  [ -n "$id" ] || return 1
  for f in "$WORK"/parts/p*; do i=$((i + 1)); echo "$i $f $id"; done > "$WORK/parts.txt"
  # shellcheck disable=SC2016 # "$@": the arguments xargs gives that bash
  xargs -P 4 -L 1 bash -c 'put_part "$@"' put_part < "$WORK/parts.txt" > "$WORK/etags.txt"
  { echo "<CompleteMultipartUpload>"
    sort -n "$WORK/etags.txt" | while read -r n e; do
      echo "<Part><PartNumber>$n</PartNumber><ETag>$e</ETag></Part>"
    done
    echo "</CompleteMultipartUpload>"; } > "$WORK/complete.xml"
  s3curl -X POST --data-binary @"$WORK/complete.xml" "$EP/bench/copied.bin?uploadId=$id" |
    grep -q '<ETag>'
}
CP_SAMPLES=$WORK/cp-samples.txt
: > "$CP_SAMPLES"
cp_sample() {  # cp_sample LABEL TOOL: cp into the mount (close included), or curl's upload
  local t0 t1 peak=0
  if [ "$2" = curl ]; then
    t0=$(now)
    s3curl -T "$WORK/src.bin" "$EP/bench/copied.bin" >/dev/null ||
      { echo "$1|curl failed|" >> "$CP_SAMPLES"; return; }
    t1=$(now)
  elif [ "$2" = curl-multipart ]; then
    t0=$(now)
    curl_multipart || { echo "$1|curl failed|" >> "$CP_SAMPLES"; return; }
    t1=$(now)
  else
    if ! mount_tool "$2"; then echo "$1|did not mount|" >> "$CP_SAMPLES"; unmount_all; return; fi
    t0=$(now)
    cp "$WORK/src.bin" "$MNT/copied.bin" ||
      { echo "$1|cp failed|" >> "$CP_SAMPLES"; unmount_all; return; }
    t1=$(now)
    peak=$(awk '/^VmHWM:/ {print $2}' "/proc/$PID/status")
    unmount_all
  fi
  s3curl -X DELETE "$EP/bench/copied.bin" >/dev/null
  awk -v s="$SIZE_MIB" -v t0="$t0" -v t1="$t1" -v l="$1" -v kb="$peak" \
    'BEGIN { printf "%s|%.0f|%.0f\n", l, s / (t1 - t0), kb / 1024 }' >> "$CP_SAMPLES"
}
# Each round starts with another tool (rotated, in tools/bench-common.sh says why).
TOOLS=(objfs objfs-unhashed ${BASELINE:+baseline} s3fs)
label() {
  case $1 in
    baseline) echo "objfs baseline ($BASELINE)" ;;
    objfs-unhashed) echo "objfs part_checksum=none" ;;
    *) echo "$1" ;;
  esac
}
for round in $(seq 0 $((ROUNDS - 1))); do
  for tool in $(rotated "$round" "${TOOLS[@]}"); do write_sample "$(label "$tool")" "$tool"; done
  for tool in $(rotated "$round" "${TOOLS[@]}"); do cp_sample "$(label "$tool")" "$tool"; done
  cp_sample "curl PUT, one stream (ceiling)" curl
  cp_sample "curl multipart, 16 MiB parts, 4 at a time" curl-multipart
done
echo "| what | tool | MiB/s (median, range, runs) | peak RSS MiB (median) |"
echo "|---|---|---|---|"
# bench-median.awk's third column is "CPU s/GiB"; here it carries the peak RSS in MiB.
awk -F'|' -v what="write $SIZE_MIB MiB, fsync included" -v unit=MiB/s -f tools/bench-median.awk \
  "$SAMPLES"
awk -F'|' -v what="cp $SIZE_MIB MiB, close included" -v unit=MiB/s -f tools/bench-median.awk \
  "$CP_SAMPLES"
