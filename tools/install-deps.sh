#!/usr/bin/env bash
# Installs everything objfs needs to build, test and benchmark, from Debian 12's packages.
# Idempotent: a second run installs nothing new. Must run as root.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: must run as root (apt-get install)" >&2
  exit 1
fi

build_pkgs=(
  build-essential cmake ninja-build pkg-config git
  libfuse3-dev fuse3
  libssh-dev libssl-dev libcurl4-openssl-dev
  libboost-filesystem-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpugixml-dev
  clang-format clang-tidy clang-14 libclang-rt-14-dev
)
test_pkgs=(
  openssh-server openssh-client
  radosgw ceph-mon ceph-osd ceph-common
  attr rsync curl procps psmisc bc
  xfsprogs  # an XFS file system on a loop device: where the SFTP server's cp clones files
  media-types
)
# tools/package.sh and its test (tests/packaging/): what CPack runs (file), checks of the
# package (lintian; hardening-check is in devscripts), and what its installation is tried with.
package_pkgs=(
  file lintian devscripts man-db bash-completion
)

missing=()
for p in "${build_pkgs[@]}" "${test_pkgs[@]}" "${package_pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all packages already installed"
  exit 0
fi

echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps.sh: done"
