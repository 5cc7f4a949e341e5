#!/bin/sh
# A DropboxMQ publisher in POSIX shell, 1.2's way: one copy of each body per subscription of
# TOPIC and of every ancestor topic, each written in that subscription's working/ and renamed
# (mv) into its target/.  Usage: publish.sh ROOT TOPIC BODY_DIR [PRIORITY]
set -eu
root=$1 topic=$2 body_dir=$3 prio=${4:-4}
. "$(dirname "$0")/subscriptions.sh"
seq=0
for body in "$body_dir"/*; do
  [ -f "$body" ] || continue
  rnd=$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')
  name=$(printf '%s.%s%03d-%010d.B' "$prio" "$(date +%s%3N)" $((seq % 1000)) "$rnd")
  seq=$((seq + 1))
  subscriptions "$root" "$topic" | while IFS= read -r s; do
    cat "$body" > "$s/working/$name"      # one copy, written and closed in working/ ...
    mv "$s/working/$name" "$s/target/$name"   # ... committed by a rename
  done
done
