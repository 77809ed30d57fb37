#!/usr/bin/env bash
# The e2e suite on a kind cluster: real kubelets, containerd, a CNI, kube-proxy and CoreDNS.
#
# Usage: e2e/run-kind.sh [--provider docker|podman] [--keep] [--reuse] [--name NAME]
#                        [--cpu-engine] [-- PYTEST ARGS]
#
# Providers (one script, the same steps after the cluster exists):
#   docker  Docker and the published kindest/node image named in e2e/kind.yaml, pulled from
#           its registry; kind's own CNI. The images are built with `docker build` and loaded
#           with `kind load docker-image`. Needs docker, kind, kubectl and helm on PATH (CI:
#           .github/workflows/kind-e2e.yaml).
#   podman  Rootful podman and the node image `make kind` assembles on this machine, with no
#           image registry: kind runs under a podman of its own (storage, run directory and
#           network configuration apart from the images tier's; `tokenpilot kind env`), the
#           cluster is created with disableDefaultCNI and given its pod network by
#           `tokenpilot kind network`, and the images `make images` built are saved from podman
#           and loaded with `kind load image-archive`. Needs root, `make kind`, `make images`.
#   Default: docker when `docker info` answers, else podman.
#
# Then, with either: the project's images on the GPU workers, fake GPUs advertised
# (e2e/advertise-gpus.sh), the chart installed from the operator image (2 replicas, watching
# the samples' namespace and the tests' one), `helm test`, the samples applied with the
# engine-simulator image, and `pytest e2e` against the cluster (e2e/kind/ holds the tests only
# a real node can run). Figures the tests measure are printed at the end.
#
# Options:
#   --provider P   docker or podman (see above)
#   --keep         leave the cluster running afterwards (deleted by default, also on failure)
#   --reuse        use a cluster of the same name if one exists (one kept by --keep); without
#                  it such a cluster is deleted first, so every run starts from a new cluster
#   --cpu-engine   docker only: also build the CPU vLLM image (slow: torch and vLLM wheels)
#   --name NAME    cluster name (default: tokenpilot-e2e)
#   -h, --help     this text
# Env: KIND (the kind binary; podman: the one `make kind` built), KIND_NODE_IMAGE (docker:
# overrides e2e/kind.yaml's kindest/node image).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
say() { echo "run-kind: $*" >&2; }
die() { say "$*"; exit 1; }

provider=""
keep=0
reuse=0
cpu_engine=0
cluster=tokenpilot-e2e
while [ $# -gt 0 ]; do
  case "$1" in
    --provider) provider="${2:-}"; shift ;;
    --provider=*) provider="${1#*=}" ;;
    --keep) keep=1 ;;
    --reuse) reuse=1 ;;
    --cpu-engine) cpu_engine=1 ;;
    --name) cluster="${2:-}"; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) say "unknown option $1"; usage >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$provider" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then provider=docker
  elif command -v podman >/dev/null; then provider=podman
  else die "neither docker (with a running daemon) nor podman found; see --help"; fi
fi
case "$provider" in
  docker | podman) ;;
  *) die "--provider $provider: use docker or podman" ;;
esac
[ -x .venv/bin/pytest ] || die "no .venv; run \`make venv\` first"

started=$(date +%s)
phase_started=$started
phase() {
  local now
  now=$(date +%s)
  say "$1 ($((now - phase_started)) s)"
  phase_started=$now
}

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/tokenpilot/Chart.yaml)
images=("tokenpilot/operator:$version" "tokenpilot/engine-sim:$version")
work="$(mktemp -d "${TMPDIR:-/tmp}/tokenpilot-kind.XXXXXX")"
kubeconfig="$work/kubeconfig"
report="$work/report.json"
config="$work/kind.yaml"
# Until there is a cluster to clean up: cleanup() below replaces this trap and removes $work too.
trap 'rm -rf "$work"' EXIT
export KUBECONFIG="$kubeconfig"
# The pinned kubectl and helm (`make tools`) first, where they exist.
PATH="$PWD/.venv/bin:$PATH"

