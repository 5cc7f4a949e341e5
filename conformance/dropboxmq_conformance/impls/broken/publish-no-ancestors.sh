#!/bin/sh
# BROKEN publisher: fans out to the subscriptions of the topic itself only, forgetting that
# 1.2 also delivers to every ancestor topic's subscriptions (a.b.c reaches a.b and a).
set -eu
root=$1 topic=$2 body_dir=$3 prio=${4:-4}
seq=0
for body in "$body_dir"/*; do
  name=$(printf '%s.%s%03d-%010d.B' "$prio" "$(date +%s%3N)" $((seq % 1000)) $((seq * 7919))); seq=$((seq + 1))
  for s in "$root/topic-root/$(printf '%s' "$topic" | tr . /)/.subscriptions/"*; do
    [ -d "$s/target" ] || continue
    cat "$body" > "$s/working/$name"; mv "$s/working/$name" "$s/target/$name"
  done
done
