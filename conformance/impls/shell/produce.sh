#!/bin/sh
# A DropboxMQ producer in POSIX shell: write each body into working/, then mv (rename) it
# into target/.  Usage: produce.sh ROOT QUEUE BODY_DIR [PRIORITY]
set -eu
root=$1 queue=$2 body_dir=$3 prio=${4:-4}
box="$root/$queue/incoming"
for d in working target processing processed expired error; do mkdir -p "$box/$d"; done
seq=0
for body in "$body_dir"/*; do
  [ -f "$body" ] || continue
  ms=$(date +%s%3N)
  rnd=$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')
  # 1.2 name: priority.messageId.class with messageId = <millis><3-digit counter>-<10 digits>
  name=$(printf '%s.%s%03d-%010d.B' "$prio" "$ms" $((seq % 1000)) "$rnd")
  seq=$((seq + 1))
  cat "$body" > "$box/working/$name"     # written and closed in working/ ...
  mv "$box/working/$name" "$box/target/$name"   # ... then committed by one rename
done
