# shellcheck shell=bash
# Shared by every benchmark (tools/bench-*.sh), whichever server it starts.
#
# usage: . tools/bench-common.sh
# defines: now, rotated

now() { date +%s.%N; }

# rotated ROUND ITEM...: the items, starting with the one at ROUND modulo their number. Each
# round of a benchmark starts with another tool: on a virtual machine whose host backs guest
# memory only as it is touched, the first tool of a round to stage a new file pays for fresh
# pages, and the next one reuses the pages it freed (objfs's cp into sftp://: 233 MiB/s first,
# 324 second).
rotated() {
  local round=$1
  shift
  local k=$((round % $#))
  echo "${@:k+1}" "${@:1:k}"
}
