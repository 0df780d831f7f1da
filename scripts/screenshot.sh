#!/usr/bin/env bash
# Screenshot built book pages in headless Chromium with every host but 127.0.0.1 unreachable,
# to see what a reader sees without network (no CDN can fill in for a missing local file).
#   bash scripts/screenshot.sh OUTDIR [PAGE ...]     PAGE like book/02_attention.html (default: all chapters)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: screenshot.sh OUTDIR [PAGE ...]}; shift || true
mkdir -p "$out"
pages=("$@")
[ ${#pages[@]} -gt 0 ] || pages=($(cd _build/html && ls book/[0-9]*.html))
port=${PORT:-8765}
python3 -m http.server "$port" --bind 127.0.0.1 --directory _build/html >/dev/null 2>&1 &
server=$!
trap 'kill $server' EXIT
sleep 1
for p in "${pages[@]}"; do
  name=$(basename "$p" .html)
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --host-resolver-rules="MAP * ~NOTFOUND, EXCLUDE 127.0.0.1" \
    --user-data-dir="$(mktemp -d)" --window-size=1400,${HEIGHT:-5000} --hide-scrollbars \
    --virtual-time-budget=15000 --screenshot="$out/$name.png" "http://127.0.0.1:$port/$p" 2>/dev/null
  echo "$out/$name.png"
done
