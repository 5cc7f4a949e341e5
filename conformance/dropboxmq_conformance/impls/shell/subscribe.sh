#!/bin/sh
# A DropboxMQ subscriber in POSIX shell: consumes the durable subscription NAME of TOPIC for
# CLIENT_ID exactly as consume.sh consumes a queue.  Usage: subscribe.sh ROOT TOPIC NAME CLIENT_ID
# The subscription is <root>/topic-root/<topic, '.' -> '/'>/.subscriptions/<name>.<client id>/
# (1.2's subId; names and ids here need no escaping: letters, digits, '-', '_').
set -eu
root=$1 topic=$2 name=$3 cid=$4
case "$name$cid" in *[!A-Za-z0-9_-]*) echo "subscribe.sh: NAME and CLIENT_ID must need no escaping" >&2; exit 2;; esac
dir="$root/topic-root/$(printf '%s' "$topic" | tr . /)/.subscriptions/$name.$cid"
[ -d "$dir/target" ] || { echo "subscribe.sh: no subscription $dir" >&2; exit 1; }
DROPBOX_DIR=$dir exec sh "$(dirname "$0")/consume.sh" "$root" - "$cid"
