#!/usr/bin/env bash
# The e2e suite on kind: build and load the images, create the cluster, advertise fake GPUs,
# install the chart, apply the samples and run the e2e tests against that cluster.
# Needs docker, kind, kubectl and helm on PATH. Usage:
#   e2e/run-kind.sh [--keep] [--cpu-engine] [-- extra pytest args]
#     --keep        leave the cluster running afterwards (it is deleted by default)
#     --cpu-engine  also build the CPU vLLM image (slow: torch and vLLM wheels)
set -euo pipefail
cd "$(dirname "$0")/.."

keep=0
cpu_engine=0
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --cpu-engine) cpu_engine=1 ;;
    --) shift; break ;;
    *) echo "run-kind: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift
done

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "run-kind: $tool not found on PATH" >&2; exit 1; }
done
[ -x .venv/bin/pytest ] || { echo "run-kind: no .venv; run \`make venv\` first" >&2; exit 1; }

cluster=tokenpilot-e2e
version=$(sed -n 's/^appVersion: "\(.*\)"/\1/p' helm/tokenpilot/Chart.yaml)
namespace=tokenpilot-system
kubeconfig="$(mktemp -d)/kubeconfig"
export KUBECONFIG="$kubeconfig"

images=("tokenpilot/operator:$version" "tokenpilot/engine-sim:$version")
docker build -f engine-image/tokenpilot.Dockerfile --target operator -t "${images[0]}" .
docker build -f engine-image/tokenpilot.Dockerfile --target engine-sim -t "${images[1]}" .
if [ "$cpu_engine" -eq 1 ]; then
  images+=("tokenpilot/vllm-cpu:0.32.0")
  docker build -f engine-image/cpu-engine.Dockerfile -t "${images[2]}" .
fi

if ! kind get clusters | grep -qx "$cluster"; then
  kind create cluster --config e2e/kind.yaml --name "$cluster" --wait 120s
fi
kind get kubeconfig --name "$cluster" >"$kubeconfig"
cleanup() {
  if [ "$keep" -eq 0 ]; then
    kind delete cluster --name "$cluster"
  else
    echo "run-kind: cluster kept; export KUBECONFIG=$kubeconfig"
  fi
}
trap cleanup EXIT

kind load docker-image --name "$cluster" "${images[@]}"
e2e/advertise-gpus.sh

# Stand-ins for prometheus-operator's CRDs, so the monitoring values can be installed.
kubectl apply --server-side -f e2e/crds/
kubectl wait --for condition=established --timeout=60s -f e2e/crds/

helm upgrade --install tokenpilot helm/tokenpilot \
  --namespace "$namespace" --create-namespace \
  -f e2e/values/monitoring.yaml \
  --wait --timeout 5m
helm test tokenpilot --namespace "$namespace" --timeout 2m

# The samples read a Hugging Face token from Secret hf-token (Llama 3.1 is gated); the
# simulator needs none, so any value does.
kubectl create secret generic hf-token --from-literal=token=hf_not_a_real_token \
  --dry-run=client -o yaml | kubectl apply -f -
# The samples name the GPU vLLM image; on kind's CPU-only nodes they run the engine simulator,
# which takes the same `vllm serve` flags.
.venv/bin/python - "${images[1]}" samples/*.yaml <<'PY' | kubectl apply --server-side -f -
import sys

import yaml

image, paths = sys.argv[1], sys.argv[2:]
docs = []
for path in paths:
    for doc in yaml.safe_load_all(open(path)):
        if doc and doc.get("kind") == "LLMService":
            doc["spec"].setdefault("engine", {})["image"] = image
            docs.append(doc)
print(yaml.safe_dump_all(docs, sort_keys=False))
PY

# The suite finds this cluster through TOKENPILOT_KUBECONFIG (see tests/conftest.py).
TOKENPILOT_KUBECONFIG="$kubeconfig" TOKENPILOT_E2E_RELEASE="$namespace/tokenpilot" \
  .venv/bin/pytest e2e "$@"
