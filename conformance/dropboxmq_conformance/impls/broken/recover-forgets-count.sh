#!/bin/sh
# BROKEN recovery: returns a dead 1.2-style consumer's claims to target/ under their
# claimed name, without writing the delivery count: the next delivery says
# JMSRedelivered=false (the bug of the suite's old fallback recovery).
set -u
root=$1 queue=$2 cid=$3
box="$root/$queue/incoming"
ls -A "$box/processing" | while IFS= read -r pname; do
  case $pname in "$cid~"*) mv -T "$box/processing/$pname" "$box/target/${pname#"$cid~"}" ;; esac
done
