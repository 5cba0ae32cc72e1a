#!/usr/bin/env bash
# Checks formatting (clang-format, .clang-format) and, with --tidy, runs clang-tidy
# (.clang-tidy) over objfs's source files using the build's compile_commands.json (configuring
# the build writes it). The tests' sources are left out: they are half the files and more than
# half of the time (gtest's macros), and CI runs this on two cores. For the same reason the clang
# static analyzer (clang-analyzer-*, four fifths of clang-tidy's time) runs in its shallow mode,
# which follows calls less deep: fs/file_writer.cc takes 18 s of CPU instead of 54.
# OBJFS_TIDY_DEEP=1 runs its deep mode, which is worth a run after a large change.
#
# usage: tools/lint.sh [--tidy] [BUILD_DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TIDY=0
if [ "${1:-}" = --tidy ]; then TIDY=1; shift; fi
BUILD=${1:-build}

mapfile -t files < <(git ls-files '*.cc' '*.h')
if ! clang-format --dry-run -Werror "${files[@]}" 2>/tmp/objfs-format.log; then
  grep -m 20 'error:' /tmp/objfs-format.log >&2 || true
  echo "lint: files are not clang-format clean; run: clang-format -i \$(git ls-files '*.cc' '*.h')" >&2
  exit 1
fi
echo "lint: clang-format clean (${#files[@]} files)"

if [ "$TIDY" = 1 ]; then
  mapfile -t sources < <(git ls-files '*.cc' ':!:tests/')
  analyzer=()
  if [ "${OBJFS_TIDY_DEEP:-0}" != 1 ]; then
    analyzer=(--extra-arg=-Xclang --extra-arg=-analyzer-config --extra-arg=-Xclang
      --extra-arg=mode=shallow)
  fi
  printf '%s\n' "${sources[@]}" |
    xargs -P "$(nproc)" -n 4 clang-tidy -p "$BUILD" --quiet "${analyzer[@]}" 2>/dev/null
  echo "lint: clang-tidy clean (${#sources[@]} files)"
fi
