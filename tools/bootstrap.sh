#!/usr/bin/env bash
# Installs every Debian package hetsim needs to build, test, simulate, plan, run the executor and plot.
# Idempotent: when everything is already installed it prints nothing and exits 0.
# Usage: tools/bootstrap.sh            (needs root or sudo for apt-get)
set -euo pipefail

packages=(
  # build
  cmake ninja-build g++ pkg-config git
  # formats
  libyaml-cpp-dev libyaml-dev libprotobuf-dev protobuf-compiler
  # numerics, graph partitioning, MILP
  libeigen3-dev libboost-dev libboost-program-options-dev libmetis-dev
  coinor-libcbc-dev coinor-libclp-dev coinor-libcgl-dev coinor-libosi-dev coinor-libcoinutils-dev
  libglpk-dev
  # simulation
  libsimgrid-dev libjemalloc2 libjemalloc-dev
  # tests
  libgtest-dev libgmock-dev procps
  # executor (MPI; CUDA and NCCL come from the machine's CUDA install)
  libopenmpi-dev openmpi-bin
  # figures; the fits under tools/fit and their tests
  python3-matplotlib python3-numpy python3-scipy
  # the Python package (tools/python, docs/python.md) and its tests
  pybind11-dev python3-dev python3-pandas python3-pytest
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "bootstrap: installing ${#missing[@]} Debian packages: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "bootstrap: done"
