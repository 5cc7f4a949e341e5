# Sourced by publish.sh (and the broken publishers): subscriptions ROOT TOPIC prints the
# subscription dropboxes of TOPIC and of every ancestor topic (a.b.c -> a/b/c, a/b, a), one
# per line: each directory of .subscriptions/ that holds a target/.
subscriptions() {
  _t=$(printf '%s' "$2" | tr . /)
  while :; do
    for _s in "$1/topic-root/$_t/.subscriptions/"*; do
      if [ -d "$_s/target" ]; then printf '%s\n' "$_s"; fi
    done
    case "$_t" in */*) _t=${_t%/*};; *) break;; esac
  done
}
