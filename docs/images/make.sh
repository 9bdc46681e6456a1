#!/bin/sh
# Regenerate the ladder diagrams of docs/ladder.md from the committed rxe
# captures, and their PNG screenshots with headless Chromium
# (Debian: apt-get install chromium). Run from the repository root after
# `cargo build -p roce-cli`.
set -eu
ROCE=${ROCE:-target/debug/roce}
D=packet/tests/data
OUT=docs/images

"$ROCE" decode $D/rnr.pcap --svg $OUT/ladder-rnr.svg --from 31
"$ROCE" decode $D/read_lat.pcap --svg $OUT/ladder-read.svg --max 12
"$ROCE" decode $D/retry_exceeded.pcap --svg $OUT/ladder-timeout.svg
"$ROCE" decode $D/rc_pingpong_small.pcap --svg $OUT/ladder-pingpong.svg --max 12
# the course's chapter 7: our own capture of an injected loss
tmp=$(mktemp -d)
"$ROCE" demo --scenario lost-packet --quiet --pcap "$tmp/lost.pcap"
"$ROCE" decode "$tmp/lost.pcap" --svg $OUT/ladder-lost-packet.svg
rm -rf "$tmp"

for svg in $OUT/ladder-*.svg; do
    # Screenshot at the SVG's own size (its width and height attributes).
    w=$(grep -o 'width="[0-9]*"' "$svg" | head -1 | tr -dc 0-9)
    h=$(grep -o 'height="[0-9]*"' "$svg" | head -1 | tr -dc 0-9)
    profile=$(mktemp -d)
    chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
        --user-data-dir="$profile" --window-size="$w,$h" \
        --screenshot="${svg%.svg}.png" "file://$(realpath "$svg")" 2>/dev/null
    rm -rf "$profile"
done
