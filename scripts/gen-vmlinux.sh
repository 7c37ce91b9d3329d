#!/usr/bin/env bash
# Regenerates third_party/vmlinux/x86/vmlinux.h from this machine's kernel BTF.
set -euo pipefail
cd "$(dirname "$0")/.."
bpftool btf dump file /sys/kernel/btf/vmlinux format c > third_party/vmlinux/x86/vmlinux.h