if [ "$provider" = docker ]; then
  for tool in docker kubectl helm; do
    command -v "$tool" >/dev/null || die "$tool not found on PATH"
  done
  kind="${KIND:-kind}"
  command -v "$kind" >/dev/null || die "kind not found on PATH (go install sigs.k8s.io/kind@<version>, or set KIND)"
  docker build -f engine-image/tokenpilot.Dockerfile --target operator -t "${images[0]}" .
  docker build -f engine-image/tokenpilot.Dockerfile --target engine-sim -t "${images[1]}" .
  if [ "$cpu_engine" -eq 1 ]; then
    images+=("tokenpilot/vllm-cpu:$version")
    docker build -f engine-image/cpu-engine.Dockerfile -t "${images[2]}" .
  fi
  node_image="${KIND_NODE_IMAGE:-}"
  cp e2e/kind.yaml "$config"
else
  [ "$cpu_engine" -eq 0 ] || die "--cpu-engine: with podman the e2e suite runs the CPU engine in the image tier (e2e/test_images.py)"
  [ "$(id -u)" -eq 0 ] || die "the podman provider needs rootful podman; run as root"
  command -v podman >/dev/null || die "podman not found; run hack/install-system-deps.sh"
  # The images tier's podman (default storage) has the project's images; check before kind's
  # settings take over the environment.
  for image in "${images[@]}"; do
    podman image exists "$image" || die "podman has no $image; run \`make images\`"
  done
  podman save --quiet --format docker-archive -m -o "$work/images.tar" "${images[@]}"
  env_lines="$(.venv/bin/tokenpilot kind env)" || die "kind is not ready; run \`make kind\`"
  eval "$env_lines"
  kind="${KIND:-kind}"
  node_image="$TOKENPILOT_KIND_NODE_IMAGE"
  # kind's own CNI image cannot be had here: the pod network comes after creation.
  .venv/bin/python - e2e/kind.yaml "$config" <<'PY'
import sys

import yaml

source, target = sys.argv[1:]
config = yaml.safe_load(open(source))
config.setdefault("networking", {})["disableDefaultCNI"] = True
yaml.safe_dump(config, open(target, "w"), sort_keys=False)
PY
fi
phase "images ready ($provider)"

runtime=("$provider")
node_containers() { "${runtime[@]}" ps -a --filter "label=io.x-k8s.kind.cluster=$cluster" --format '{{.Names}}'; }
cleanup() {
  local rc=$?
  if [ "$keep" -eq 1 ]; then
    say "cluster $cluster kept; export KUBECONFIG=$kubeconfig"
    [ "$provider" = podman ] && say "and its podman: eval \"\$(.venv/bin/tokenpilot kind env)\""
    exit "$rc"
  fi
  "$kind" delete cluster --name "$cluster" >&2 || rc=1
  if [ "$provider" = podman ]; then
    # kind leaves its network; its bridge and DNS server go with it.
    podman network rm --force kind >/dev/null 2>&1 || true
    left="$(podman ps -a --format '{{.Names}}')"
    if [ -n "$left" ]; then
      say "containers left in kind's podman storage after delete: $left"
      rc=1
    fi
    # The network's DNS server (dnsmasq, from the dnsname plugin) stops with its last container.
    if pgrep -f "cni/dnsname/kind/" >/dev/null; then
      say "the kind network's dnsmasq is still running after delete"
      rc=1
    fi
  else
    left="$(node_containers)"
    [ -z "$left" ] || { say "node containers left after delete: $left"; rc=1; }
  fi
  rm -rf "$work"
  say "done in $(($(date +%s) - started)) s (exit $rc)"
  exit "$rc"
}
trap cleanup EXIT

exists=0
"$kind" get clusters 2>/dev/null | grep -qx "$cluster" && exists=1
if [ "$exists" -eq 1 ] && [ "$reuse" -eq 0 ]; then
  say "cluster $cluster exists (left by an earlier run): deleting it to start afresh (--reuse keeps it)"
  "$kind" delete cluster --name "$cluster" >&2
  exists=0
fi
if [ "$exists" -eq 1 ]; then
  say "cluster $cluster exists: using it (--reuse)"
