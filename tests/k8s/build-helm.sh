#!/usr/bin/env bash
# Builds (once, cached) helm from the Go module proxy and prints the binary's path on stdout:
#   tests/k8s/build-helm.sh        # Helm 4, the client the tests use
#   tests/k8s/build-helm.sh 3      # Helm 3, for the one install and uninstall it still gets
#   go install helm.sh/helm/vN/cmd/helm@VERSION  ->  $NODEMEDIC_HELM_CACHE/vN/bin/helm
set -euo pipefail
MAJOR=${1:-4}
case "$MAJOR" in
    4) HELM_VERSION=v4.3.1 ;;
    3) HELM_VERSION=v3.19.5 ;;
    *) echo "build-helm.sh: Helm 3 or 4, not '$MAJOR'" >&2; exit 2 ;;
esac
CACHE="${NODEMEDIC_HELM_CACHE:-/var/cache/nodemedic-helm}/v$MAJOR"
BIN="$CACHE/bin/helm"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
# go install without helm's release ldflags reports only "vN.M": a stamp says which was built.
if [ -x "$BIN" ] && [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$HELM_VERSION" ]; then
    echo "$BIN"
    exit 0
fi
[ -x "$GO" ] || command -v "$GO" >/dev/null || { echo "build-helm.sh: Go is needed (go on PATH or /usr/local/go/bin/go)" >&2; exit 1; }
start=$(date +%s)
# The version helm prints (`helm version`) and sends as its user agent; without it Helm 4
# calls itself "v4.3" and Helm 3 "v3.19".
# Static and -trimpath, as Helm's releases and the other Go builds here (build-prometheus.sh):
# with the same flags Go's build cache compiles the standard library and the modules they share
# (Helm 4 and Prometheus require the same k8s.io/client-go) once.
CGO_ENABLED=0 GOBIN="$CACHE/bin" "$GO" install -trimpath -ldflags "-X helm.sh/helm/v$MAJOR/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v$MAJOR/cmd/helm@${HELM_VERSION}" >&2
echo "$HELM_VERSION" > "$CACHE/stamp"
echo "[build-helm] built $BIN ($HELM_VERSION) in $(( $(date +%s) - start ))s" >&2
echo "$BIN"
