"""The local pod runner: a tiny kubelet for the dev cluster's fake nodes.

For each pod bound to a fake node whose container image matches the image-to-command mapping,
it runs the mapped local command with the container's args and env, bound to the pod IP (a
127.x.y.z address from kwok) and the container port, probes it as the kubelet would, and writes
the result into the pod's status: Ready follows the real process's readiness probe. Pods with
unmapped images are left to kwok, which fakes them.
"""