else
  create=(create cluster --config "$config" --name "$cluster")
  [ -n "$node_image" ] && create+=(--image "$node_image")
  if [ "$provider" = docker ]; then
    "$kind" "${create[@]}" --wait 180s
  else
    "$kind" "${create[@]}"
  fi
fi
"$kind" get kubeconfig --name "$cluster" >"$kubeconfig"
if [ "$provider" = podman ]; then
  .venv/bin/tokenpilot kind network --kubeconfig "$kubeconfig" --runtime podman
fi
kubectl wait --for=condition=Ready nodes --all --timeout=180s
phase "cluster $cluster ready"

mapfile -t workers < <(kubectl get nodes -l tokenpilot.dev/fake-gpu=true -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
[ ${#workers[@]} -gt 0 ] || die "no worker labelled tokenpilot.dev/fake-gpu=true; is e2e/kind.yaml the config?"
nodes_flag="$(IFS=,; echo "${workers[*]}")"
if [ "$provider" = docker ]; then
  "$kind" load docker-image --name "$cluster" --nodes "$nodes_flag" "${images[@]}"
else
  "$kind" load image-archive --name "$cluster" --nodes "$nodes_flag" "$work/images.tar"
  rm -f "$work/images.tar"
  # podman names them localhost/tokenpilot/...; pods ask for tokenpilot/..., which containerd
  # reads as docker.io/tokenpilot/....
  for node in "${workers[@]}"; do
    for image in "${images[@]}"; do
      podman exec "$node" ctr --namespace=k8s.io images tag --force "localhost/$image" "docker.io/$image" >/dev/null
    done
  done
fi
phase "images loaded on ${workers[*]}"

e2e/advertise-gpus.sh

# Stand-ins for prometheus-operator's CRDs, so the monitoring values can be installed.
kubectl apply --server-side -f e2e/crds/
kubectl wait --for condition=established --timeout=60s -f e2e/crds/

namespace=tokenpilot-system
samples=tokenpilot-samples
tests=tokenpilot-e2e
for ns in "$namespace" "$samples" "$tests"; do
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # Pod Security `restricted`: the operator, the engines and the tests' pods are admitted.
  kubectl label --overwrite namespace "$ns" pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/enforce-version=latest >/dev/null
done
helm upgrade --install tokenpilot helm/tokenpilot \
  --namespace "$namespace" \
  -f e2e/values/monitoring.yaml \
  --set "operator.watchNamespaces={$samples,$tests}" \
  --wait --timeout 5m
helm test tokenpilot --namespace "$namespace" --timeout 3m
phase "chart installed and tested"

# The samples read a Hugging Face token from Secret hf-token (Llama 3.1 is gated); the
# simulator needs none, so any value does.
kubectl -n "$samples" create secret generic hf-token --from-literal=token=hf_not_a_real_token \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# The samples name the GPU vLLM image; on kind's CPU-only nodes they run the engine simulator,
# which takes the same `vllm serve` flags.
.venv/bin/python - "${images[1]}" samples/*.yaml <<'PY' | kubectl apply -n "$samples" --server-side -f -
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
phase "samples applied"

# The suite finds this cluster through TOKENPILOT_KUBECONFIG (see tests/conftest.py) and the
# kind tier's settings through TOKENPILOT_KIND_* (see e2e/kind/conftest.py).
status=0
TOKENPILOT_KUBECONFIG="$kubeconfig" TOKENPILOT_E2E_RELEASE="$namespace/tokenpilot" \
  TOKENPILOT_KIND_PROVIDER="$provider" TOKENPILOT_KIND_CLUSTER="$cluster" \
  TOKENPILOT_KIND_SAMPLES="$samples" TOKENPILOT_KIND_NAMESPACE="$tests" \
  TOKENPILOT_KIND_ENGINE_IMAGE="${images[1]}" TOKENPILOT_KIND_REPORT="$report" \
  .venv/bin/pytest e2e -p no:cacheprovider "$@" || status=$?
phase "pytest e2e (exit $status)"
if [ -s "$report" ]; then
  say "measured on the kind cluster:"
  .venv/bin/python -c 'import json, sys; [print(f"  {k}: {v}") for k, v in json.load(open(sys.argv[1])).items()]' "$report" >&2
fi
exit "$status"
