#!/usr/bin/env bash
# Runs objfs's whole test suite on this machine, from nothing: installs the Debian packages it
# needs, checks formatting and clang-tidy, builds objfs three times, warnings as errors
# (optimised by gcc, with Debian's hardening flags; by clang with AddressSanitizer +
# UndefinedBehaviorSanitizer; by clang with ThreadSanitizer; both clang builds check the
# locking annotations, -Wthread-safety, as errors), starts one throwaway Ceph RADOS Gateway and one
# OpenSSH sshd on 127.0.0.1 for the run, runs every unit and integration test against the first
# two builds and the threaded unit and mount tests against the third, packages the optimised
# build as a Debian package (tools/package.sh: lintian and hardening-check) and tries it
# (tests/packaging/package_test.sh: apt-get install, man, an fstab mount, purge), and stops the
# servers by PID however the run ends.
# Server logs of a failed run are kept and their place printed.
#
# The tests mostly wait on the servers, so the builds that come later, and clang-tidy, run in
# the background at the lowest CPU priority while the tests of the build before run: one chain,
# in this order, ASan build, TSan build, package, clang-tidy; each stage's output is
# printed when the run gets to it. The tests keep the CPU when they want it (nice 19 against 0), and two cores
# are busy throughout instead of idle while a mount waits on RGW.
#
# usage: tools/test.sh            (as root: it installs packages and mounts FUSE filesystems)
# env:   OBJFS_TEST_SKIP_ASAN=1   skip the AddressSanitizer build (quicker local iterations)
#        OBJFS_TEST_SKIP_TSAN=1   skip the ThreadSanitizer build
#        OBJFS_TEST_SKIP_PACKAGE=1  skip the package's build and test
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
JOBS=$(nproc)

bash tools/install-deps.sh
# The three builds keep line tables only (-g1): backtraces and sanitizer reports still name file
# and line (gdb's local variables need a -g build), and gcc -O2 compiles a third faster. The tests'
# common headers are precompiled once per build (OBJFS_TEST_PCH), about 4 s of CPU less per test.
# On two cores, both took the builds' CPU time by a third.
# The optimised build is also the one packaged (tools/package.sh --from build): it has Debian's
# compiler and linker flags (dpkg-buildflags, hardening=+all), so the binary the tests pass is
# the binary the package ships, and the package costs no build of its own (7 minutes of the
# run's two cores). Its -O2 -g1 comes after Debian's -g -O2 and wins.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
debflags() { dpkg-buildflags --get "$1"; }
# The tests' own code is compiled at -Og here and -O0 under ThreadSanitizer (OBJFS_TEST_OPTIMIZE,
# CMakeLists.txt): it is mostly googletest's macros, which -O2 spent most of the test build on.
# The sanitizer builds are clang's: it compiled the AddressSanitizer one in 54% of gcc's time.
OPTIMISED=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  -DOBJFS_TEST_PCH=ON)
CLANG=(-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14)
PACKAGED=(-DCMAKE_INSTALL_PREFIX=/usr "-DCMAKE_C_FLAGS=$(debflags CFLAGS) $(debflags CPPFLAGS)"
  "-DCMAKE_CXX_FLAGS=$(debflags CXXFLAGS) $(debflags CPPFLAGS)"
  "-DCMAKE_EXE_LINKER_FLAGS=$(debflags LDFLAGS)")
# clang-tidy reads the compile commands of the optimised build, which configuring writes.
cmake -S . -B build -G Ninja -DOBJFS_WERROR=ON "${OPTIMISED[@]}" -DOBJFS_TEST_OPTIMIZE=-Og \
  "${PACKAGED[@]}" >/dev/null
tools/lint.sh build

