#!/bin/sh
# BROKEN publisher: fans out to every subscription of the topic and its ancestors but the
# first one it lists (an off-by-one in its loop): that subscription loses every message.
set -eu
root=$1 topic=$2 body_dir=$3 prio=${4:-4}
. "$(dirname "$0")/../shell/subscriptions.sh"
dirs=$(subscriptions "$root" "$topic")
set -- $dirs; shift   # BROKEN: skips the first subscription
seq=0
for body in "$body_dir"/*; do
  name=$(printf '%s.%s%03d-%010d.B' "$prio" "$(date +%s%3N)" $((seq % 1000)) $((seq * 7919))); seq=$((seq + 1))
  for s in "$@"; do cat "$body" > "$s/working/$name"; mv "$s/working/$name" "$s/target/$name"; done
done
