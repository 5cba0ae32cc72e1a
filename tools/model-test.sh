#!/usr/bin/env bash
# The long mode of the Filesystem model test (tests/unit/filesystem_model_test.cc): thousands of
# seeded operation sequences over the S3-like and the SFTP-like fake store, instead of the unit
# tier's few hundred. A failure prints its seed and a shrunk list of operations; rerun one seed
# with OBJFS_MODEL_SEED=N OBJFS_MODEL_RUNS=1. It also prints the ops applied and how often the
# write path streamed parts, gave a stream up, copied parts of an edit and fetched sparsely.
#
# usage: tools/model-test.sh [RUNS [FIRST_SEED [OPS]]]   (defaults: 5000, 1, 100)
# env:   BUILD=build-asan to run the sanitizer build's binary; OBJFS_MODEL_SKIP=crash,external,...
#        leaves op kinds out (see the test's header)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
BIN="$ROOT/$BUILD/tests/filesystem_model_test"
RUNS=${1:-5000}
FIRST=${2:-1}
OPS=${3:-100}
for v in "$RUNS" "$FIRST" "$OPS"; do
  case "$v" in
    '' | *[!0-9]*)
      echo "model-test: RUNS, FIRST_SEED and OPS are whole numbers (got '$v')" >&2
      exit 2
      ;;
  esac
done
if [ ! -x "$BIN" ]; then
  echo "model-test: $BIN is not built; run: ninja -C $BUILD filesystem_model_test" >&2
  exit 2
fi
echo "model-test: $RUNS sequences of up to $OPS operations per store personality, seeds $FIRST.."
OBJFS_MODEL_RUNS=$RUNS OBJFS_MODEL_SEED=$FIRST OBJFS_MODEL_OPS=$OPS OBJFS_MODEL_STATS=1 \
  exec "$BIN"
