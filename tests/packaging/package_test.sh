#!/usr/bin/env bash
# The Debian package as a user meets it: builds it with tools/package.sh (lintian and
# hardening-check included), installs it with apt-get, checks that the installed binary is
# hardened, that `man objfs` and `man mount.objfs` show the options, that bash completes them,
# mounts an SFTP directory of a loopback sshd through an fstab line with `mount -a` and with
# `mount MOUNTPOINT` (the fstab is a file of its own, `mount -T`: the machine's /etc/fstab is
# left alone), writes through the mount and checks the server's copy, unmounts; with a test RGW
# (OBJFS_TEST_S3_*), mounts a bucket through fstab lines with an empty environment, as at boot,
# the keys in root's ~/.aws/credentials (only where root has no ~/.aws) and in a file named on
# the line; and purges the package. Refuses to run where objfs is installed already.
#
# usage: tests/packaging/package_test.sh [DIR]   (as root) DIR: where tools/package.sh has put
#                                                the package already (else it is built here)
# env:   OBJFS_TEST_SFTP_*   the sshd to use (tests/fixtures/sshd.sh's env); else one is started
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "package_test: FAILED: $*" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ]; then echo "package_test: must run as root" >&2; exit 1; fi
if dpkg-query -W -f='${Status}' objfs 2>/dev/null | grep -q 'ok installed'; then
  echo "package_test: objfs is installed on this machine already; not replacing it" >&2
  exit 1
fi

