#!/bin/sh
# A DropboxMQ producer in POSIX shell: write each body into working/, then mv (rename) it
# into target/.  Usage: produce.sh ROOT QUEUE BODY_DIR [PRIORITY]
set -eu
root=$1 queue=$2 body_dir=$3 prio=${4:-4}
box="$root/$queue/incoming"
. "$(dirname "$0")/name12.sh"
for d in working target processing processed expired error; do mkdir -p "$box/$d"; done
seq=0
for body in "$body_dir"/*; do
  [ -f "$body" ] || continue
  name=$(new_name "$prio" "$seq")
  seq=$((seq + 1))
  cat "$body" > "$box/working/$name"     # written and closed in working/ ...
  mv "$box/working/$name" "$box/target/$name"   # ... then committed by one rename
done
