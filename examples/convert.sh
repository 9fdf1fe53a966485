#!/usr/bin/env bash
# Convert one recording into the media cache with ffmpeg, under a reservation.
#
#   examples/convert.sh INPUT OUTPUT.wav
#
# `janitor estimate` sizes the WAV from the input's duration; `janitor exec` reserves it (evicting
# old cache entries if that is what it takes), runs ffmpeg, stops it if the volume falls below its
# floor while it runs, and removes the partial WAV then. Exit 75 means "not enough space: retry
# later"; any other code is ffmpeg's own.
set -euo pipefail
in=$1
out=$2
size=$(janitor estimate "$in")
exec janitor exec media_cache "$size" --path "$out" --job convert --cleanup-on-fail -- \
    ffmpeg -nostdin -hide_banner -loglevel error -y -i "$in" -ac 1 -ar 16000 -c:a pcm_s16le "$out"
