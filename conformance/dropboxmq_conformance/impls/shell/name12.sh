# Sourced by the shell producers.  new_name PRIORITY SEQ: a fresh 1.2 message name
# priority.messageId.class, messageId = <millis><3-digit counter>-<10 random digits>.
new_name() {
  printf '%s.%s%03d-%010d.B' "$1" "$(date +%s%3N)" $(($2 % 1000)) "$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')"
}