RUN_DIR=$(mktemp -d /tmp/objfs-test.XXXXXX)
STATUS=1
CHAIN=
RGW_START=
SSHD_START=
# shellcheck disable=SC2317  # run by the EXIT trap
tree_of() {  # tree_of PID: PID and all its descendants, parents first
  local child
  echo "$1"
  for child in $(pgrep -P "$1" 2>/dev/null); do tree_of "$child"; done
}
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  # The whole chain: ninja's compilers, lint.sh's xargs and clang-tidy (a background job of a
  # script ignores SIGINT, so an interrupted run leaves them to this). Stopped first, so that
  # none starts another process meanwhile.
  if [ -n "$CHAIN" ] && kill -0 "$CHAIN" 2>/dev/null; then
    local tree
    tree=$(tree_of "$CHAIN")
    # shellcheck disable=SC2086
    kill -STOP $tree 2>/dev/null || true
    # shellcheck disable=SC2086
    kill -TERM $tree 2>/dev/null || true
    # shellcheck disable=SC2086
    kill -CONT $tree 2>/dev/null || true
  fi
  # A server still starting would start after its stop below: its start ends first.
  for pid in $RGW_START $SSHD_START; do wait "$pid" 2>/dev/null || true; done
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
  # (Explicit: a stage runs this where set -e does not apply.)
  cmake -S . -B "$dir" -G Ninja -DOBJFS_WERROR=ON "${args[@]}" >/dev/null || return
  ninja -C "$dir" -j "$JOBS" "$@"
}

# The servers start while objfs builds: RGW spends its start-up waiting on its monitor and OSD.
tests/fixtures/rgw.sh start "$RUN_DIR/rgw" > "$RUN_DIR/rgw-start.log" 2>&1 &
RGW_START=$!
tests/fixtures/sshd.sh start "$RUN_DIR/sshd" > "$RUN_DIR/sshd-start.log" 2>&1 &
SSHD_START=$!
build build "${OPTIMISED[@]}" -DOBJFS_TEST_OPTIMIZE=-Og "${PACKAGED[@]}"
started() {  # started PID NAME: waits for a server's start, prints its output
  if ! wait "$1"; then
    cat "$RUN_DIR/$2-start.log" >&2
    echo "the test $2 did not start" >&2
    exit 1
  fi
  cat "$RUN_DIR/$2-start.log"
}
started "$RGW_START" rgw
started "$SSHD_START" sshd
set -a
# shellcheck disable=SC1091
. "$RUN_DIR/rgw/env"
# shellcheck disable=SC1091
. "$RUN_DIR/sshd/env"
set +a

