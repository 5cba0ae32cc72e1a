# Shared by the RGW benchmarks (tools/bench-*.sh): a throwaway RGW with a bucket "bench", a
# mount point, and the clean-up that unmounts (waiting for the daemon to upload what it holds,
# up to two minutes) and stops the server on exit.
#
# usage: . tools/bench-lib.sh; bench_start_rgw NAME
# sets:  WORK (a fresh directory under /tmp), MNT, PID (of the mounted daemon; the caller sets
#        it), EP, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; defines s3curl, unmount_all,
#        wait_mounted.

unmount_all() {
  if mountpoint -q "$MNT"; then fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" || true; fi
  if [ -n "$PID" ]; then
    for _ in $(seq 1200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  PID=
}

wait_mounted() {
  for _ in $(seq 300); do mountpoint -q "$MNT" && return 0; sleep 0.1; done
  echo "mount did not come up" >&2; return 1
}

s3curl() {
  curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

bench_cleanup() {
  unmount_all
  tests/fixtures/rgw.sh stop "$WORK/rgw" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}

bench_start_rgw() {  # bench_start_rgw NAME
  WORK=$(mktemp -d "/tmp/objfs-$1.XXXXXX")
  MNT=$WORK/mnt
  mkdir -p "$MNT"
  PID=
  trap bench_cleanup EXIT
  # Bluestore: the benchmarks write hundreds of MiB per round, which a memstore holds in RAM.
  OBJFS_RGW_STORE=${OBJFS_RGW_STORE:-bluestore} tests/fixtures/rgw.sh start "$WORK/rgw" >/dev/null
  # shellcheck disable=SC1091
  . "$WORK/rgw/env"
  export AWS_ACCESS_KEY_ID=$OBJFS_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$OBJFS_TEST_S3_SECRET_KEY
  EP=$OBJFS_TEST_S3_ENDPOINT
  s3curl -X PUT "$EP/bench" >/dev/null
}
