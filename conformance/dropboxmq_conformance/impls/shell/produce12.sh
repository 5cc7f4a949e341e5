#!/bin/sh
# A DropboxMQ producer in POSIX shell that writes like the real DropboxMQ 1.2 (recorded:
# fixtures/dropboxmq12-traces/produce.jsonl): create the file in working/ exclusively and
# close it, reopen it to write the body and close it again, then rename it into target/.
# Usage: produce12.sh ROOT QUEUE BODY_DIR PRIORITY
set -eu
root=$1 queue=$2 body_dir=$3 prio=$4
box="$root/$queue/incoming"
. "$(dirname "$0")/name12.sh"
seq=0
for body in "$body_dir"/*; do
  [ -f "$body" ] || continue
  name=$(new_name "$prio" "$seq")
  seq=$((seq + 1))
  w="$box/working/$name"
  (set -C; : > "$w")                 # create exclusively, close (close_write #1)
  cat "$body" >> "$w"                # reopen, write the body, close (close_write #2)
  [ ! -e "$box/target/$name" ]       # a rename must never replace a waiting message
  mv -T "$w" "$box/target/$name"
done
