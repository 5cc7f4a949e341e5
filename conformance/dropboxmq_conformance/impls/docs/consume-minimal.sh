#!/bin/sh
# A docs-minimal consumer, written from spec/PROTOCOL.md alone, doing only what its MUST
# rules ask: claim by rename target/NAME -> processing/NAME (no owner prefix: N-9 allows a
# bare claim), deliver (print the name), acknowledge by rename to processed/NAME unchanged.
# Order: priority descending, then the name (N-6 for ids of one length).  It works through
# one listing of target/ before it lists again (C-9, a SHOULD, wants a fresher listing).
# Expired messages go to expired/ undelivered; anything but a regular file is left alone.
# Usage: consume-minimal.sh ROOT QUEUE CLIENT_ID (the client id is not used).
set -u
box="$1/$2/incoming"
while :; do
  claimed=0
  now=$(date +%s%3N)
  for name in $(ls "$box/target" | sort -t. -k1,1nr -k2,2); do
    f="$box/target/$name"
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    exp=$(echo "$name" | cut -d. -f4)
    case $exp in ''|*[!0-9]*) exp=0 ;; esac
    if [ "$exp" != 0 ] && [ "$exp" -le "$now" ]; then
      mv "$f" "$box/expired/$name" 2>/dev/null
      continue
    fi
    mv "$f" "$box/processing/$name" 2>/dev/null || continue   # ENOENT: another consumer won
    cat "$box/processing/$name" > /dev/null
    echo "$name"
    mv "$box/processing/$name" "$box/processed/$name"
    claimed=1
  done
  [ "$claimed" = 1 ] || break
done
