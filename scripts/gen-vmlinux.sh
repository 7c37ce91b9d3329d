#!/usr/bin/env bash
# Regenerates third_party/vmlinux/x86/vmlinux.h from this machine's kernel BTF.
set -euo pipefail
cd "$(dirname "$0")/.."
bpftool=${BPFTOOL:-/usr/sbin/bpftool}
out=third_party/vmlinux/x86/vmlinux.h
# Through a temporary file, so a failure leaves the committed header as it was.
"$bpftool" btf dump file /sys/kernel/btf/vmlinux format c > "$out.tmp"
mv "$out.tmp" "$out"
