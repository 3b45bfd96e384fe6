#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests run (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy, kubectl) from the Go module proxy, cached, and installs
# what else tests/k8s runs from Debian (etcd, containerd, runc, CNI plugins, buildah, ...).
#
#   tests/k8s/build-k8s.sh        # idempotent; < 1 s when cached
#
# Env:
#   NODEMEDIC_K8S_CACHE   cache root (default /var/cache/nodemedic-k8s): bin/ (the binaries,
#                         .stamp, .build-seconds, .build-times), wrapper/ (the Go module), .lock
#   GO                    go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GOTOOLCHAIN           the Go toolchain (deploy/bootstrap.sh pins it; default go1.26.8)
#   NODEMEDIC_K8S_PACKAGES=0  skip the apt-get install of missing packages
#   NODEMEDIC_K8S_VERSION another release than the tests' (e.g. 1.35.4), with its own cache
#   GOMODCACHE, GOCACHE   Go's own caches (a cold build: point both at empty directories)
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

# The release every test runs; NODEMEDIC_K8S_VERSION builds another (the recorded run on the
# oldest supported release, tests/k8s/README.md) — give it a cache of its own too.
K8S_VERSION_DEFAULT=1.37.2
K8S_VERSION="${NODEMEDIC_K8S_VERSION:-$K8S_VERSION_DEFAULT}"
STAGING_VERSION="v0.${K8S_VERSION#1.}"      # 1.37.2 -> v0.37.2
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

CACHE="${NODEMEDIC_K8S_CACHE:-/var/cache/nodemedic-k8s}"
BIN="$CACHE/bin"
WRAP="$CACHE/wrapper"
STAMP="$BIN/.stamp"

log() { printf '[build-k8s] %s\n' "$*" >&2; }

mkdir -p "$BIN" "$WRAP"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  log "another build-k8s.sh holds $CACHE/.lock; waiting for it"
  flock 9
fi

# ------------------------------------------------------------ Debian packages
# What the tests/k8s scripts run besides the Kubernetes binaries: etcd for the apiserver,
# and for the whole cluster (cluster-up.sh) the CNI plugins, buildah for the images nothing can
# pull, iptables/conntrack for kube-proxy, and the tools. containerd 2 and runc are not
# Debian's: build-containerd.sh.
PACKAGES=(etcd-server etcd-client containernetworking-plugins buildah
          iptables conntrack socat ethtool iproute2 util-linux openssl curl jq)
# shellcheck source=deploy/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../deploy/apt.sh"
install_packages() {
  [ -n "$(missing_packages "${PACKAGES[@]}")" ] || return 0
  log "installing from Debian: $(missing_packages "${PACKAGES[@]}" | tr '\n' ' ')"
  ensure_packages --no-start "${PACKAGES[@]}" >&2
  # Where systemd does run, the units are enabled by the packages: stop them for good.
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now etcd containerd >/dev/null 2>&1 || true
  fi
}
if [ "${NODEMEDIC_K8S_PACKAGES:-1}" = 1 ]; then install_packages; fi

# ------------------------------------------------------------- the binaries
if [ -z "${GO:-}" ]; then
  if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi
if ! command -v "$GO" >/dev/null 2>&1; then
  log "ERROR: no Go toolchain: neither 'go' on PATH nor /usr/local/go/bin/go (set GO=/path/to/go;"
  log "       Debian 12's golang-go 1.19 is too old; tests/run-all.sh installs one: deploy/bootstrap.sh ensure_go)"
  exit 1
fi
# Go 1.21+ understands GOTOOLCHAIN and fetches the pinned toolchain through the module proxy;
# an older go would fail on k8s.io/kubernetes' go.mod with a confusing message.
gov="$(GOTOOLCHAIN=local "$GO" env GOVERSION 2>/dev/null || true)"
case "$gov" in
  go1.2[1-9]* | go1.[3-9][0-9]*) ;;
  *) log "ERROR: $GO is ${gov:-unusable}; Go 1.21 or newer is needed (set GO=/path/to/go)"; exit 1 ;;
esac
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.26.8}" GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0

STAMP_WANT="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1) $GOTOOLCHAIN v$K8S_VERSION"
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

# Left by a build that was killed (we hold the lock: nobody else writes here now).
rm -f "$BIN"/.*.tmp
times=""
for c in "${COMPONENTS[@]}"; do
  t0=$(date +%s)
  tmp="$BIN/.$c.$$.tmp"      # unique, then an atomic rename: a reader never sees half a binary
  "$GO" build -trimpath -ldflags "$ldflags" -o "$tmp" "k8s.io/kubernetes/cmd/$c"
  mv -f "$tmp" "$BIN/$c"
  log "built $c in $(( $(date +%s) - t0 ))s"
  times+="$c $(( $(date +%s) - t0 ))"$'\n'
done

secs=$(( $(date +%s) - start ))
printf '%s' "$times" > "$BIN/.build-times.tmp.$$" && mv -f "$BIN/.build-times.tmp.$$" "$BIN/.build-times"
echo "$secs" > "$BIN/.build-seconds.tmp.$$" && mv -f "$BIN/.build-seconds.tmp.$$" "$BIN/.build-seconds"
echo "$STAMP_WANT" > "$STAMP.tmp.$$" && mv -f "$STAMP.tmp.$$" "$STAMP"
log "done in ${secs}s: $("$BIN/kube-apiserver" --version)"
