#!/usr/bin/env bash
# Builds the Kubernetes tools the chart and autoscaler tests run, from the
# module proxy (tools/kube/go.mod pins them): kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok (and its stage
# configuration), helm and kubeconform. Several runs at once (make test
# starts one early) wait for each other.
# Usage: scripts/kube-tools.sh DIR. The binaries go to DIR; a stamp of
# tools/kube/go.sum skips the build when they are current. A cold build
# takes about 6 minutes on 2 cores (2.4 GB of memory at link time).
set -euo pipefail
out=${1:?usage: $0 DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
exec 9>"$out/.lock"
flock 9
stamp=$(sha256sum "$root/tools/kube/go.mod" "$root/tools/kube/go.sum" "$0" | sha256sum | cut -c1-16)
if [[ -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$stamp" ]]; then
	exit 0
fi
# Version strings: without them kube-apiserver reports v0.0.0, and helm
# refuses charts that ask for a kubeVersion.
kver=v1.36.3
k8s="-X k8s.io/client-go/pkg/version.gitVersion=$kver -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=36"
k8s="$k8s -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"
helm="-X helm.sh/helm/v3/internal/version.version=v3.22.0"
helm="$helm -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=36"
helm="$helm -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=36"
cd "$root/tools/kube"
export CGO_ENABLED=0
go build -trimpath -ldflags "-s -w $k8s" -o "$out/" \
	k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler \
	sigs.k8s.io/kwok/cmd/kwok
go build -trimpath -ldflags "-s -w $helm $k8s" -o "$out/" helm.sh/helm/v3/cmd/helm
go build -trimpath -ldflags "-s -w" -o "$out/" github.com/yannh/kubeconform/cmd/kubeconform
# kwok's own "fast" stages (nodes ready at once with a lease heartbeat,
# pods ready at once, deleted pods gone at once), from its module.
kwok=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
{
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		echo ---
		cat "$kwok/$f"
	done
} > "$out/kwok-stages.yaml"
echo "$stamp" > "$out/.stamp"
