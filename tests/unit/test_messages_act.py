"""Refusals that send the user the right way: one sentence with the fix, the fix that applies
where the user is (the operator or `tokenpilot plan`), and the long reasons kept out of the
conditions."""

from __future__ import annotations

import pytest
from _llms import CLUSTER, by_name, by_product, node, service

from tokenpilot.api.llmservice import LLMService
from tokenpilot.cli import main
from tokenpilot.core.errors import TokenPilotError
from tokenpilot.core.render_plan import plan
from tokenpilot.core.status import desired_status

NOW = "2026-01-01T00:00:00Z"
# A condition message is one sentence a person reads in `kubectl describe`.
MAX_CONDITION_CHARS = 300


def _refusal(svc: LLMService, nodes=CLUSTER) -> TokenPilotError:  # type: ignore[no-untyped-def]
    with pytest.raises(TokenPilotError) as err:
        plan(svc, nodes=nodes, by_name=by_name, by_product=by_product, service_monitor_served=False)
    return err.value


def test_a_node_of_an_unprofiled_product_asks_for_its_profile() -> None:
    # The nodes have GPUs to spare; what is missing is a profile for their product.
    refusal = _refusal(service(), nodes=(node("pcie-0", "NVIDIA-H100-PCIe", 8),))
    message = str(refusal)
    assert "NVIDIA-H100-PCIe" in message and "profile" in message
    assert "tensorParallelSize" not in message and "allocatable" not in message


def test_plan_points_at_its_own_option_for_an_unknown_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["plan", "--gpu", "B200", "--model", "llama-3.1-8b", "--itl-p99", "50ms"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--profiles-dir" in err and "ConfigMap" not in err


@pytest.mark.parametrize("gpu", ["A100", "a100"])
def test_a_bare_a100_is_refused_with_the_two_choices(
    capsys: pytest.CaptureFixture[str], gpu: str
) -> None:
    code = main(["plan", "--gpu", gpu, "--model", "llama-3.1-8b", "--itl-p99", "50ms"])
    err = capsys.readouterr().err
    assert code == 2
    assert "A100-40GB" in err and "A100-80GB" in err and "ambiguous" in err


def test_calibrate_refuses_a_bare_a100_before_it_measures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Nothing listens on the endpoint: the refusal comes before the engine is asked anything,
    # rather than after minutes of measuring, or a profile without the datasheet it meant.
    argv = ["calibrate", "--endpoint", "http://127.0.0.1:1", "--model", "llama-3.1-8b"]
    code = main([*argv, "--gpu-name", "A100"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--gpu-name" in err and "A100-40GB or A100-80GB" in err
    assert "127.0.0.1:1" not in err


def test_an_infeasible_spec_says_it_once_and_briefly() -> None:
    svc = service(model__shape={"preset": "llama-3.1-70b"})
    refusal = _refusal(svc)
    status = desired_status(
        svc, deployment=None, sku_name=None, tuning=None, problem=str(refusal), now=NOW
    )
    conditions = status["conditions"]
    assert status["phase"] == "Infeasible"
    assert len(str(refusal)) <= MAX_CONDITION_CHARS, str(refusal)
    assert str(refusal).count("; ") <= 2, "one sentence: what is wrong and the fix"
    carrying = [c["type"] for c in conditions if c.get("message") == str(refusal)]
    # Ready says why it is not ready, and the Infeasible condition says the same; no others.
    assert carrying == ["Ready", "Infeasible"], carrying
    assert all(len(c.get("message", "")) <= MAX_CONDITION_CHARS for c in conditions)