# The background chain. Each stage's exit status is written to a FIFO that this shell holds
# open for reading and writing, so a stage never blocks on it; `await` reads them in order.
mkfifo "$RUN_DIR/stages"
exec 8<>"$RUN_DIR/stages"
stage() {  # stage NAME COMMAND...: runs COMMAND into NAME.log, then reports NAME and its status
  local name=$1 rc=0 t0=$SECONDS; shift
  "$@" > "$RUN_DIR/$name.log" 2>&1 || rc=$?
  echo "$name $rc $((SECONDS - t0))" >&8
}
await() {  # await NAME: waits for the stage, prints its output; fails if it failed
  local name rc took
  # The chain reports every stage it runs; if it died instead, say so rather than wait forever.
  until read -r -t 60 name rc took <&8; do
    if ! kill -0 "$CHAIN" 2>/dev/null && ! read -r -t 1 name rc took <&8; then
      echo "the background builds stopped before $1 reported" >&2
      exit 1
    fi
    [ -z "${name:-}" ] || break
  done
  if [ "$name" != "$1" ]; then echo "stage $name reported while waiting for $1" >&2; exit 1; fi
  echo "== $1 (background, ${took} s) =="
  if [ "$rc" -ne 0 ]; then
    cat "$RUN_DIR/$1.log"
    echo "$1 failed (exit $rc)" >&2
    return 1
  fi
  # A build's warnings and its last step, not every step.
  grep -v '^\[[0-9]*/[0-9]*\] ' "$RUN_DIR/$1.log" || true
  tail -n 1 "$RUN_DIR/$1.log" | grep '^\[[0-9]*/[0-9]*\] ' || true
}
ASAN=1 TSAN=1 PACKAGE=1
[ "${OBJFS_TEST_SKIP_ASAN:-0}" != 1 ] || ASAN=0
[ "${OBJFS_TEST_SKIP_TSAN:-0}" != 1 ] || TSAN=0
[ "${OBJFS_TEST_SKIP_PACKAGE:-0}" != 1 ] || PACKAGE=0
(
  renice -n 19 "$BASHPID" >/dev/null || true
  if [ "$ASAN" = 1 ]; then
    stage asan-build build build-asan "${CLANG[@]}" -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DOBJFS_TEST_PCH=ON -DOBJFS_SANITIZE=ON \
      -DOBJFS_BUILD_BENCHMARKS=OFF
  fi
  # The tests labelled tsan run under ThreadSanitizer. tests/CMakeLists.txt says which: the unit
  # tests whose code runs on several threads, and the FUSE mount tests that drive the daemon's
  # threads hardest, the mounted objfs included (OBJFS_BINARY is this build's). Every test runs
  # in the two builds before.
  if [ "$TSAN" = 1 ]; then
    stage tsan-build build build-tsan "${OPTIMISED[@]}" -DOBJFS_TEST_OPTIMIZE=-O0 "${CLANG[@]}" \
      -DOBJFS_TSAN=ON -DOBJFS_BUILD_BENCHMARKS=OFF -- tsan_tests
  fi
  # The optimised build, packaged: CPack, hardening-check and lintian.
  if [ "$PACKAGE" = 1 ]; then
    stage package tools/package.sh --from build "$RUN_DIR/package"
  fi
  stage tidy tools/lint.sh --tidy build
) &
CHAIN=$!

# Four tests at a time: the integration tests spend most of their time waiting (on the servers,
# and on the budgets and deadlines they test), and one at a time left the two cores half idle:
# the optimised build's tests took 8 to 10 minutes in a row, 2.5 side by side. The long ones are
# split into shards (tests/CMakeLists.txt, OBJFS_SHARDED_TESTS) that ctest starts first.
TEST_JOBS=4
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
rc=0
echo "== optimised build =="
ctest --test-dir build -j "$TEST_JOBS" --output-on-failure --timeout 900 || rc=1
if [ "$ASAN" = 1 ]; then
  if await asan-build; then
    echo "== clang AddressSanitizer + UndefinedBehaviorSanitizer build =="
    ctest --test-dir build-asan -j "$TEST_JOBS" --output-on-failure --timeout 900 || rc=1
  else
    rc=1
  fi
fi
if [ "$TSAN" = 1 ]; then
  if await tsan-build; then
    echo "== clang -Wthread-safety + ThreadSanitizer build =="
    # Reports go to files as well as failing the process that made them: a mounted objfs that
    # halts is seen by its test, and a report of any process is printed and fails the run.
    mkdir -p "$RUN_DIR/tsan"
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tools/tsan.supp:log_path=$RUN_DIR/tsan/report"
    ctest --test-dir build-tsan -j "$TEST_JOBS" --output-on-failure --timeout 900 -L tsan || rc=1
    unset TSAN_OPTIONS
    if compgen -G "$RUN_DIR/tsan/report.*" >/dev/null; then
      echo "ThreadSanitizer reports:" >&2
      cat "$RUN_DIR"/tsan/report.* >&2
      rc=1
    fi
  else
    rc=1
  fi
fi
if [ "$PACKAGE" = 1 ]; then
  if await package; then
    echo "== the Debian package: install, man, an fstab mount, purge =="
    tests/packaging/package_test.sh "$RUN_DIR/package" || rc=1
  else
    rc=1
  fi
fi
await tidy || rc=1
wait "$CHAIN" || true
CHAIN=
STATUS=$rc
exit "$rc"
