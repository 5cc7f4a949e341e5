#!/bin/sh
# Compile a one-file Java program against CLASSPATH (once, cached by content) and run it.
# Usage: run-java.sh CLASSPATH SOURCE.java [ARGS...]
#        run-java.sh --compile CLASSPATH SOURCE.java   (compile only; print the class directory,
#        e.g. to put a provider's own classes on the adapter's classpath)
# The class file goes to ${TMPDIR:-/tmp}/dropboxmq-java-<uid>-<hash>/, built in a private
# directory and renamed into place, so concurrent first runs never see half a compilation.
set -eu
compile_only=
if [ "${1:-}" = --compile ]; then compile_only=1; shift; fi
[ $# -ge 2 ] || { echo "usage: run-java.sh CLASSPATH SOURCE.java [ARGS...]" >&2; exit 2; }
cp=$1 src=$2; shift 2
[ -f "$src" ] || { echo "run-java.sh: no source file $src" >&2; exit 2; }
command -v javac >/dev/null || { echo "run-java.sh: javac not found (install a JDK, e.g. openjdk-17-jdk-headless)" >&2; exit 2; }
old_ifs=$IFS; IFS=:
for jar in $cp; do
  [ -e "$jar" ] || { echo "run-java.sh: classpath entry $jar does not exist (missing Debian package?)" >&2; exit 2; }
done
IFS=$old_ifs
hash=$( (cat "$src"; printf '%s' "$cp"; javac -version 2>&1) | sha256sum | cut -c1-16)
out="${TMPDIR:-/tmp}/dropboxmq-java-$(id -u)-$hash"
if [ ! -d "$out" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/dropboxmq-java-build.XXXXXX")
  if ! javac -nowarn -encoding UTF-8 -cp "$cp" -d "$tmp" "$src" >&2; then rm -rf "$tmp"; exit 2; fi
  mv -T "$tmp" "$out" 2>/dev/null || rm -rf "$tmp"   # another run won the race: use theirs
fi
if [ -n "$compile_only" ]; then printf '%s\n' "$out"; exit 0; fi
main=$(basename "$src" .java)
exec java -Xss512k -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$out:$cp" "$main" "$@"
