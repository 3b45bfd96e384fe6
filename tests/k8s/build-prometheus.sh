#!/usr/bin/env bash
# Builds (once, cached) a Prometheus server with Kubernetes service discovery from the Go
# module proxy: Debian 12's prometheus (2.42+ds) is built without kubernetes_sd_configs.
#   go install github.com/prometheus/prometheus/cmd/prometheus@$VERSION -> $CACHE/bin/prometheus
# Prints the binary's path on stdout. The web UI's assets are not built in (the HTTP API is
# all the tests use).
set -euo pipefail
VERSION=v0.316.0
CACHE="${NODEMEDIC_PROMETHEUS_CACHE:-/var/cache/nodemedic-prometheus}"
BIN="$CACHE/bin/prometheus"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.26.8}" GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -x "$BIN" ] && [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$VERSION" ]; then
    echo "$BIN"
    exit 0
fi
[ -x "$GO" ] || { echo "build-prometheus.sh: Go is needed (deploy/bootstrap.sh ensure_go)" >&2; exit 1; }
start=$(date +%s)
GOBIN="$CACHE/bin" "$GO" install "github.com/prometheus/prometheus/cmd/prometheus@${VERSION}" >&2
echo "$VERSION" > "$CACHE/stamp"
echo "[build-prometheus] built $BIN ($VERSION) in $(( $(date +%s) - start ))s" >&2
echo "$BIN"
