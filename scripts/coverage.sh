#!/usr/bin/env bash
# Line, function and branch coverage of src/ by the `unit` tests, per src/* folder. Builds the unit
# test binaries with GCC, --coverage and -O0 into build-coverage/, runs `ctest -L unit` there, and
# prints one row per folder (sorted by line coverage, lowest last) and the total. The per-file HTML
# report is left in build-coverage/coverage/index.html. Not part of CI (.ci/run): a measurement.
#
#   scripts/coverage.sh            (JOBS=N sets the build's parallelism; default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-coverage
jobs=${JOBS:-2}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "coverage: JOBS='$jobs' is not a positive number" >&2; exit 2; }

for tool in gcc g++ gcov cmake ninja ctest python3 gcovr; do
  if ! command -v "$tool" >/dev/null; then
    echo "coverage: '$tool' not found; scripts/setup.sh installs it (gcovr: apt-get install gcovr)" >&2
    exit 2
  fi
done

# Debug adds -g and no optimisation flag of its own, so -O0 stands and every line keeps its count.
CC=gcc CXX=g++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS="--coverage -O0" -DCMAKE_CXX_FLAGS="--coverage -O0" \
  -DCMAKE_EXE_LINKER_FLAGS=--coverage -DCMAKE_SHARED_LINKER_FLAGS=--coverage >/dev/null

# Only what `ctest -L unit` runs: every ember_unit_test binary, and the agent, which the deploy
# tests (also `unit`) check the systemd unit against.
mapfile -t targets < <(grep -rhoP '^\s*ember_unit_test\(\K[A-Za-z0-9_]+' tests/unit | sort -u)
((${#targets[@]})) || { echo "coverage: no ember_unit_test targets found under tests/unit" >&2; exit 1; }
# Counts of an earlier build no longer match a rebuilt object (libgcov would say so at each test
# discovery), and those of the build's own test discovery (gtest_discover_tests runs each binary)
# are not the tests': both are dropped.
find "$build" -name '*.gcda' -delete
cmake --build "$build" -j"$jobs" --target "${targets[@]}" ember-agent
find "$build" -name '*.gcda' -delete
tests_status=0
(cd "$build" && timeout 3600 ../scripts/strict-ctest.sh -L unit --timeout 300 -j"$jobs" \
   --output-on-failure) || tests_status=$?

report="$build/coverage"
rm -rf "$report"
mkdir -p "$report"
# One gcov at a time: gcovr 5.2's workers hang when one of them fails. gcov at -O0 may give a
# branch of an inline function merged from several objects a count of -1, which gcovr 5.2 cannot
# parse: such lines are skipped (with a warning on stderr), not the whole report.
timeout 900 gcovr --root . --object-directory "$build" --exclude-directories "$build/CMakeFiles" \
  --filter 'src/' -j1 --gcov-ignore-parse-errors \
  --exclude-unreachable-branches --exclude-throw-branches \
  --json-summary "$report/summary.json" --html-details "$report/index.html" >/dev/null

python3 - "$report/summary.json" <<'EOF'
import collections, json, sys

totals = collections.defaultdict(lambda: [0] * 6)
for f in json.load(open(sys.argv[1]))["files"]:
    parts = f["filename"].split("/")
    folder = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
    row = totals[folder]
    for i, key in enumerate(("line_covered", "line_total", "function_covered", "function_total",
                             "branch_covered", "branch_total")):
        row[i] += f[key]

def pct(covered, total):
    return f"{100.0 * covered / total:5.1f}%" if total else "    -"

def line(name, r):
    return (f"{name:<18} {pct(r[0], r[1])} {r[0]:>6}/{r[1]:<6} {pct(r[2], r[3])} {r[2]:>5}/{r[3]:<5}"
            f" {pct(r[4], r[5])} {r[4]:>6}/{r[5]:<6}")

print(f"{'folder':<18} {'lines':>20} {'functions':>18} {'branches':>20}")
for name, r in sorted(totals.items(), key=lambda kv: -(kv[1][0] / kv[1][1] if kv[1][1] else 0)):
    print(line(name, r))
print(line("total", [sum(r[i] for r in totals.values()) for i in range(6)]))
EOF
echo "coverage: per-file report in $report/index.html"
if ((tests_status)); then
  echo "coverage: some unit tests failed (ctest exit $tests_status); the figures count what ran" >&2
  exit 1
fi
