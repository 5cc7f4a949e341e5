#!/bin/sh
# BROKEN producer: sends correctly but leaves its scratch copy behind in working/.
set -eu
root=$1 queue=$2 body_dir=$3 prio=${4:-4}
box="$root/$queue/incoming"; seq=0
for d in working target processing processed expired error; do mkdir -p "$box/$d"; done
for body in "$body_dir"/*; do
  name=$(printf "%s.%s%03d-%010d.B" "$prio" "$(date +%s%3N)" $((seq % 1000)) $((seq * 7919))); seq=$((seq + 1))
  cat "$body" > "$box/working/$name.tmp"
  cat "$body" > "$box/working/$name"
  mv "$box/working/$name" "$box/target/$name"
done
