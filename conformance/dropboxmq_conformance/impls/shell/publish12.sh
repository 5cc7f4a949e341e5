#!/bin/sh
# publish.sh as the real DropboxMQ 1.2 publishes: the same copies, plus a record of each
# publish filed in the topic's .incoming/ (written in working/, renamed straight into
# processed/: PROTOCOL.md T-5, the Record move of S-1).  Usage: publish12.sh ROOT TOPIC BODY_DIR [PRIORITY]
set -eu
root=$1 topic=$2 body_dir=$3 prio=${4:-4}
. "$(dirname "$0")/subscriptions.sh"
incoming="$root/topic-root/$(printf '%s' "$topic" | tr . /)/.incoming"
seq=0
for body in "$body_dir"/*; do
  [ -f "$body" ] || continue
  rnd=$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')
  name=$(printf '%s.%s%03d-%010d.B' "$prio" "$(date +%s%3N)" $((seq % 1000)) "$rnd")
  seq=$((seq + 1))
  subscriptions "$root" "$topic" | while IFS= read -r s; do
    cat "$body" > "$s/working/$name"
    mv "$s/working/$name" "$s/target/$name"
  done
  cat "$body" > "$incoming/working/$name"           # the record copy ...
  mv "$incoming/working/$name" "$incoming/processed/$name"   # ... filed as processed
done
