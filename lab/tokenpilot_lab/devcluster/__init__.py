"""A real local Kubernetes control plane for tests and demos, with fake GPU nodes.

Every piece is a local process: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok (fake nodes and pod lifecycles) and the pod runner (mapped images as local processes).
Binaries are built from the Go module proxy into a per-user cache (`build`), and a cluster lives
in one state directory (`cluster`). Nothing here is needed by the operator itself.
"""
