#!/usr/bin/env bash
# Loads a flame graph page in headless Chromium and checks that its scripts ran cleanly and drew
# the named frames. Usage: check_flamegraph.sh PAGE.html NAME...  (CHROMIUM=path overrides).
# Exits 0 when fine, otherwise non-zero with a one-line reason on stdout.
set -uo pipefail

fail() {
  echo "check_flamegraph: $*"
  exit 1
}

(($# >= 1)) || { echo "usage: $0 PAGE.html NAME..."; exit 2; }
page=$1
shift
[[ -r $page ]] || fail "cannot read $page"

chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[[ -n $chromium && -x $chromium ]] || fail "chromium not found; run scripts/setup.sh"

abs=$(realpath -- "$page")
# Percent-encode what would otherwise change the meaning of a file:// URL.
url="file://$(sed -e 's/%/%25/g' -e 's/ /%20/g' -e 's/#/%23/g' -e 's/?/%3F/g' <<<"$abs")"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# --enable-logging=stderr makes Chromium report uncaught JS exceptions ("Uncaught ...") there.
timeout -k 5 60 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$work/profile" --window-size=1600,1000 --virtual-time-budget=5000 \
  --enable-logging=stderr --dump-dom "$url" >"$work/dom.html" 2>"$work/stderr"
rc=$?
((rc != 124 && rc != 137)) || fail "chromium did not finish within 60 s"
((rc == 0)) || fail "chromium exited with status $rc: $(tail -n 1 "$work/stderr")"
[[ -s $work/dom.html ]] || fail "chromium produced no DOM"

if uncaught=$(grep -m 1 -o 'Uncaught.*' "$work/stderr"); then
  fail "JavaScript error: $uncaught"
fi
grep -q '<div id="errors"' "$work/dom.html" || fail "page has no element with id \"errors\""
if ! grep -q '<div id="errors"[^>]*></div>' "$work/dom.html"; then
  reported=$(grep -o '<div id="errors"[^>]*>[^<]*' "$work/dom.html" | sed 's/^<div[^>]*>//' |
    head -c 300 | tr '\n' ' ')
  fail "page reported errors: $reported"
fi

# Text of every drawn frame (class "f"), one per line, as the DOM serializer escaped it.
grep -o '<div class="f[ "][^>]*>[^<]*</div>' "$work/dom.html" |
  sed -e 's/^<div[^>]*>//' -e 's#</div>$##' >"$work/frames"
[[ -s $work/frames ]] || fail "page drew no frames"
for name in "$@"; do
  escaped=$(sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/\xc2\xa0/\&nbsp;/g' \
    <<<"$name")
  grep -qxF -- "$escaped" "$work/frames" || fail "no drawn frame named \"$name\""
done
echo "check_flamegraph: ok ($(wc -l <"$work/frames") frames drawn)"
