#!/usr/bin/env bash
# Advertise nvidia.com/gpu on nodes that have no device plugin, the documented way to add an
# extended resource: a JSON patch of the node's status capacity. The kubelet copies capacity
# to allocatable and keeps the extended resource on its status updates. Each node labelled
# tokenpilot.dev/fake-gpu=true gets the count from its nvidia.com/gpu.count label.
# Usage: e2e/advertise-gpus.sh   (uses the current kubeconfig)
set -euo pipefail
nodes=$(kubectl get nodes -l tokenpilot.dev/fake-gpu=true -o name)
if [ -z "$nodes" ]; then
  echo "advertise-gpus: no node labelled tokenpilot.dev/fake-gpu=true; is this the e2e cluster?" >&2
  exit 1
fi
for node in $nodes; do
  count=$(kubectl get "$node" -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.count}')
  if ! [[ "$count" =~ ^[0-9]+$ ]]; then
    echo "advertise-gpus: $node has no numeric nvidia.com/gpu.count label" >&2
    exit 1
  fi
  kubectl patch "$node" --subresource=status --type=json \
    -p "[{\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$count\"}]" >/dev/null
  echo "advertise-gpus: $node nvidia.com/gpu=$count"
done
# Bounded wait until the scheduler can see the GPUs as allocatable.
for _ in $(seq 1 30); do
  missing=0
  for node in $nodes; do
    got=$(kubectl get "$node" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')
    [ -n "$got" ] || missing=1
  done
  [ "$missing" -eq 0 ] && exit 0
  sleep 1
done
echo "advertise-gpus: allocatable nvidia.com/gpu did not appear within 30 s" >&2
exit 1