WORK=$(mktemp -d /tmp/objfs-package-test.XXXXXX)
MNT=$WORK/mnt
INSTALLED=0
SSHD_DIR=
ROOT_AWS=
cleanup() {
  if mountpoint -q "$MNT" 2>/dev/null; then umount "$MNT" || fusermount3 -u "$MNT" || true; fi
  if [ "$INSTALLED" = 1 ]; then apt-get purge -y -qq objfs >/dev/null 2>&1 || true; fi
  if [ -n "$SSHD_DIR" ]; then "$ROOT/tests/fixtures/sshd.sh" stop "$SSHD_DIR" >/dev/null || true; fi
  if [ -n "${ROOT_AWS:-}" ]; then rm -rf "$ROOT_AWS"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

t0=$SECONDS
if [ $# -ge 1 ]; then
  DEBS=$(cd "$1" && pwd)
else
  DEBS=$WORK/debs
  "$ROOT/tools/package.sh" "$DEBS"
fi
deb=$(echo "$DEBS"/objfs_*.deb)
[ -f "$deb" ] || fail "no objfs_*.deb in $DEBS"
echo "package_test: package ready in $((SECONDS - t0)) s: $deb"

# ---- installs with apt, with its dependencies
export DEBIAN_FRONTEND=noninteractive
INSTALLED=1
apt-get install -y -qq --no-install-recommends "$deb" >/dev/null || fail "apt-get install $deb"
dpkg-query -W -f='${Status}' objfs | grep -q 'install ok installed' || fail "objfs not installed"
for f in /usr/bin/objfs /usr/sbin/mount.objfs /usr/share/man/man1/objfs.1.gz \
  /usr/share/man/man8/mount.objfs.8.gz /usr/share/bash-completion/completions/objfs \
  /usr/share/doc/objfs/copyright /usr/share/doc/objfs/changelog.Debian.gz \
  /usr/share/doc/objfs/examples/fstab /usr/share/doc/objfs/examples/mnt-photos.mount \
  /usr/share/doc/objfs/examples/mnt-photos.automount; do
  [ -e "$f" ] || fail "the package did not install $f"
done
# (As tools/package.sh: Debian 12's flags have no -fcf-protection.)
hardening-check --nocfprotection /usr/bin/objfs ||
  fail "hardening-check /usr/bin/objfs"
if readelf -S /usr/bin/objfs | grep -q '\.debug_info'; then fail "/usr/bin/objfs is not stripped"; fi

# ---- man pages, with the options section made from the option declarations
page=$(LC_ALL=C MANWIDTH=100 man -P cat objfs 2>&1) || fail "man objfs: $page"
for want in 'objfs - mount an S3 bucket' 'S3 options' 'part_size=SIZE' 'sessions=N' \
  'Default: 16M.' 'fusermount3 -u'; do
  grep -qF -- "$want" <<<"$page" || fail "man objfs lacks '$want'"
done
page=$(LC_ALL=C MANWIDTH=100 man -P cat 8 mount.objfs 2>&1) || fail "man mount.objfs: $page"
for want in 'mount.objfs - mount(8) helper' 'x-systemd.automount' 'read_buffer=SIZE'; do
  grep -qF -- "$want" <<<"$page" || fail "man 8 mount.objfs lacks '$want'"
done

# ---- bash completion of the -o options and of the URL schemes, for objfs and mount.objfs,
# loaded the way an interactive shell loads them: by command name, on first use
complete_words() {  # complete_words CMD WORD...: what bash completes the last WORD of "CMD WORD..." to
  # shellcheck disable=SC1091
  bash -c '. /usr/share/bash-completion/bash_completion
    __load_completion "$1" || exit 1
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}
    read -r -a spec <<<"$(complete -p "$1")"
    # (compopt says that no completion is running: true, and beside the point.)
    "${spec[2]}" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}" 2>/dev/null
    printf "%s\n" "${COMPREPLY[@]}"' complete "$@"
}
for cmd in objfs mount.objfs; do
  got=$(complete_words $cmd s3://b /mnt -o part_s)
  [ "$got" = "part_size=" ] || fail "'$cmd s3://b /mnt -o part_s' completed to '$got'"
  got=$(complete_words $cmd s3://b /mnt -o ro,path_st)
  [ "$got" = "ro,path_style" ] || fail "'$cmd ... -o ro,path_st' completed to '$got'"
  got=$(complete_words $cmd sf)
  [ "$got" = "sftp://" ] || fail "'$cmd sf' completed to '$got'"
done
got=$(complete_words mount.objfs s3://b /mnt -)
[ "$got" = "$(printf '%s\n' -o -f -s -n -v)" ] || fail "'mount.objfs ... -' completed to '$got'"
got=$(complete_words mount.objfs -)  # (its flags come after the URL and the mount point)
[ -z "$got" ] || fail "'mount.objfs -' completed to '$got'"

# ---- an fstab line, mounted by mount -a and by mount MOUNTPOINT
if [ -z "${OBJFS_TEST_SFTP_HOST:-}" ]; then
  SSHD_DIR=$WORK/sshd
  "$ROOT/tests/fixtures/sshd.sh" start "$SSHD_DIR" >/dev/null
  # shellcheck disable=SC1091
  . "$SSHD_DIR/env"
fi
: "${OBJFS_TEST_SFTP_USER:?}" "${OBJFS_TEST_SFTP_PORT:?}" "${OBJFS_TEST_SFTP_ROOT:?}"
: "${OBJFS_TEST_SFTP_KEY:?}" "${OBJFS_TEST_SFTP_KNOWN_HOSTS:?}"
# The installed objfs, not a build's (mount.objfs prefers $OBJFS_BINARY, which ctest sets).
unset OBJFS_BINARY
REMOTE=$OBJFS_TEST_SFTP_ROOT/package-test-$$
mkdir -p "$REMOTE" "$MNT" "$WORK/cache"
chown "$OBJFS_TEST_SFTP_USER" "$REMOTE"
URL=sftp://$OBJFS_TEST_SFTP_USER@$OBJFS_TEST_SFTP_HOST:$OBJFS_TEST_SFTP_PORT$REMOTE
OPTS=_netdev,nofail,x-systemd.automount,identity=$OBJFS_TEST_SFTP_KEY
OPTS=$OPTS,known_hosts=$OBJFS_TEST_SFTP_KNOWN_HOSTS,cache_dir=$WORK/cache
printf '%s  %s  objfs  %s  0 0\n' "$URL" "$MNT" "$OPTS" > "$WORK/fstab"

mount -a -T "$WORK/fstab" || fail "mount -a -T $WORK/fstab"
mountpoint -q "$MNT" || fail "mount -a returned but $MNT is not mounted"
findmnt -n -o FSTYPE "$MNT" | grep -q objfs || fail "$MNT is not an objfs mount"
echo "written through the fstab mount" > "$MNT/hello.txt"
[ "$(cat "$REMOTE/hello.txt" 2>/dev/null)" = "written through the fstab mount" ] ||
  fail "the server's $REMOTE/hello.txt does not hold what was written and closed"
umount "$MNT" || fail "umount $MNT"
mountpoint -q "$MNT" && fail "$MNT is still mounted after umount"

mount -T "$WORK/fstab" "$MNT" || fail "mount -T $WORK/fstab $MNT"
[ "$(cat "$MNT/hello.txt")" = "written through the fstab mount" ] ||
  fail "mount MOUNTPOINT does not show the file"
umount "$MNT" || fail "umount $MNT"
rm -rf "$REMOTE"

# ---- S3 fstab lines mounted as at boot: an empty environment (no HOME, PATH or AWS_*), the
# keys from root's ~/.aws/credentials (found through the password database) and from a file
# named on the line
if [ -n "${OBJFS_TEST_S3_ENDPOINT:-}" ]; then
  : "${OBJFS_TEST_S3_ACCESS_KEY:?}" "${OBJFS_TEST_S3_SECRET_KEY:?}" "${OBJFS_TEST_S3_REGION:?}"
  BUCKET=package-test-$$
  EMPTY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
  s3curl() {
    curl -sS -f --aws-sigv4 "aws:amz:$OBJFS_TEST_S3_REGION:s3" \
      --user "$OBJFS_TEST_S3_ACCESS_KEY:$OBJFS_TEST_S3_SECRET_KEY" "$@"
  }
  s3curl -X PUT -H "x-amz-content-sha256: $EMPTY_SHA256" "$OBJFS_TEST_S3_ENDPOINT/$BUCKET" ||
    fail "cannot create bucket $BUCKET"
  S3OPTS=endpoint=$OBJFS_TEST_S3_ENDPOINT,path_style,region=$OBJFS_TEST_S3_REGION
  S3OPTS=$S3OPTS,cache_dir=$WORK/s3cache
  keys="aws_access_key_id = $OBJFS_TEST_S3_ACCESS_KEY
aws_secret_access_key = $OBJFS_TEST_S3_SECRET_KEY"
  ROOT_HOME=$(getent passwd root | cut -d: -f6)
  # Root's own files are never touched: that half runs only where root has no ~/.aws.
  if [ ! -e "$ROOT_HOME/.aws" ] && [ ! -L "$ROOT_HOME/.aws" ]; then
    mkdir -m 700 "$ROOT_HOME/.aws"
    ROOT_AWS=$ROOT_HOME/.aws
    printf '[default]\n%s\n' "$keys" > "$ROOT_AWS/credentials"
    printf '%s  %s  objfs  %s  0 0\n' "s3://$BUCKET" "$MNT" "$S3OPTS" > "$WORK/fstab-s3"
    env -i /usr/bin/mount -T "$WORK/fstab-s3" "$MNT" ||
      fail "mount with an empty environment and root's ~/.aws/credentials"
    echo "through root's credentials" > "$MNT/root.txt"
    umount "$MNT" || fail "umount $MNT"
    rm -rf "$ROOT_AWS"
    ROOT_AWS=
    ROOT_TESTED=1
  else
    echo "package_test: $ROOT_HOME/.aws exists; not testing a mount with root's credentials"
  fi
  install -m 600 /dev/null "$WORK/backup.creds"
  printf '[backup]\n%s\n' "$keys" > "$WORK/backup.creds"
  printf '%s  %s  objfs  %s  0 0\n' "s3://$BUCKET" "$MNT" \
    "_netdev,$S3OPTS,credentials_file=$WORK/backup.creds,profile=backup" > "$WORK/fstab-s3"
  env -i /usr/bin/mount -T "$WORK/fstab-s3" "$MNT" ||
    fail "mount with an empty environment and credentials_file="
  echo "through a credentials file" > "$MNT/file.txt"
  umount "$MNT" || fail "umount $MNT"
  [ "$(s3curl -H "x-amz-content-sha256: $EMPTY_SHA256" "$OBJFS_TEST_S3_ENDPOINT/$BUCKET/file.txt")" \
    = "through a credentials file" ] || fail "the server's $BUCKET/file.txt is not what was written"
  if [ "${ROOT_TESTED:-0}" = 1 ]; then
    [ "$(s3curl -H "x-amz-content-sha256: $EMPTY_SHA256" "$OBJFS_TEST_S3_ENDPOINT/$BUCKET/root.txt")" \
      = "through root's credentials" ] || fail "the server's $BUCKET/root.txt is not what was written"
  fi
fi

# ---- purged, nothing of it is left
apt-get purge -y -qq objfs >/dev/null || fail "apt-get purge objfs"
INSTALLED=0
if dpkg-query -W -f='${Status}' objfs 2>/dev/null | grep -q 'ok installed'; then
  fail "objfs still installed after purge"
fi
for f in /usr/bin/objfs /usr/sbin/mount.objfs /usr/share/doc/objfs; do
  [ ! -e "$f" ] || fail "$f is left after purge"
done
echo "package_test: passed in $((SECONDS - t0)) s"
