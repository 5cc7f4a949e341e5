#!/bin/sh
# A DropboxMQ publisher in POSIX shell, 1.2's way: one copy of each body per subscription of
# TOPIC and of every ancestor topic, each written in that subscription's working/ and renamed
# (mv) into its target/.  Usage: publish.sh ROOT TOPIC BODY_DIR [PRIORITY]
set -eu
root=$1 topic=$2 body_dir=$3 prio=${4:-4}
# the subscription directories of the topic and its ancestors (a.b.c -> a/b/c, a/b, a)
subs() {
  t=$(printf '%s' "$topic" | tr . /)
  while :; do
    for s in "$root/topic-root/$t/.subscriptions/"*; do
      [ -d "$s/target" ] && printf '%s\n' "$s"
    done
    case "$t" in */*) t=${t%/*};; *) break;; esac
  done
}
seq=0
for body in "$body_dir"/*; do
  [ -f "$body" ] || continue
  rnd=$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')
  name=$(printf '%s.%s%03d-%010d.B' "$prio" "$(date +%s%3N)" $((seq % 1000)) "$rnd")
  seq=$((seq + 1))
  subs | while IFS= read -r s; do
    cat "$body" > "$s/working/$name"      # one copy, written and closed in working/ ...
    mv "$s/working/$name" "$s/target/$name"   # ... committed by a rename
  done
done
