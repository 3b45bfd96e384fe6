#!/usr/bin/env bash
# Build a real kube-apiserver (and, by default, kubectl) from the Go module
# proxy, and make sure etcd is installed from Debian.
#
#   tests/k8s/build-apiserver.sh            # idempotent; fast when cached
#
# Env:
#   NODEMEDIC_K8S_CACHE   cache root (default /var/cache/nodemedic-k8s)
#   NODEMEDIC_K8S_KUBECTL 1 (default) also builds kubectl; 0 skips it
#   GO                    go binary (default: go on PATH, else /usr/local/go/bin/go)
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod has replace
# directives pointing at ./staging/...).  We build it from a tiny wrapper
# module that requires k8s.io/kubernetes and replaces every staging module
# with its published v0.X.Y release.  The replace list is generated from
# k8s.io/kubernetes's own go.mod in the module cache.
set -euo pipefail

K8S_VERSION=1.33.0
STAGING_VERSION="v0.${K8S_VERSION#1.}"      # 1.33.0 -> v0.33.0

CACHE="${NODEMEDIC_K8S_CACHE:-/var/cache/nodemedic-k8s}"
BIN="$CACHE/bin"
WRAP="$CACHE/wrapper"
STAMP="$BIN/.stamp"
WANT_KUBECTL="${NODEMEDIC_K8S_KUBECTL:-1}"

log() { printf '[build-apiserver] %s\n' "$*" >&2; }

# ---------------------------------------------------------------- etcd (apt)
install_etcd() {
  if command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ]; then
    return 0
  fi
  log "installing etcd-server/etcd-client from Debian"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  export DEBIAN_FRONTEND=noninteractive
  # Never let the package start a system-wide etcd service.
  local prc=/usr/sbin/policy-rc.d created_prc=0
  if [ ! -e "$prc" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$prc" >/dev/null
    $sudo chmod +x "$prc"; created_prc=1
  fi
  $sudo apt-get update -qq </dev/null
  $sudo apt-get install -y -qq --no-install-recommends etcd-server etcd-client </dev/null
  [ "$created_prc" = 1 ] && $sudo rm -f "$prc"
  # Debian's postinst may still have started it (e.g. under systemd): stop it.
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
}
install_etcd

# ------------------------------------------------------------ kube-apiserver
if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi
export GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0

SCRIPT_HASH="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"
STAMP_WANT="$SCRIPT_HASH kubectl=$WANT_KUBECTL"

if [ -x "$BIN/kube-apiserver" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ] \
   && { [ "$WANT_KUBECTL" != 1 ] || [ -x "$BIN/kubectl" ]; }; then
  log "cached: $BIN/kube-apiserver ($(cat "$BIN/.build-seconds" 2>/dev/null || echo '?')s cold build)"
  exit 0
fi

start=$(date +%s)
mkdir -p "$BIN" "$WRAP"
log "go: $($GO version)"

log "downloading k8s.io/kubernetes@v$K8S_VERSION"
gomod="$(cd "$WRAP" && GOFLAGS=-mod=mod "$GO" mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
          | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[ -f "$gomod" ] || { log "could not locate go.mod of k8s.io/kubernetes@v$K8S_VERSION"; exit 1; }

# Every `k8s.io/foo => ./staging/src/k8s.io/foo` line becomes
# `k8s.io/foo => k8s.io/foo v0.X.Y`.
replaces="$(awk -v v="$STAGING_VERSION" '
  $2 == "=>" && $3 ~ /^\.\/staging\// { printf "\t%s => %s %s\n", $1, $1, v }' "$gomod")"
n=$(printf '%s\n' "$replaces" | grep -c '=>' || true)
[ "$n" -ge 20 ] || { log "only $n staging replaces found in $gomod"; exit 1; }
log "$n staging modules replaced with $STAGING_VERSION"
# Keep the same language/GODEBUG defaults as upstream's main module.
godir="$(awk '$1=="go"{print $2; exit}' "$gomod")"
godebug="$(grep -E '^godebug ' "$gomod" || true)"

rm -f "$WRAP/go.mod" "$WRAP/go.sum"
{
  echo "module nodemedic.test/k8s-wrapper"
  echo
  echo "go $godir"
  [ -n "$godebug" ] && { echo; echo "$godebug"; }
  echo
  echo "require k8s.io/kubernetes v$K8S_VERSION"
  echo
  echo "replace ("
  printf '%s\n' "$replaces"
  echo ")"
} > "$WRAP/go.mod"

pkgs=(k8s.io/kubernetes/cmd/kube-apiserver)
[ "$WANT_KUBECTL" = 1 ] && pkgs+=(k8s.io/kubernetes/cmd/kubectl)
{
  echo "//go:build tools"
  echo
  echo "package tools"
  echo
  echo "import ("
  for p in "${pkgs[@]}"; do echo "	_ \"$p\""; done
  echo ")"
} > "$WRAP/tools.go"

cd "$WRAP"
log "go mod tidy"
"$GO" mod tidy

ldflags="-s -w"
for kv in "gitVersion=v$K8S_VERSION" "gitMajor=${K8S_VERSION%%.*}" \
          "gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)" "gitTreeState=clean" \
          "buildDate=1970-01-01T00:00:00Z"; do
  ldflags+=" -X k8s.io/component-base/version.$kv"
done

for p in "${pkgs[@]}"; do
  name="${p##*/}"
  t0=$(date +%s)
  log "go build $p"
  "$GO" build -trimpath -ldflags "$ldflags" -o "$BIN/$name.tmp" "$p"
  mv -f "$BIN/$name.tmp" "$BIN/$name"
  log "built $BIN/$name in $(( $(date +%s) - t0 ))s"
done
[ "$WANT_KUBECTL" = 1 ] || rm -f "$BIN/kubectl"

secs=$(( $(date +%s) - start ))
echo "$secs" > "$BIN/.build-seconds"
echo "$STAMP_WANT" > "$STAMP"
log "done in ${secs}s: $("$BIN/kube-apiserver" --version)"
