#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests run (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy, kubectl) from the Go module proxy, cached, and makes
# sure etcd is installed from Debian.
#
#   tests/k8s/build-k8s.sh        # idempotent; < 1 s when cached
#
# Env:
#   NODEMEDIC_K8S_CACHE   cache root (default /var/cache/nodemedic-k8s): bin/, wrapper/
#   GO                    go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GOTOOLCHAIN           the Go toolchain (deploy/bootstrap.sh pins it; default go1.26.8)
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the k8s.io/* staging
# modules with ./staging/...). The binaries are built from a throwaway wrapper module that
# requires k8s.io/kubernetes and replaces each staging module with its published v0.X.Y.
# The version is set with -ldflags -X k8s.io/component-base/version.*, or kubectl cannot
# parse the server's version.
#
# Every check and build holds an exclusive flock on the cache: two tests that start this at
# once (tests/kubernetes.rs runs tests in parallel) build once, and the second finds it cached.
set -euo pipefail

K8S_VERSION=1.34.4
STAGING_VERSION="v0.${K8S_VERSION#1.}"      # 1.34.4 -> v0.34.4
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

CACHE="${NODEMEDIC_K8S_CACHE:-/var/cache/nodemedic-k8s}"
BIN="$CACHE/bin"
WRAP="$CACHE/wrapper"
STAMP="$BIN/.stamp"

log() { printf '[build-k8s] %s\n' "$*" >&2; }

mkdir -p "$BIN" "$WRAP"
exec 9>"$CACHE/.lock"
flock 9

# ---------------------------------------------------------------- etcd (apt)
install_etcd() {
  if command -v etcd >/dev/null 2>&1; then
    return 0
  fi
  log "installing etcd-server/etcd-client from Debian"
  export DEBIAN_FRONTEND=noninteractive
  # Never let the package start a system-wide etcd service.
  local prc=/usr/sbin/policy-rc.d created_prc=0
  if [ ! -e "$prc" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$prc"
    chmod +x "$prc"; created_prc=1
  fi
  apt-get update -qq </dev/null
  apt-get install -y -qq --no-install-recommends etcd-server etcd-client </dev/null
  [ "$created_prc" = 1 ] && rm -f "$prc"
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
}
install_etcd

# ------------------------------------------------------------- the binaries
if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi
[ -x "$(command -v "$GO")" ] || { log "Go is needed (tests/run-all.sh installs it: deploy/bootstrap.sh ensure_go)"; exit 1; }
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.26.8}" GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0

STAMP_WANT="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1) $GOTOOLCHAIN"
cached=1
for c in "${COMPONENTS[@]}"; do [ -x "$BIN/$c" ] || cached=0; done
if [ "$cached" = 1 ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$STAMP_WANT" ]; then
  log "cached: $BIN ($(cat "$BIN/.build-seconds" 2>/dev/null || echo '?')s to build)"
  exit 0
fi

start=$(date +%s)
log "go: $("$GO" version)"
log "downloading k8s.io/kubernetes@v$K8S_VERSION"
gomod="$(cd "$WRAP" && GOFLAGS=-mod=mod "$GO" mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
          | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[ -f "$gomod" ] || { log "could not locate go.mod of k8s.io/kubernetes@v$K8S_VERSION"; exit 1; }

# Every `k8s.io/foo => ./staging/src/k8s.io/foo` line becomes `k8s.io/foo => k8s.io/foo v0.X.Y`.
replaces="$(awk -v v="$STAGING_VERSION" '
  $2 == "=>" && $3 ~ /^\.\/staging\// { printf "\t%s => %s %s\n", $1, $1, v }' "$gomod")"
n=$(printf '%s\n' "$replaces" | grep -c '=>' || true)
[ "$n" -ge 20 ] || { log "only $n staging replaces found in $gomod"; exit 1; }
log "$n staging modules replaced with $STAGING_VERSION"
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
{
  echo "//go:build tools"
  echo
  echo "package tools"
  echo
  echo "import ("
  for c in "${COMPONENTS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
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

for c in "${COMPONENTS[@]}"; do
  t0=$(date +%s)
  tmp="$BIN/.$c.$$.tmp"
  "$GO" build -trimpath -ldflags "$ldflags" -o "$tmp" "k8s.io/kubernetes/cmd/$c"
  mv -f "$tmp" "$BIN/$c"
  log "built $c in $(( $(date +%s) - t0 ))s"
done

secs=$(( $(date +%s) - start ))
echo "$secs" > "$BIN/.build-seconds"
echo "$STAMP_WANT" > "$STAMP"
log "done in ${secs}s: $("$BIN/kube-apiserver" --version)"
