#!/usr/bin/env bash
# Runs objfs's whole test suite on this machine, from nothing: installs the Debian packages it
# needs, checks formatting and clang-tidy, builds objfs twice (optimised; with AddressSanitizer +
# UndefinedBehaviorSanitizer), starts one throwaway Ceph RADOS Gateway and one OpenSSH sshd on
# 127.0.0.1 for the run, runs every unit and integration test against both builds, and stops the
# servers by PID however the run ends. Server logs of a failed run are kept and their place
# printed. With OBJFS_TEST_TSAN=1 it also builds objfs with clang (its thread-safety analysis as
# errors) and ThreadSanitizer and runs the threaded unit and mount tests in that build: about 6.5
# minutes more on two cores, which CI's 45 minutes do not have room for today (a fresh run took
# 40 min 15 s without it, 46 min 45 s with it).
#
# usage: tools/test.sh            (as root: it installs packages and mounts FUSE filesystems)
# env:   OBJFS_TEST_SKIP_ASAN=1   skip the AddressSanitizer build (quicker local iterations)
#        OBJFS_TEST_TSAN=1        add the clang -Wthread-safety + ThreadSanitizer build
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
JOBS=$(nproc)

bash tools/install-deps.sh
# clang-tidy reads the compile commands of the optimised build, which configuring writes.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
tools/lint.sh --tidy build

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

build() {  # build DIR [cmake args...] [-- ninja targets...]
  local dir=$1; shift
  local args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  if [ $# -gt 0 ]; then shift; fi
  cmake -S . -B "$dir" -G Ninja "${args[@]}" >/dev/null
  ninja -C "$dir" -j "$JOBS" "$@"
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
if [ "${OBJFS_TEST_TSAN:-0}" = 1 ]; then
  # One clang build serves two checks: it compiles with -Wthread-safety as errors (the locking
  # annotations, see fs/lock_order.h), and runs the tests labelled tsan (tests/CMakeLists.txt
  # says which: the unit tests whose code runs on several threads, and the FUSE mount tests
  # that drive the daemon's threads hardest, the mounted objfs included, OBJFS_BINARY being this
  # build's) under ThreadSanitizer. Every test runs in the two builds above.
  echo "== clang -Wthread-safety + ThreadSanitizer build =="
  build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
    -DCMAKE_CXX_COMPILER=clang++-14 -DOBJFS_TSAN=ON -DOBJFS_BUILD_BENCHMARKS=OFF \
    -- tsan_tests
  # Reports go to files as well as failing the process that made them: a mounted objfs that
  # halts is seen by its test, and a report of any process is printed and fails the run.
  mkdir -p "$RUN_DIR/tsan"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tools/tsan.supp:log_path=$RUN_DIR/tsan/report"
  ctest --test-dir build-tsan --output-on-failure --timeout 900 -L tsan || rc=1
  unset TSAN_OPTIONS
  if compgen -G "$RUN_DIR/tsan/report.*" >/dev/null; then
    echo "ThreadSanitizer reports:" >&2
    cat "$RUN_DIR"/tsan/report.* >&2
    rc=1
  fi
fi
STATUS=$rc
exit "$rc"
