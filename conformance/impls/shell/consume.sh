#!/bin/sh
# A DropboxMQ consumer in POSIX shell.  Usage: consume.sh ROOT QUEUE CLIENT_ID
# Claims by mv target/ -> processing/<client>~<name with JMSXDeliveryCountI=n>, skips a
# lost race (mv fails), prints the name, acks by mv processing/ -> processed/.
# Delivery order: priority descending, then message-id prefix (send order).
# Stops after a pass over target/ that claimed nothing.  DROPBOX_DIR, when set, names the
# dropbox to consume instead of the queue's (subscribe.sh: a topic subscription).
set -u
root=$1 queue=$2 cid=$3
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
    # the claim writes the current delivery count into the name (1.2's JMSXDeliveryCountI)
    new=$(printf '%s\n' "$name" | awk -F. '
      NF < 3 || NF > 8 { print; next }
      { n = 0; out = ""; props = (NF >= 8) ? $8 : ""
        k = split(props, pairs, "&")
        for (i = 1; i <= k; i++) {
          if (pairs[i] ~ /^JMSXDeliveryCount.=/) { split(pairs[i], kv, "="); n = kv[2] + 0; continue }
          out = out (out == "" ? "" : "&") pairs[i] }
        pair = "JMSXDeliveryCountI=" (n + 1)
        out = out (out == "" ? "" : "&") pair
        s = $1; for (i = 2; i <= 7; i++) s = s "." (i <= NF ? $i : "")
        print s "." out }')
    p="$box/processing/$cid~$new"
    mv "$f" "$p" 2>/dev/null || continue           # lost the race: normal, move on
    cat "$p" > /dev/null                           # "process" the body
    printf '%s\n' "$name"
    mv "$p" "$box/processed/$cid~$new"             # acknowledge
    claimed=1
  done < "$list"
  [ "$claimed" = 1 ] || break
done
