#!/bin/sh
# Returns a dead 1.2-style consumer's claimed messages to target/.  Its claim kept the
# name, so the count must be written now (JMSXDeliveryCountI=n+1): the next delivery is
# then flagged redelivered.  Usage: recover12.sh ROOT QUEUE DEAD_CLIENT_ID
set -u
root=$1 queue=$2 cid=$3
here=$(dirname "$0")
box="$root/$queue/incoming"
ls -A "$box/processing" | while IFS= read -r pname; do
  case $pname in "$cid~"*) ;; *) continue ;; esac
  name=${pname#"$cid~"}
  back=$(printf '%s\n' "$name" | awk -F. -f "$here/next-count.awk")
  [ -e "$box/target/$back" ] || mv -T "$box/processing/$pname" "$box/target/$back"
done
