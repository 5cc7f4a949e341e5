#!/bin/sh
# A DropboxMQ consumer in POSIX shell.  Usage: consume.sh ROOT QUEUE CLIENT_ID
# Claims by mv target/ -> processing/<client>~<name with JMSXDeliveryCountI=n>, skips a
# lost race (mv fails), prints the name, acks by mv processing/ -> processed/.
# Delivery order: priority descending, then message-id prefix (send order); target/ is
# listed again after every claim, so a late higher-priority message overtakes the backlog
# (DMQ_SH_ONE_LISTING_PER_PASS=1 keeps one listing for a whole pass: the broken example
# late-priority-ignored).  Stops after a listing that yields no claim.  DROPBOX_DIR, when
# set, names the dropbox to consume instead of the queue's (subscribe.sh: a topic subscription).
set -u
root=$1 queue=$2 cid=$3
here=$(dirname "$0")
box=${DROPBOX_DIR:-"$root/$queue/incoming"}
list=$(mktemp) && trap 'rm -f "$list"' EXIT
while :; do
  claimed=0
  now=$(date +%s%3N)
  ls "$box/target" | sort -t. -k1,1nr -k2,2n > "$list" || exit 1
  while IFS= read -r name; do
    f="$box/target/$name"
    [ -f "$f" ] && [ ! -L "$f" ] || continue      # directories, symlinks: not ours
    exp=$(printf '%s\n' "$name" | awk -F. 'NF>=4 && $4 ~ /^[0-9]+$/ {print $4}')
    if [ -n "$exp" ] && [ "$exp" != 0 ] && [ "$exp" -le "$now" ]; then
      mv "$f" "$box/expired/$name" 2>/dev/null; continue
    fi
    # the claim writes the current delivery count into the name (JMSXDeliveryCountI)
    new=$(printf '%s\n' "$name" | awk -F. -f "$here/next-count.awk")
    p="$box/processing/$cid~$new"
    mv "$f" "$p" 2>/dev/null || continue           # lost the race: normal, move on
    cat "$p" > /dev/null                           # "process" the body
    printf '%s\n' "$name"
    mv "$p" "$box/processed/$cid~$new"             # acknowledge
    claimed=1
    [ "${DMQ_SH_ONE_LISTING_PER_PASS:-0}" = 1 ] || break   # list again: priority first
  done < "$list"
  [ "$claimed" = 1 ] || break
done
