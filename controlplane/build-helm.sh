#!/usr/bin/env bash
# Build Helm, which the chart tests run (lint, template, and install on the test control plane),
# from the Go module proxy at the version pinned here, into a cache keyed by that version. Helm's
# own go.mod and go.sum decide its dependencies (`go install module@version`). A second run finds
# the binary and returns at once. Prints the binary's path on its last line.
set -euo pipefail

HELM=v4.3.2
CACHE="${GPU_BALANCER_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-balancer/helm}"
BIN="$CACHE/helm-$HELM/bin"

if [ -x "$BIN/helm" ]; then echo "$BIN/helm"; exit 0; fi
command -v go >/dev/null || { echo "helm: Go is not installed (needed to build Helm $HELM from the module proxy)" >&2; exit 3; }

rm -rf "$BIN.partial" && mkdir -p "$BIN.partial"
start=$(date +%s)
echo "helm: building Helm $HELM (cold: about 5 minutes on 2 cores)..." >&2
# The version stamp `helm version` prints; a module build has no VCS information of its own.
(cd / && GOBIN="$BIN.partial" go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM" "helm.sh/helm/v4/cmd/helm@$HELM")
rm -rf "$BIN" && mv "$BIN.partial" "$BIN"
echo "helm: built in $(( $(date +%s) - start )) s" >&2
echo "$BIN/helm"
