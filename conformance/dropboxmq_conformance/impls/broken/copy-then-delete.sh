#!/bin/sh
# BROKEN consumer: "claims" by copying into processing/ and deleting the original.
set -u
root=$1 queue=$2 cid=$3
box="$root/$queue/incoming"
while :; do
  claimed=0
  for name in $(ls "$box/target" | sort -t. -k1,1nr -k2,2n); do
    f="$box/target/$name"; [ -f "$f" ] && [ ! -L "$f" ] || continue
    cp "$f" "$box/processing/$cid~$name" 2>/dev/null && rm -f "$f" || continue
    printf '%s\n' "$name"
    mv "$box/processing/$cid~$name" "$box/processed/$cid~$name"; claimed=1
  done
  [ "$claimed" = 1 ] || break
done
