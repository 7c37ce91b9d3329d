#!/usr/bin/env bash
# The test command's sanitizer tier (issue 8): builds Ember with AddressSanitizer and
# UndefinedBehaviorSanitizer into build-sanitize/ (GCC, the compiler the tests' fixtures and
# expectations are made for) and runs the `unit` tests there, and a subset of the `bpf` tests
# against the sanitized agent: any report fails them. Then builds the libFuzzer targets of fuzz/
# with clang and both sanitizers into build-fuzz/ and runs each for a bounded time from its seed
# corpus. A finding fails the run; the input that triggered it is left in build-fuzz/findings/.
#
#   scripts/sanitize-and-fuzz.sh [SECONDS_PER_FUZZ_TARGET]   (default 20; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "sanitize-and-fuzz: '$seconds' is not a number of seconds" >&2; exit 2; }

CC=gcc CXX=g++ cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEMBER_SANITIZE=ON >/dev/null
cmake --build build-sanitize -j"$(nproc)"
# The first report fails the test; leaks count too, but for those inside OpenSSL's TLS handshakes
# (scripts/lsan-suppressions.txt).
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt:print_suppressions=0"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
(cd build-sanitize && ../scripts/strict-ctest.sh -L unit --output-on-failure --timeout 300 -j2)
# The `bpf` tests where practical: those that drive the sanitized agent through its main paths
# (sampling and DWARF unwinding of real processes, OTLP export to a collector that fails, the
# process limit, files replaced under running processes, odd /proc entries, CPython frames walked
# in BPF under Debian's python3.11, JIT frames named from node's perf map and jitdump, vDSO frames
# named from the kernel's image, a stripped Go program named and unwound from Go's own symbol
# table, a runc container's metadata, a debug file fetched from a loopback debuginfod through
# libdebuginfod and curl), and the hostile workloads, whose refused reads and inputs are what the
# sanitizers are there to watch. Each requires the agent's exit status 0, so a report fails it.
# The other Python versions and Java go through the same paths and would only make the run longer.
sanitized_bpf_tests='Phases|CfiUnwind|GoProfileTest.GoNewStripped|OtlpExport|ProcessLimit|HostileHostTest.Files|HostileHostTest.Odd|PythonProfileTest.DebianPython311|NodeJitTest|NodeJitdumpTest|VdsoProfileTest|ContainerProfileTest|HostileMemoryTest|HostileNames|HostileFilesTest|HostileBudgetTest|DebuginfodTest'
(cd build-sanitize && ../scripts/as-root.sh env ASAN_OPTIONS="$ASAN_OPTIONS" \
   LSAN_OPTIONS="$LSAN_OPTIONS" UBSAN_OPTIONS="$UBSAN_OPTIONS" \
   ../scripts/strict-ctest.sh -L bpf -R "$sanitized_bpf_tests" --output-on-failure --timeout 300)

((seconds > 0)) || exit 0
build=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEMBER_SANITIZE=ON -DEMBER_FUZZ=ON >/dev/null
cmake --build "$build" --target fuzz_targets ember_go_fixtures -j"$(nproc)"
# Go's symbol tables of the Go fixtures (hundreds of KiB each, so not kept in fuzz/corpus).
mkdir -p "$build/seeds/go_pclntab_fuzz"
for go_binary in "$build"/tests/fixtures/go/gosym_*; do
  seed="$build/seeds/go_pclntab_fuzz/$(basename "$go_binary")"
  # Position-independent builds name the section .data.rel.ro.gopclntab.
  objcopy -O binary --only-section=.gopclntab --only-section=.data.rel.ro.gopclntab \
    "$go_binary" "$seed"
  [[ -s $seed ]] || { echo "sanitize-and-fuzz: no Go symbol table in $go_binary" >&2; exit 1; }
done
# A stripped Go binary for the ELF target, whose symbolizer and unwinder then read Go's table.
mkdir -p "$build/seeds/elf_fuzz"
cp "$build/tests/fixtures/go/gosym_go119_stripped" "$build/seeds/elf_fuzz/"
# Seeds: the target's own corpus, plus the test data of the same format. New inputs go to a
# scratch corpus in the build tree, so the repository's seeds stay as they are.
declare -A extra_seeds=(
  [kubernetes_json_fuzz]=tests/data/k8s
  [go_pclntab_fuzz]="$build/seeds/go_pclntab_fuzz"
  [elf_fuzz]="$build/seeds/elf_fuzz"
)
mkdir -p "$build/findings"
failed=()
for source in fuzz/*_fuzz.cc; do
  target=$(basename "$source" .cc)
  scratch="$build/corpus/$target"
  mkdir -p "$scratch"
  seeds=("fuzz/corpus/$target")
  [[ -n ${extra_seeds[$target]:-} ]] && seeds+=("${extra_seeds[$target]}")
  log="$build/findings/$target.log"
  if "$build/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$build/findings/$target-" -print_final_stats=1 \
       "$scratch" "${seeds[@]}" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz: $target: $runs runs in ${seconds}s, no finding"
  else
    echo "fuzz: $target: FINDING (log and input in $build/findings/):" >&2
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 >&2 || tail -5 "$log" >&2
    failed+=("$target")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
