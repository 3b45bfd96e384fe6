#!/usr/bin/env bash
# Builds (once, cached) a Prometheus server with Kubernetes service discovery from the Go
# module proxy: Debian 12's prometheus (2.42+ds) is built without kubernetes_sd_configs.
#   go install github.com/prometheus/prometheus/cmd/prometheus@$VERSION -> $CACHE/bin/prometheus
# Prints the binary's path on stdout. The web UI's assets are not built in (the HTTP API is
# all the tests use), and of the service discoveries only Kubernetes' is (Prometheus's build
# tags `remove_all_sd,enable_kubernetes_sd`): the cloud providers' SDKs it leaves out were most
# of a cold build's time (386 s for all of them on the 2-core CI machine).
set -euo pipefail
VERSION=v0.316.0
TAGS=remove_all_sd,enable_kubernetes_sd
CACHE="${NODEMEDIC_PROMETHEUS_CACHE:-/var/cache/nodemedic-prometheus}"
BIN="$CACHE/bin/prometheus"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.26.8}" GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -x "$BIN" ] && [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$VERSION $TAGS" ]; then
    echo "$BIN"
    exit 0
fi
[ -x "$GO" ] || { echo "build-prometheus.sh: Go is needed (deploy/bootstrap.sh ensure_go)" >&2; exit 1; }
start=$(date +%s)
# -trimpath and CGO_ENABLED=0 as build-helm.sh's: Go's build cache then compiles the modules
# both require (k8s.io/client-go, api, apimachinery) once.
GOBIN="$CACHE/bin" "$GO" install -trimpath -tags "$TAGS" "github.com/prometheus/prometheus/cmd/prometheus@${VERSION}" >&2
echo "$VERSION $TAGS" > "$CACHE/stamp"
echo "[build-prometheus] built $BIN ($VERSION) in $(( $(date +%s) - start ))s" >&2
echo "$BIN"
