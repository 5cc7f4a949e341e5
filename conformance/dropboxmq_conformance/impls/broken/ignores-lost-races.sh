#!/bin/sh
# BROKEN consumer: does not check whether its claim (mv) succeeded, so a lost race is "processed" too.
set -u
root=$1 queue=$2 cid=$3
box="$root/$queue/incoming"
while :; do
  claimed=0
  for name in $(ls "$box/target" | sort -t. -k1,1nr -k2,2n); do
    f="$box/target/$name"
    mv "$f" "$box/processing/$cid~$name" 2>/dev/null
    printf '%s\n' "$name"
    mv "$box/processing/$cid~$name" "$box/processed/$cid~$name" 2>/dev/null; claimed=1
  done
  [ "$claimed" = 1 ] || break
done
