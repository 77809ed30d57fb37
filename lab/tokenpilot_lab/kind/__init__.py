"""kind on a machine with podman and no image registry: the node image, the kind binary, the
podman environment kind runs in, and the pod network the nodes get after creation.

- `versions`: what is built (kubeadm, kubelet, kube-proxy, CoreDNS, kind) beside the dev
  cluster's control-plane binaries, in the same per-user cache.
- `nodeimage` (the plan, pure) and `nodebuild` (its I/O): a kind node image from Debian
  packages, kind's own base files (taken from the `sigs.k8s.io/kind` module download at build
  time) and those binaries.
- `podman`: a podman whose storage, run directory and network configuration belong to kind
  alone, so the images tier's podman is never disturbed.
- `network`: the pod network (ptp and host-local from each node's podCIDR, a route per peer
  node), since kind's own CNI image cannot be had here; `plan` is pure, `apply` does the I/O.

`e2e/run-kind.sh` drives these through `tokenpilot kind`. Nothing here is needed by the
operator.
"""
