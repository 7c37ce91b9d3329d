# The image the Helm chart (deploy/helm/ember) runs: ember-agent on Debian 12.
#   docker build -t REGISTRY/ember-agent:0.1.0 .
# Build stage: the build dependencies of scripts/setup.sh (its "build", "BPF" and "libraries"
# groups, plus the test libraries and tools CMake looks for at configure time); only the agent is
# built.
FROM debian:12 AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      clang llvm bpftool libbpf-dev linux-libc-dev \
      libelf-dev libdw-dev zlib1g-dev libdeflate-dev libabsl-dev libspdlog-dev \
      libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc \
      libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libmicrohttpd-dev libcap-dev \
      libseccomp-dev libcapstone-dev libgtest-dev libgmock-dev libbenchmark-dev openssl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The BPF object is compiled against the committed third_party/vmlinux header (CO-RE), so the
# build needs no BTF of the build machine's kernel.
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build build --target ember-agent -j"$(nproc)" \
 && strip --strip-debug build/ember-agent

# Runtime stage: only the shared libraries the agent links (ldd build/ember-agent, mapped to
# Debian 12 packages; apt brings their own dependencies) and CA roots for OTLP over TLS.
FROM debian:12-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates \
      libbpf1 libelf1 libdw1 zlib1g libdeflate0 \
      libabsl20220623 libspdlog1.10 libfmt9 \
      libprotobuf32 libgrpc++1.51 libgrpc29 \
      libcurl4 libssl3 libmicrohttpd12 libcap2 libseccomp2 libcapstone4 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/ember-agent /usr/local/bin/ember-agent
# Writable scratch: the chart mounts an emptyDir here under a read-only root file system.
WORKDIR /var/lib/ember
# Root, with the capabilities the runtime grants (the chart: BPF, PERFMON, SYS_PTRACE,
# SYS_RESOURCE, DAC_READ_SEARCH, SYSLOG, SETPCAP); see docs/capabilities.md.
USER 0
ENTRYPOINT ["/usr/local/bin/ember-agent"]
