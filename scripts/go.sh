#!/usr/bin/env bash
# go.sh prints the path of a go command new enough for go.mod: the one on
# PATH (or /usr/local/go/bin/go) if it is, else the toolchain that setup.sh
# put in the cache. It exits 1 when there is none.
set -euo pipefail
want=$(awk '/^go /{print $2}' "$(dirname "$0")/../go.mod")
CACHE="${VIGIL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil}"
newer_or_equal() { [ "$(printf '%s\n%s\n' "$want" "$1" | sort -V | head -1)" = "$want" ]; }
for g in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go "$CACHE/go/bin/go"; do
  [ -n "$g" ] && [ -x "$g" ] || continue
  v=$(GOTOOLCHAIN=local "$g" env GOVERSION 2>/dev/null | sed 's/^go//') || continue
  if newer_or_equal "$v"; then echo "$g"; exit 0; fi
done
exit 1
