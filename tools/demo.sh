#!/usr/bin/env bash
# objfs in one command, on a fresh Debian 12 machine: installs what it needs, builds objfs,
# starts a throwaway Ceph RADOS Gateway on 127.0.0.1, mounts a bucket with objfs, copies a file
# in and then within the mount (a server-side copy), shows both files' ETags with getfattr and
# what the copy cost, then unmounts and stops the server. Then the same for SFTP: a throwaway
# OpenSSH sshd on 127.0.0.1, its host key pinned with ssh-keyscan, an sftp:// mount of one of
# its directories, a copy in and one within (the server's copy-data), both files' ETags (the
# copy's reused, not hashed again) and what that cost, and the unmount.
#
# usage: tools/demo.sh   (as root: it installs packages and mounts a FUSE filesystem)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build objfs

WORK=$(mktemp -d /tmp/objfs-demo.XXXXXX)
MNT=$WORK/mnt
mkdir -p "$MNT"
cleanup() {
  if mountpoint -q "$MNT"; then fusermount3 -u "$MNT" || fusermount3 -uz "$MNT" || true; fi
  tests/fixtures/rgw.sh stop "$WORK/rgw" >/dev/null 2>&1 || true
  tests/fixtures/sshd.sh stop "$WORK/sshd" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

tests/fixtures/rgw.sh start "$WORK/rgw"
# shellcheck disable=SC1091
. "$WORK/rgw/env"
export AWS_ACCESS_KEY_ID=$OBJFS_TEST_S3_ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$OBJFS_TEST_S3_SECRET_KEY
curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
  -X PUT "$OBJFS_TEST_S3_ENDPOINT/demo"

step "objfs s3://demo $MNT -o endpoint=$OBJFS_TEST_S3_ENDPOINT"
build/objfs s3://demo "$MNT" -o "endpoint=$OBJFS_TEST_S3_ENDPOINT"

head -c $((24 << 20)) /dev/urandom > "$WORK/report.bin"
step "cp report.bin $MNT/"
cp "$WORK/report.bin" "$MNT/"
step "cp $MNT/report.bin $MNT/copy.bin      # server-side copy"
cp "$MNT/report.bin" "$MNT/copy.bin"
step "ls -l $MNT"
ls -l "$MNT"
step "getfattr -n user.etag $MNT/report.bin $MNT/copy.bin"
getfattr -n user.etag "$MNT/report.bin" "$MNT/copy.bin"
step "md5sum report.bin"
md5sum "$WORK/report.bin"
step "getfattr --only-values -n user.objfs.stats $MNT   # what it all cost"
getfattr --only-values -n user.objfs.stats "$MNT"
step "fusermount3 -u $MNT"
fusermount3 -u "$MNT"

# SFTP: a throwaway sshd with its own host key and a client key allowed to log in as this user.
tests/fixtures/sshd.sh start "$WORK/sshd"
# shellcheck disable=SC1091
. "$WORK/sshd/env"
KEY=$OBJFS_TEST_SFTP_KEY
PORT=$OBJFS_TEST_SFTP_PORT
URL="sftp://$OBJFS_TEST_SFTP_USER@127.0.0.1:$PORT$OBJFS_TEST_SFTP_ROOT"
step "ssh-keyscan -p $PORT -t ed25519 127.0.0.1 > $WORK/known_hosts"
ssh-keyscan -p "$PORT" -t ed25519 127.0.0.1 > "$WORK/known_hosts" 2>/dev/null
cat "$WORK/known_hosts"
step "objfs $URL $MNT -o identity=$KEY,known_hosts=$WORK/known_hosts"
build/objfs "$URL" "$MNT" -o "identity=$KEY,known_hosts=$WORK/known_hosts"
step "cp report.bin $MNT/"
cp "$WORK/report.bin" "$MNT/"
step "cp $MNT/report.bin $MNT/copy.bin      # copy-data on the server"
cp "$MNT/report.bin" "$MNT/copy.bin"
step "ls -l $MNT"
ls -l "$MNT"
step "md5sum $MNT/copy.bin   # the same as report.bin's"
md5sum "$MNT/copy.bin"
step "getfattr -n user.etag $MNT/report.bin $MNT/copy.bin   # content MD5s, kept in the local cache"
getfattr -n user.etag "$MNT/report.bin" "$MNT/copy.bin"
step "getfattr --only-values -n user.objfs.stats $MNT   # what it all cost"
getfattr --only-values -n user.objfs.stats "$MNT"

step "ls -l $OBJFS_TEST_SFTP_ROOT   # on the server: plain files"
ls -l "$OBJFS_TEST_SFTP_ROOT"
step "fusermount3 -u $MNT"
fusermount3 -u "$MNT"
echo "demo done"
