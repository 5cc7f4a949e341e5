#!/bin/sh
# BROKEN consumer: reads the body and deletes the file before processing it (a crash loses it).
set -u
root=$1 queue=$2 cid=$3
box="$root/$queue/incoming"
while :; do
  claimed=0
  for name in $(ls "$box/target" | sort -t. -k1,1nr -k2,2n); do
    f="$box/target/$name"; [ -f "$f" ] && [ ! -L "$f" ] || continue
    cat "$f" > /dev/null 2>&1 && rm -f "$f" || continue
    printf '%s\n' "$name"; claimed=1
  done
  [ "$claimed" = 1 ] || break
done
