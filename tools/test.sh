#!/usr/bin/env bash
# Runs objfs's whole test suite on this machine, from nothing: installs the Debian packages it
# needs, builds objfs twice (optimised, and with AddressSanitizer + UndefinedBehaviorSanitizer),
# starts one throwaway Ceph RADOS Gateway and one OpenSSH sshd on 127.0.0.1 for the run, runs
# every unit and integration test against both builds, and stops the servers by PID however the
# run ends. Server logs of a failed run are kept and their place printed.
#
# usage: tools/test.sh            (as root: it installs packages and mounts FUSE filesystems)
# env:   OBJFS_TEST_SKIP_ASAN=1   run only the optimised build (quicker local iterations)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
JOBS=$(nproc)

bash tools/install-deps.sh
tools/lint.sh

RUN_DIR=$(mktemp -d /tmp/objfs-test.XXXXXX)
STATUS=1
cleanup() {
  tests/fixtures/sshd.sh stop "$RUN_DIR/sshd" >/dev/null 2>&1 || true
  tests/fixtures/rgw.sh stop "$RUN_DIR/rgw" >/dev/null 2>&1 || true
  if [ "$STATUS" -eq 0 ]; then
    rm -rf "$RUN_DIR"
  else
    echo "test servers' logs kept in $RUN_DIR" >&2
  fi
}
trap cleanup EXIT

build() {  # build DIR [cmake args...]
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  ninja -C "$dir" -j "$JOBS"
}

build build -DCMAKE_BUILD_TYPE=RelWithDebInfo

tests/fixtures/rgw.sh start "$RUN_DIR/rgw"
tests/fixtures/sshd.sh start "$RUN_DIR/sshd"
set -a
# shellcheck disable=SC1091
. "$RUN_DIR/rgw/env"
# shellcheck disable=SC1091
. "$RUN_DIR/sshd/env"
set +a

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
rc=0
echo "== optimised build =="
ctest --test-dir build --output-on-failure --timeout 900 || rc=1
if [ "${OBJFS_TEST_SKIP_ASAN:-0}" != 1 ]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer build =="
  build build-asan -DCMAKE_BUILD_TYPE=Debug -DOBJFS_SANITIZE=ON -DOBJFS_BUILD_BENCHMARKS=OFF
  ctest --test-dir build-asan --output-on-failure --timeout 900 || rc=1
fi
STATUS=$rc
exit "$rc"
