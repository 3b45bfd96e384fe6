#!/usr/bin/env bash
# Builds (once, cached) helm from the Go module proxy:
#   go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION  ->  $NODEMEDIC_HELM_CACHE/bin/helm
# Prints the binary's path on stdout.
set -euo pipefail
HELM_VERSION=v3.19.5
CACHE="${NODEMEDIC_HELM_CACHE:-/var/cache/nodemedic-helm}"
BIN="$CACHE/bin/helm"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
# go install without helm's release ldflags reports only "v3.19": a stamp says which was built.
if [ -x "$BIN" ] && [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$HELM_VERSION" ]; then
    echo "$BIN"
    exit 0
fi
[ -x "$GO" ] || { echo "build-helm.sh: Go is needed (go on PATH or /usr/local/go/bin/go)" >&2; exit 1; }
start=$(date +%s)
GOBIN="$CACHE/bin" "$GO" install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2
echo "$HELM_VERSION" > "$CACHE/stamp"
echo "[build-helm] built $BIN ($HELM_VERSION) in $(( $(date +%s) - start ))s" >&2
echo "$BIN"
