#!/usr/bin/env bash
# Installs the pinned real nodes neve is tested and benchmarked against.
#
# Idempotent: a binary already present at the pinned version is kept.
# Destination: $NEVE_TOOLS_DIR, else <repo>/.tools (git ignores it).
# Needs Go (for the nodes) and reaches only the Go module proxy.
#
#   scripts/install-tools.sh            # geth and avalanchego
#   scripts/install-tools.sh geth       # just one
set -euo pipefail

GETH_VERSION=v1.17.5
AVALANCHEGO_VERSION=v1.14.2

repo=$(cd "$(dirname "$0")/.." && pwd)
tools=${NEVE_TOOLS_DIR:-$repo/.tools}
mkdir -p "$tools"
tools=$(cd "$tools" && pwd)

want=${*:-geth avalanchego}

log() { printf '[install-tools] %s\n' "$*" >&2; }

install_geth() {
  if [ -x "$tools/geth" ] && "$tools/geth" version 2>/dev/null | grep -q "^Version: ${GETH_VERSION#v}"; then
    log "geth $GETH_VERSION present"
    return
  fi
  log "building geth $GETH_VERSION (about 2 min the first time)"
  local start=$SECONDS
  GOBIN="$tools" go install "github.com/ethereum/go-ethereum/cmd/geth@$GETH_VERSION"
  log "geth built in $((SECONDS - start)) s"
}

install_avalanchego() {
  local stamp="$tools/avalanchego.version"
  if [ -x "$tools/avalanchego" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$AVALANCHEGO_VERSION" ]; then
    log "avalanchego $AVALANCHEGO_VERSION present"
    return
  fi
  log "building avalanchego $AVALANCHEGO_VERSION (about 2 min the first time)"
  local start=$SECONDS
  # `go install .../main@version` refuses modules with replace directives, so
  # build through a throwaway wrapper module that pins the one dependency the
  # proxy no longer resolves consistently.
  local mod
  mod=$(mktemp -d)
  trap 'rm -rf "$mod"' RETURN
  cat >"$mod/go.mod" <<MOD
module neve.local/avalanchego-build

go 1.23

require github.com/ava-labs/avalanchego $AVALANCHEGO_VERSION

replace google.golang.org/genproto => google.golang.org/genproto v0.0.0-20240903143218-8af14fe29dc1
MOD
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/ava-labs/avalanchego/main"
GO
  (cd "$mod" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod tidy)
  (cd "$mod" && GOFLAGS=-mod=mod go build -o "$tools/avalanchego" github.com/ava-labs/avalanchego/main)
  echo "$AVALANCHEGO_VERSION" >"$stamp"
  log "avalanchego built in $((SECONDS - start)) s"
}

for tool in $want; do
  case "$tool" in
    geth) install_geth ;;
    avalanchego) install_avalanchego ;;
    *) log "unknown tool: $tool"; exit 2 ;;
  esac
done
