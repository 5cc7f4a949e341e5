#!/bin/sh
# BROKEN producer: gives every message the same file name, so each rename into target/
# replaces the message still waiting there (a lost message per send).
set -eu
root=$1 queue=$2 body_dir=$3 prio=$4
box="$root/$queue/incoming"
name="$prio.1700000000000000-0000000001.B"
for body in "$body_dir"/*; do
  cat "$body" > "$box/working/$name"
  mv "$box/working/$name" "$box/target/$name"
done
