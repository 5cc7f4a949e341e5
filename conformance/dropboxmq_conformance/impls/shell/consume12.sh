#!/bin/sh
# A DropboxMQ consumer in POSIX shell that does on disk what the real DropboxMQ 1.2 does
# (recorded: fixtures/dropboxmq12-traces): the claim keeps the name
# (processing/<client>~<name>), the acknowledgement writes the delivery count
# (processed/<client>~<name with JMSXDeliveryCountI=n+1>); an expired message is claimed,
# then moved processing/ -> expired/; a directory is claimed and moved to error/; dot-files,
# unparseable names and symlinks are ordinary messages.  Unlike 1.2 (which caches a listing
# for 30 s) it lists target/ again after every claim.  Usage: consume12.sh ROOT QUEUE CLIENT_ID
set -u
root=$1 queue=$2 cid=$3
here=$(dirname "$0")
box="$root/$queue/incoming"
list=$(mktemp) && trap 'rm -f "$list"' EXIT
while :; do
  claimed=0
  ls -A "$box/target" | sort -t. -k1,1nr -k2,2n > "$list" || exit 1
  while IFS= read -r name; do
    p="$box/processing/$cid~$name"
    mv -T "$box/target/$name" "$p" 2>/dev/null || continue   # lost the race: move on
    claimed=1
    exp=$(printf '%s\n' "$name" | awk -F. 'NF>=4 && NF<=8 && $4 ~ /^[0-9]+$/ {print $4}')
    if [ -d "$p" ] && [ ! -L "$p" ]; then
      mv -T "$p" "$box/error/$cid~$name"                     # not a message: dead letter
    elif [ -n "$exp" ] && [ "$exp" != 0 ] && [ "$exp" -le "$(date +%s%3N)" ]; then
      mv -T "$p" "$box/expired/$cid~$name"                   # expired after the claim
    else
      cat "$p" > /dev/null 2>&1                              # "process" the body
      printf '%s\n' "$name"
      acked=$(printf '%s\n' "$name" | awk -F. -f "$here/next-count.awk")
      mv -T "$p" "$box/processed/$cid~$acked"                # ack: the count is written now
    fi
    break                                                    # list again: priority first
  done < "$list"
  [ "$claimed" = 1 ] || break
done
