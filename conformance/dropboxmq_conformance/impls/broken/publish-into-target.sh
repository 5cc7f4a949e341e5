#!/bin/sh
# BROKEN publisher: writes each copy straight into the subscription's target/ (a subscriber
# may read it half-written), instead of working/ then a rename.
set -eu
root=$1 topic=$2 body_dir=$3 prio=${4:-4}
. "$(dirname "$0")/../shell/subscriptions.sh"
dirs=$(subscriptions "$root" "$topic")
seq=0
for body in "$body_dir"/*; do
  name=$(printf '%s.%s%03d-%010d.B' "$prio" "$(date +%s%3N)" $((seq % 1000)) $((seq * 7919))); seq=$((seq + 1))
  for s in $dirs; do cat "$body" > "$s/target/$name"; done   # BROKEN: no working/, no rename
done
