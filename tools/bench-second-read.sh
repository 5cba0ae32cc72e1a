# Sourced by bench-s3.sh and bench-sftp.sh (after their mount_tool, unmount_all, now, MNT,
# WORK, SIZE_MIB and BASELINE): a second sequential read of big.bin in the same mount, first and
# second read's speed, and what the second fetched from the backend (user.objfs.stats).
stats_counter() {  # stats_counter NAME: one counter of the mount's user.objfs.stats
  getfattr --absolute-names --only-values -n user.objfs.stats "$MNT" | awk -F= -v n="$1" '$1 == n { print $2 }'
}
SECOND=$WORK/second.txt
SECOND_BYTES=$WORK/second-bytes.txt
: > "$SECOND"
: > "$SECOND_BYTES"
second_read() {  # second_read TOOL
  if ! mount_tool "$1"; then echo "$1, first read|did not mount|" >> "$SECOND"; unmount_all; return; fi
  sync; echo 3 > /proc/sys/vm/drop_caches
  local t0 t1 t2 t3 b0 b1 r0 r1
  t0=$(now)
  dd if="$MNT/big.bin" of=/dev/null bs=1M status=none
  t1=$(now)
  b0=$(stats_counter bytes_read); r0=$(stats_counter read_requests)
  t2=$(now)
  dd if="$MNT/big.bin" of=/dev/null bs=1M status=none
  t3=$(now)
  b1=$(stats_counter bytes_read); r1=$(stats_counter read_requests)
  awk -v s="$SIZE_MIB" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v t3="$t3" -v l="$1" \
    'BEGIN { printf "%s, first read|%.0f|\n%s, second read|%.0f|\n", l, s / (t1 - t0), l,
             s / (t3 - t2) }' >> "$SECOND"
  echo "$1, bytes read from the backend by the second read ($((r1 - r0)) requests)|$((b1 - b0))|" \
    >> "$SECOND_BYTES"
  unmount_all
}
for _ in $(seq "${OBJFS_BENCH_ROUNDS:-3}"); do
  for tool in objfs ${BASELINE:+baseline-objfs}; do second_read "$tool"; done
done
awk -F'|' -v what="second read $SIZE_MIB MiB, same mount" -v unit=MiB/s \
  -f tools/bench-median.awk "$SECOND"
awk -F'|' -v what="second read $SIZE_MIB MiB, same mount" -v unit=bytes \
  -f tools/bench-median.awk "$SECOND_BYTES"
