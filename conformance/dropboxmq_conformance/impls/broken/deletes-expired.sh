#!/bin/sh
# BROKEN consumer: "cleans up" expired messages by deleting them from target/ (they belong
# in expired/; only an operator purges), then consumes like the shell consumer.
set -u
root=$1 queue=$2 cid=$3
box="$root/$queue/incoming"
now=$(date +%s%3N)
ls "$box/target" | while IFS= read -r name; do
  exp=$(printf '%s\n' "$name" | awk -F. 'NF>=4 && $4 ~ /^[0-9]+$/ {print $4}')
  if [ -n "$exp" ] && [ "$exp" != 0 ] && [ "$exp" -le "$now" ]; then rm -f "$box/target/$name"; fi
done
exec sh "$(dirname "$0")/../shell/consume.sh" "$root" "$queue" "$cid"
