"""The kwok configuration of a dev cluster: its options and the stages of fake nodes and pods.

Readiness of pods the pod runner runs (mapped images) belongs to the pod runner, never to kwok.
The pod-ready stage therefore checks each container image against the image map's regular
expression inside its template: unmapped pods become Running and Ready at once, as kwok fakes do;
mapped pods become Running with their mapped containers waiting (ContainerCreating) and the pod
not Ready. The stage only matches Pending pods, so kwok never touches the pod's conditions again
and the pod runner's status patches stand.
"""

from __future__ import annotations

from typing import Any

import yaml

from tokenpilot_lab.devcluster.nodepools import KWOK_ANNOTATION

NODE_LEASE_DURATION_S = 40

_NODE_CONDITIONS = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
"""

_NODE_INIT = (
    _NODE_CONDITIONS
    + """\
addresses:
- type: InternalIP
  address: {{ NodeIP | Quote }}
- type: Hostname
  address: {{ .metadata.name | Quote }}
capacity:
{{ YAML .status.capacity 1 }}
allocatable:
{{ YAML .status.allocatable 1 }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: KUBELET_VERSION
  kubeProxyVersion: KUBELET_VERSION
  containerRuntimeVersion: {{ printf "kwok://%s" Version | Quote }}
  kernelVersion: ""
  osImage: "tokenpilot dev cluster"
  machineID: ""
  systemUUID: ""
  bootID: ""
phase: Running
"""
)

# `$real` is true when any container runs as a local process under the pod runner.
_POD_READY = """\
{{ $now := Now }}
{{ $pattern := `IMAGE_REGEX` }}
{{ $real := false }}
{{ range .spec.containers }}
{{ if and $pattern (regexMatch $pattern .image) }}{{ $real = true }}{{ end }}
{{ end }}
conditions:
- type: PodScheduled
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: Initialized
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ if $real }}
- type: ContainersReady
  status: "False"
  reason: ContainersNotReady
  message: "the pod runner is starting the container's local process"
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "False"
  reason: ContainersNotReady
  message: "the pod runner is starting the container's local process"
  lastTransitionTime: {{ $now | Quote }}
{{ else }}
- type: ContainersReady
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
{{ range .spec.readinessGates }}
- type: {{ .conditionType | Quote }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
{{ $mapped := and $pattern (regexMatch $pattern .image) }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  restartCount: 0
  {{ if $mapped }}
  ready: false
  started: false
  state:
    waiting:
      reason: ContainerCreating
  {{ else }}
  ready: true
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
  {{ end }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  restartCount: 0
  ready: true
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
""".replace("\\\n", "")

# A Job's pod completes at once, as kwok fakes do, unless the pod runner runs it (a mapped image):
# then its process's exit decides, and this stage changes nothing (the phase it has already).
_POD_COMPLETE = """\
{{ $now := Now }}
{{ $pattern := `IMAGE_REGEX` }}
{{ $real := false }}
{{ range .spec.containers }}
{{ if and $pattern (regexMatch $pattern .image) }}{{ $real = true }}{{ end }}
{{ end }}
{{ if $real }}
phase: Running
{{ else }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  restartCount: 0
  ready: false
  started: false
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: Succeeded
{{ end }}
"""


def _stage(
    name: str,
    kind: str,
    expressions: list[dict[str, Any]],
    next_: dict[str, Any],
    delay: dict[str, int] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": expressions},
        "next": next_,
    }
    if delay:
        spec["delay"] = delay
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": spec,
    }


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return expression


_READY_STATUS = '.status.conditions.[] | select( .type == "Ready" ) | .status'


def stages(image_regex: str, kubelet_version: str) -> list[dict[str, Any]]:
    if "`" in image_regex:
        raise ValueError("image patterns may not contain a backquote")
    not_deleting = _expr(".metadata.deletionTimestamp", "DoesNotExist")
    return [
        _stage(
            "node-initialize",
            "Node",
            [_expr(_READY_STATUS, "NotIn", "True")],
            {"statusTemplate": _NODE_INIT.replace("KUBELET_VERSION", kubelet_version)},
        ),
        _stage(
            "node-heartbeat",
            "Node",
            [_expr(".status.phase", "In", "Running"), _expr(_READY_STATUS, "In", "True")],
            {"statusTemplate": _NODE_CONDITIONS},
            delay={"durationMilliseconds": 20_000, "jitterDurationMilliseconds": 25_000},
        ),
        _stage(
            "pod-ready",
            "Pod",
            [not_deleting, _expr(".status.phase", "In", "Pending")],
            {"statusTemplate": _POD_READY.replace("IMAGE_REGEX", image_regex)},
        ),
        _stage(
            "pod-complete",
            "Pod",
            [
                not_deleting,
                _expr(".status.phase", "In", "Running"),
                _expr(".metadata.ownerReferences.[].kind", "In", "Job"),
            ],
            {"statusTemplate": _POD_COMPLETE.replace("IMAGE_REGEX", image_regex)},
        ),
        _stage(
            "pod-delete",
            "Pod",
            [_expr(".metadata.deletionTimestamp", "Exists")],
            {"delete": True},
        ),
    ]


def render(*, pod_cidr: str, server_address: str, image_regex: str, kubelet_version: str) -> str:
    """The multi-document YAML passed to `kwok --config`."""
    configuration = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "cidr": pod_cidr,
            "nodeIP": "127.0.0.1",
            "manageAllNodes": False,
            "manageNodesWithAnnotationSelector": f"{KWOK_ANNOTATION}=fake",
            "serverAddress": server_address,
            "nodeLeaseDurationSeconds": NODE_LEASE_DURATION_S,
            # kwok v0.8.0 leaves these at zero when options come from a file, then refuses them.
            "nodeLeaseParallelism": 4,
            "podPlayStageParallelism": 4,
            "nodePlayStageParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
        },
    }
    documents = [configuration, *stages(image_regex, kubelet_version)]
    return yaml.safe_dump_all(documents, sort_keys=False, width=1000)
