#!/usr/bin/env bash
# Build the control plane the tests start (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and KWOK as the kubelet stand-in) from the Go module proxy at the
# versions pinned here and in go.mod, into a cache keyed by those versions. A second run finds
# the binaries and returns at once. Prints the bin directory on its last line.
set -euo pipefail
cd "$(dirname "$0")"

KUBERNETES=v1.37.2
ETCD=v3.7.0
KWOK=v0.8.0
CACHE="${GPU_BALANCER_CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-balancer/control-plane}"
# The build's own flavour is part of the key: "stamped" binaries report their version (below).
BIN="$CACHE/kubernetes-$KUBERNETES-etcd-$ETCD-kwok-$KWOK-stamped/bin"
PROGRAMS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
# KWOK's own default stages (nodes Ready with a lease heartbeat; pods Running, completed, deleted),
# as its module publishes them: the bare kwok binary starts only with stages given.
STAGES=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
        pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)

built() { for p in "${PROGRAMS[@]}"; do [ -x "$BIN/$p" ] || return 1; done; [ -s "$BIN/kwok-stages.yaml" ]; }

if built; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { echo "control plane: Go is not installed (needed to build $KUBERNETES from the module proxy)" >&2; exit 3; }
grep -q "k8s.io/kubernetes $KUBERNETES" go.mod || { echo "control plane: go.mod does not pin k8s.io/kubernetes $KUBERNETES" >&2; exit 2; }

mkdir -p "$BIN.partial"
start=$(date +%s)
echo "control plane: building Kubernetes $KUBERNETES, etcd $ETCD, KWOK $KWOK (cold: tens of minutes on 2 cores)..." >&2
# -mod=readonly: go.sum, committed, is the whole dependency set; nothing is resolved afresh.
# The version stamp Kubernetes' own release build sets: without it the API server reports
# v0.0.0-master, and a Helm chart's kubeVersion requirement (or any client's check) fails.
minor=${KUBERNETES#v1.}; minor=${minor%%.*}
stamp="-X k8s.io/component-base/version.gitVersion=$KUBERNETES -X k8s.io/component-base/version.gitMajor=1"
stamp="$stamp -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
go build -mod=readonly -trimpath -ldflags "-s -w $stamp" -o "$BIN.partial/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl ./cmd/etcd
# KWOK's own go.mod decides its dependencies (it pins older k8s.io libraries than ours).
GOBIN="$BIN.partial" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK"
kwok_dir=$(cd / && go mod download -json "sigs.k8s.io/kwok@$KWOK" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
for stage in "${STAGES[@]}"; do echo "---"; cat "$kwok_dir/kustomize/stage/$stage"; done > "$BIN.partial/kwok-stages.yaml"
rm -rf "$BIN" && mv "$BIN.partial" "$BIN"
echo "control plane: built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
