#!/bin/sh
# BROKEN producer: its message ids decode (<seconds><3-digit number>-<pid>) but the number
# counts DOWN the sends left, so within a second each message sorts before the one sent
# before it and a FIFO consumer delivers them backwards.  Otherwise it follows the protocol.
set -eu
root=$1 queue=$2 body_dir=$3 prio=${4:-4}
box="$root/$queue/incoming"
left=$(ls "$body_dir" | wc -l)
for body in "$body_dir"/*; do
  [ -f "$body" ] || continue
  name=$(printf '%s.%s%03d-%s.B' "$prio" "$(date +%s)" "$left" "$$")
  left=$((left - 1))
  cat "$body" > "$box/working/$name"
  mv "$box/working/$name" "$box/target/$name"
done
