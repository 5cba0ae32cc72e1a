#!/usr/bin/env bash
# Builds objfs's Debian package as a distribution would: a Release build with Debian's
# compiler and linker flags (dpkg-buildflags, hardening=+all: stack protector, fortify, PIE,
# RELRO, BIND_NOW), packaged by CPack (packaging/CMakeLists.txt: dependencies from
# dpkg-shlibdeps, a stripped binary and its debug symbols in objfs-dbgsym), then checked with
# hardening-check and lintian, which must report no error and no warning.
#
# usage: tools/package.sh [OUTDIR]     writes OUTDIR/objfs_VERSION_ARCH.deb and the -dbgsym .ddeb
#                                      (default OUTDIR: dist/)
#        tools/package.sh --from DIR [OUTDIR]
#                                      packages the build in DIR instead of building one. DIR must
#                                      have been configured with Debian's flags and /usr as its
#                                      prefix (tools/test.sh's optimised build is), or this stops.
# env:   OBJFS_PACKAGE_BUILD_DIR=DIR   the build directory (default: build-deb/)
#        OBJFS_WERROR=ON               warnings as errors (tools/test.sh sets it)
#        JOBS=N                        parallel compiles (default: the number of CPUs)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
FROM=
if [ "${1:-}" = --from ]; then
  [ $# -ge 2 ] || { echo "package.sh: --from needs a build directory" >&2; exit 2; }
  FROM=$2
  shift 2
fi
OUT=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
BUILD=${FROM:-${OBJFS_PACKAGE_BUILD_DIR:-build-deb}}
for tool in dpkg-buildflags dpkg-shlibdeps cpack lintian hardening-check; do
  if ! command -v "$tool" >/dev/null; then
    echo "package.sh: $tool is missing (tools/install-deps.sh installs it)" >&2
    exit 1
  fi
done

export DEB_BUILD_MAINT_OPTIONS=hardening=+all
flags() { dpkg-buildflags --get "$1"; }
if [ -n "$FROM" ]; then
  cache() {  # cache VAR: VAR's value in the build's CMakeCache.txt
    sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt" 2>/dev/null
  }
  [ -f "$BUILD/CMakeCache.txt" ] || { echo "package.sh: $BUILD is not a build directory" >&2; exit 1; }
  [ "$(cache CMAKE_INSTALL_PREFIX)" = /usr ] ||
    { echo "package.sh: $BUILD's install prefix is not /usr" >&2; exit 1; }
  if [ "$(cache CMAKE_CXX_FLAGS)" != "$(flags CXXFLAGS) $(flags CPPFLAGS)" ] ||
    [ "$(cache CMAKE_EXE_LINKER_FLAGS)" != "$(flags LDFLAGS)" ]; then
    echo "package.sh: $BUILD was not configured with Debian's flags (dpkg-buildflags)" >&2
    exit 1
  fi
  ninja -C "$BUILD" objfs
else
  launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
    "-DCMAKE_C_FLAGS=$(flags CFLAGS) $(flags CPPFLAGS)" \
    "-DCMAKE_CXX_FLAGS=$(flags CXXFLAGS) $(flags CPPFLAGS)" \
    "-DCMAKE_EXE_LINKER_FLAGS=$(flags LDFLAGS)" \
    -DOBJFS_BUILD_TESTS=OFF -DOBJFS_BUILD_BENCHMARKS=OFF "-DOBJFS_WERROR=${OBJFS_WERROR:-OFF}" \
    "${launcher[@]}" >/dev/null
  ninja -C "$BUILD" -j "${JOBS:-$(nproc)}"
fi

rm -f "$OUT"/objfs_*.deb "$OUT"/objfs-dbgsym_*.ddeb
(cd "$BUILD" && cpack -G DEB -B "$OUT" >/dev/null)
rm -rf "$OUT/_CPack_Packages"
deb=$(echo "$OUT"/objfs_*.deb)
[ -f "$deb" ] || { echo "package.sh: cpack made no package in $OUT" >&2; exit 1; }

# Debian 12's dpkg-buildflags does not turn on -fcf-protection (dpkg 1.22 does), so its own
# packages lack it: checked are the stack protector, fortify, PIE, RELRO and BIND_NOW (and
# stack clash protection, which it reports as unknown without failing).
hardening-check --nocfprotection "$BUILD/objfs"
# (lintian warns that it runs as root; what it checks is the same.)
lintian --fail-on error,warning --info "$deb" 2> >(grep -v 'running with root privileges' >&2)
echo "package.sh: $deb"
