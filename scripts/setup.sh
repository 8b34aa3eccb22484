#!/usr/bin/env bash
# Installs what cuslice needs on a fresh Debian 12 machine (CUDA toolkit expected in
# /usr/local/cuda) and builds everything into ./build. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config patchelf
  libyaml-cpp-dev libgtest-dev libgmock-dev libcli11-dev libspdlog-dev libfmt-dev
  libsystemd-dev nlohmann-json3-dev libmicrohttpd-dev prometheus-cpp-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libcurl4-openssl-dev
  python3 python3-pytest python3-yaml python3-jsonschema python3-kubernetes
  # CI only (.ci/run): libFuzzer for tests/fuzz; ss for the attack tests; a Debian 11 root and
  # the cmake it builds with for the hook's tests on an older glibc (tests/hook/old_glibc.sh)
  clang libclang-rt-dev iproute2 debootstrap python3-pip
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build build -j "$(nproc)"
