#!/usr/bin/env bash
# ctest as CI runs it, from a build directory: its arguments go to ctest, and the run fails when
# a selected test did not run (a GTEST_SKIP, a disabled test) or when the selection holds no test.
# A skipped test passes in plain ctest; in CI every test must run, so a missing tool or privilege
# shows as a failure. (A --gtest_filter that matches nothing fails the test itself: tests/CMakeLists.txt.)
#
#   scripts/strict-ctest.sh [CTEST_ARGS...]
set -euo pipefail
junit=$(mktemp --suffix=.xml)
trap 'rm -f "$junit"' EXIT
status=0
ctest --no-tests=error --output-junit "$junit" "$@" || status=$?
# ctest's JUnit report marks a test that did not run (skipped, disabled) with status="notrun".
mapfile -t not_run < <(grep -o '<testcase name="[^"]*"[^>]*status="notrun"' "$junit" |
                         sed 's/^<testcase name="\([^"]*\)".*/\1/')
if ((${#not_run[@]})); then
  echo "strict-ctest: ${#not_run[@]} test(s) did not run, which fails the run: ${not_run[*]}" >&2
  ((status != 0)) || status=1
fi
exit "$status"
