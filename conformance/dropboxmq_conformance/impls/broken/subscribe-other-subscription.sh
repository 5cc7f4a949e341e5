#!/bin/sh
# BROKEN subscriber: consumes the first subscription directory of the topic it lists instead
# of its own (<name>.<client id>): it steals another subscription's copies.
set -eu
root=$1 topic=$2 name=$3 cid=$4
subs="$root/topic-root/$(printf '%s' "$topic" | tr . /)/.subscriptions"
dir="$subs/$(ls "$subs" | head -n 1)"   # BROKEN: not "$subs/$name.$cid"
DROPBOX_DIR=$dir exec sh "$(dirname "$0")/../shell/consume.sh" "$root" - "$cid"
