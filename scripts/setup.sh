#!/usr/bin/env bash
# Installs what Ember needs on Debian 12 and builds the tools the tests use. Safe to run again:
# it installs only what is missing and rebuilds nothing that is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # build
  build-essential cmake ninja-build pkg-config
  # BPF: compiler for the bpf target, skeleton generator, loader
  clang llvm bpftool libbpf-dev linux-libc-dev
  # libraries
  libelf-dev libdw-dev zlib1g-dev libabsl-dev libspdlog-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libcurl4-openssl-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # test peers: Google's pprof (built from source below), a headless browser, perf, and openssl
  # for the exporter tests' certificates
  golang-1.19-go golang-github-google-pprof-dev chromium linux-perf procps openssl
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  scripts/as-root.sh apt-get update -qq
  scripts/as-root.sh env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    "${missing[@]}" >/dev/null
fi

# Google's pprof, built offline from Debian's Go sources; the tests read Ember's output with it.
pprof_bin=.cache/tools/pprof
if [[ ! -x $pprof_bin ]]; then
  echo "setup: building Google's pprof into $pprof_bin"
  mkdir -p .cache/tools .cache/go-build
  GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE="$PWD/.cache/go-build" \
    /usr/lib/go-1.19/bin/go build -o "$pprof_bin" github.com/google/pprof
fi
echo "setup: done"
