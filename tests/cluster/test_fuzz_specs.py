"""Fuzzed LLMServices against the real API server and a running operator.

Hypothesis writes 500 bodies: valid ones, near-valid ones (one field off: a negative count, an
unknown enum, a bad duration, a conflicting pair) and hostile ones (huge numbers, unicode, deep
nesting, wrong types). Each ends in exactly one of:

- refused by the API server with 422 (or 400 for a body it cannot decode), naming the field;
- accepted, and brought by the operator to Ready, Infeasible or Degraded with a reason, its
  objects all there (Ready, Degraded) or none of them (Infeasible).

The operator (one process for the whole run) never logs a traceback and never dies. Accepted
services are settled in batches so the dev cluster's 20 GPUs are never oversubscribed by
earlier ones. Counterexamples found so far are kept as @example.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _operator_harness import client_for, install_crd, operator_process
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot_lab.devcluster.pytest_plugin import within

pytestmark = pytest.mark.cluster

NUM_SPECS = int(os.environ.get("TOKENPILOT_FUZZ_SPECS", "500"))
BATCH = 8  # accepted services settled together (1 GPU each at most: 8 of the cluster's 20)
SETTLE_S = 60.0
SETTLED = {"Ready", "Infeasible", "Degraded"}
IMAGE = "fuzz.example/vllm-openai:1"  # kwok fakes it: Ready at once, nothing to run
OWNED = (("apps/v1", "Deployment"), ("v1", "Service"), ("policy/v1", "PodDisruptionBudget"))

# --- bodies -----------------------------------------------------------------------------------

durations = st.builds(
    lambda n, unit: f"{n}{unit}", st.integers(1, 5000), st.sampled_from(["ms", "s", "m"])
)
ints_or_auto = st.one_of(st.just("auto"), st.integers(1, 65536))


@st.composite
def valid_spec(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {
            "name": draw(st.text(min_size=1, max_size=40)),
            "source": draw(
                st.sampled_from(
                    [
                        "hf://meta-llama/Llama-3.1-8B-Instruct",
                        "hf://Qwen/Qwen2.5-7B-Instruct",
                        "pvc://models/llama",
                        "s3://bucket/llama",
                    ]
                )
            ),
            "shape": {"preset": draw(st.sampled_from(["llama-3.1-8b", "llama-3.2-1b"]))},
        },
        "engine": {
            "image": IMAGE,
            "maxModelLen": draw(st.sampled_from([2048, 8192, 32768, 131072])),
            "tensorParallelSize": draw(st.sampled_from([1, 1, 1, 2])),
        },
        "accelerator": {"sku": draw(st.sampled_from(["auto", "H100-80GB", "L40S", "B200"]))},
        "batching": {
            "maxNumBatchedTokens": draw(ints_or_auto),
            "maxNumSeqs": draw(ints_or_auto),
            "profile": draw(st.sampled_from(["interactive", "balanced", "throughput"])),
        },
        "replicas": draw(st.integers(0, 1)),
    }
    if draw(st.booleans()):
        spec["slo"] = {"ttftP99": draw(durations), "itlP99": draw(durations)}
    if draw(st.booleans()):
        low = draw(st.integers(1, 2))
        spec["autoscaling"] = {
            "enabled": True,
            "minReplicas": 1,
            "maxReplicas": draw(st.integers(low, 3)),
            "interval": draw(st.sampled_from(["1s", "5s"])),
        }
    return spec


# JSON values only: an infinite or NaN float has no JSON form (json.dumps would send
# "Infinity", which the API server cannot even parse as an object, so no field is named).
JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
FIELDS = [
    ("model", "name"),
    ("model", "source"),
    ("engine", "maxModelLen"),
    ("engine", "tensorParallelSize"),
    ("engine", "gpuMemoryUtilization"),
    ("engine", "extraArgs"),
    ("accelerator", "sku"),
    ("accelerator", "gpusPerReplica"),
    ("batching", "maxNumBatchedTokens"),
    ("batching", "maxNumSeqs"),
    ("batching", "profile"),
    ("autoscaling", "minReplicas"),
    ("autoscaling", "maxReplicas"),
    ("autoscaling", "interval"),
    ("slo", "itlP99"),
    ("replicas",),
]


def _nested(depth: int) -> Any:
    out: Any = "bottom"
    for _ in range(depth):
        out = {"x": out}
    return out


hostile_value = st.one_of(
    st.integers(min_value=2**31, max_value=2**70),
    st.integers(max_value=-1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=300),
    st.integers(50, 300).map(_nested),
    JUNK,
)


@st.composite
def mutated_spec(draw: st.DrawFn) -> dict[str, Any]:
    """A valid spec with one field (or a conflicting pair) set to something else."""
    spec = draw(valid_spec())
    choice = draw(st.integers(0, 3))
    if choice == 0:  # conflicting fields
        conflict = draw(st.sampled_from(["seqs", "scale", "tp", "prefill"]))
        if conflict == "seqs":
            spec["batching"].update(maxNumBatchedTokens=256, maxNumSeqs=512)
        elif conflict == "scale":
            spec["autoscaling"] = {"enabled": True, "minReplicas": 3, "maxReplicas": 2}
        elif conflict == "tp":
            spec["engine"]["tensorParallelSize"] = 4
            spec["accelerator"]["gpusPerReplica"] = 2
        else:
            spec["batching"].update(chunkedPrefill=False, maxNumBatchedTokens=512)
        return spec
    path = draw(st.sampled_from(FIELDS))
    value = draw(hostile_value)
    target = spec
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    if choice == 3:  # and a field the API does not have
        spec[draw(st.text(min_size=1, max_size=12))] = draw(JUNK)
    return spec


bodies = st.one_of(valid_spec(), mutated_spec(), mutated_spec())

# --- outcomes ---------------------------------------------------------------------------------


def _phase(client: KubeClient, namespace: str, name: str) -> tuple[str | None, str]:
    body = client.get(LLMSERVICES.path(namespace, name)) or {}
    st_ = body.get("status") or {}
    current = st_.get("observedGeneration") == (body.get("metadata") or {}).get("generation")
    words = "; ".join(
        f"{c.get('type')}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}"
        for c in st_.get("conditions") or []
    )
    return (st_.get("phase") if current else None), words


def _owned(client: KubeClient, namespace: str, name: str) -> list[bool]:
    return [client.get(RESOURCES[k].path(namespace, name)) is not None for k in OWNED]


class Fuzz:
    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.count = 0
        self.pending: list[str] = []
        self.specs: dict[str, dict[str, Any]] = {}
        self.outcomes: Counter[str] = Counter()
        # The first failure, kept: Hypothesis replays the example that failed, and the replay
        # would settle a batch whose services were already deleted, failing for a reason of
        # its own ("no current status") instead of the one found.
        self.failure: str | None = None

    def submit(self, spec: dict[str, Any]) -> None:
        if self.failure is not None:
            raise AssertionError(self.failure)
        self.count += 1
        name = f"fuzz-{self.count}"
        body = {
            "apiVersion": "serving.tokenpilot.dev/v1alpha1",
            "kind": "LLMService",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        }
        try:
            self.client.request("POST", LLMSERVICES.path(self.namespace), body=body)
        except KubeError as refused:
            assert refused.status in (400, 422), f"{refused.status}: {refused.message}"
            assert "spec" in refused.message or "metadata" in refused.message, refused.message
            self.outcomes[f"refused {refused.status}"] += 1
            return
        self.pending.append(name)
        self.specs[name] = spec
        if len(self.pending) >= BATCH:
            self.settle()

    def _pods(self, name: str) -> list[str]:
        """Each of the service's pods as phase and the scheduler's word, for a failure."""
        pods = self.client.request(
            "GET",
            RESOURCES[("v1", "Pod")].path(self.namespace),
            query={"labelSelector": f"serving.tokenpilot.dev/llmservice={name}"},
        )["items"]
        out = []
        for pod in pods:
            st_ = pod.get("status") or {}
            scheduled = [c for c in st_.get("conditions") or [] if c.get("type") == "PodScheduled"]
            words = scheduled[0].get("message", "") if scheduled else ""
            out.append(f"{pod['metadata']['name']} {st_.get('phase')} {words}".strip())
        return out

    def settle(self) -> None:
        try:
            self._settle()
        except AssertionError as error:
            self.failure = str(error)
            raise

    def _settled(self, name: str, deadline: float) -> tuple[str | None, str]:
        """The service's phase once current and settled (or as it is at `deadline`). The
        autoscaler may move spec.replicas at any time (to minReplicas, say), and until the
        operator has reconciled that generation the status is not current."""
        last = [_phase(self.client, self.namespace, name)]

        def settled() -> bool:
            last[0] = _phase(self.client, self.namespace, name)
            return last[0][0] in SETTLED

        within(settled, timeout_s=max(0.0, deadline - time.monotonic()), interval_s=0.5)
        return last[0]

    def _settle(self) -> None:
        deadline = time.monotonic() + SETTLE_S
        phases = {n: self._settled(n, deadline) for n in self.pending}
        unsettled = {
            n: (*phases[n], self._pods(n)) for n in self.pending if phases[n][0] not in SETTLED
        }
        # The example Hypothesis reports is the one that filled the batch, so the unsettled
        # services' own specs are named here.
        assert not unsettled, (
            f"not Ready, Infeasible or Degraded in {SETTLE_S:.0f} s: {unsettled}; their specs: "
            + json.dumps({n: self.specs[n] for n in unsettled})
        )
        for name in self.pending:
            phase, words = self._settled(name, time.monotonic() + SETTLE_S)
            assert phase in SETTLED, f"{name}: settled, then {phase} for {SETTLE_S:.0f} s"
            assert words, f"{name}: {phase} without a condition saying why"
            owned = _owned(self.client, self.namespace, name)
            if phase == "Infeasible":
                assert owned == [False] * 3, f"{name}: Infeasible but half-applied {owned}"
            else:
                assert owned == [True] * 3, f"{name}: {phase} but objects {owned}"
            self.outcomes[f"accepted, {phase}"] += 1
            self.client.request("DELETE", LLMSERVICES.path(self.namespace, name))
        self.pending = []


def test_fuzzed_specs_are_refused_by_field_or_settle_with_a_reason(
    kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    client = client_for(kubeconfig)
    install_crd(client)
    log = tmp_path / "operator.log"
    operator = operator_process(kubeconfig, namespace, log)
    fuzz = Fuzz(client, namespace)
    try:

        @settings(
            max_examples=NUM_SPECS,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            # No shrinking: services are settled in batches, so a failure belongs to a batch
            # and is reported with each service's status and pods, not to the spec that
            # happened to fill the batch.
            phases=(Phase.explicit, Phase.generate),
        )
        @given(bodies)
        # Counterexamples found, kept: a character beyond the BMP in a field the operator
        # renders (server-side apply of the JSON the client wrote, with surrogate-pair escapes,
        # was refused as YAML, and the service never got a status). Edge cases too: a spec
        # without a shape, bounds the wrong way round.
        @example(
            {
                "model": {
                    "name": "llama \U0001f600",
                    "source": "hf://meta-llama/Llama-3.1-8B-Instruct",
                    "shape": {"preset": "llama-3.1-8b"},
                },
                "engine": {"image": IMAGE},
                "replicas": 0,
            }
        )
        @example(
            {
                "model": {
                    "name": "+\x0c\U0001e96e\x88",  # a C1 control: no status either
                    "source": "hf://meta-llama/Llama-3.1-8B-Instruct",
                    "shape": {"preset": "llama-3.1-8b"},
                },
                "engine": {"image": IMAGE},
                "replicas": 0,
            }
        )
        @example({"model": {"name": "x", "source": "hf://a/b"}, "replicas": 0})
        @example(
            {
                "model": {"name": "x", "source": "hf://a/b", "shape": {"preset": "llama-3.1-8b"}},
                "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 2},
                "engine": {"image": IMAGE},
            }
        )
        def probe(spec: dict[str, Any]) -> None:
            fuzz.submit(spec)

        probe()
        fuzz.settle()
        assert operator.poll() is None, "the operator died"
    finally:
        operator.send_signal(signal.SIGTERM)
        operator.wait(30)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[text.index("Traceback") - 1500 :][:5000]
    print("\nfuzz:", fuzz.count, "specs:", json.dumps(dict(sorted(fuzz.outcomes.items()))))
    assert fuzz.count >= NUM_SPECS
