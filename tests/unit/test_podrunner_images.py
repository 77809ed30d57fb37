"""The pod runner's default image map for the project's own images, the kubelet's `$(VAR)`
expansion of args, and the TokenRequest it sends for a pod's ServiceAccount."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot_lab.podrunner import credentials, imagemap

CHART_ARGS = ["run", "--liveness=http://$(POD_IP):8080/healthz", "--metrics-port=9100"]


@pytest.mark.parametrize(
    "image",
    [
        "tokenpilot/operator:0.1.0",
        "ghcr.io/acme/tokenpilot/operator:0.1.0",
        "tokenpilot/operator@sha256:" + "a" * 64,
    ],
)
def test_the_operator_image_runs_the_tokenpilot_command_with_the_pod_args(image: str) -> None:
    rule = imagemap.load(None).rule_for(image)
    assert rule is not None, image
    args = [imagemap.expand_vars(a, {"POD_IP": "127.9.0.4"}) for a in CHART_ARGS]
    argv = imagemap.render_command(rule, args=args, pod_ip="127.9.0.4", port=8080, python="/py")
    assert argv == [
        "/py",
        "-m",
        "tokenpilot.cli",
        "run",
        "--liveness=http://127.9.0.4:8080/healthz",
        "--metrics-port=9100",
    ]


@pytest.mark.parametrize(
    "image", ["tokenpilot/engine-sim:0.1.0", "registry.local:5000/tokenpilot/engine-sim:dev"]
)
def test_the_engine_simulator_image_binds_the_pod_ip_and_port(image: str) -> None:
    rule = imagemap.load(None).rule_for(image)
    assert rule is not None, image
    argv = imagemap.render_command(
        rule, args=["--model", "m"], pod_ip="127.9.0.5", port=8000, python="/py"
    )
    assert argv[3:] == ["engine-sim", "--model", "m", "--host", "127.9.0.5", "--port", "8000"]


@pytest.mark.parametrize("image", ["tokenpilot/operator", "tokenpilot/operator-tools:1", "x:1"])
def test_other_images_stay_fakes(image: str) -> None:
    assert imagemap.load(None).rule_for(image) is None


@pytest.mark.parametrize(
    ("word", "expanded"),
    [
        ("http://$(POD_IP):8080", "http://127.0.0.9:8080"),
        ("$(POD_IP)$(NS)", "127.0.0.9default"),
        ("$(UNSET) stays", "$(UNSET) stays"),  # undefined: left as written, as the kubelet does
        ("$$(POD_IP)", "$(POD_IP)"),  # escaped
        ("cost $$5", "cost $5"),
        ("$POD_IP", "$POD_IP"),  # only the $(...) form is a reference
    ],
)
def test_args_expand_container_env_as_the_kubelet_does(word: str, expanded: str) -> None:
    assert imagemap.expand_vars(word, {"POD_IP": "127.0.0.9", "NS": "default"}) == expanded


@given(st.text(alphabet=st.characters(blacklist_characters="$")))
def test_words_without_a_dollar_are_untouched(word: str) -> None:
    assert imagemap.expand_vars(word, {"A": "b"}) == word


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "op-1", "namespace": "ns", "uid": "u-1"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "account", "wants"),
    [
        ({"serviceAccountName": "tp-operator"}, "tp-operator", True),
        ({}, "default", True),
        ({"serviceAccountName": "tp", "automountServiceAccountToken": False}, "tp", False),
        ({"automountServiceAccountToken": True}, "default", True),
    ],
)
def test_the_token_is_for_the_pods_service_account_unless_automount_is_off(
    spec: dict[str, Any], account: str, wants: bool
) -> None:
    assert credentials.service_account(pod(spec)) == account
    assert credentials.wants_token(pod(spec)) is wants


def test_the_token_is_bound_to_the_pod() -> None:
    request = credentials.token_request(pod({}))
    assert request["kind"] == "TokenRequest"
    assert request["spec"]["boundObjectRef"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "op-1",
        "uid": "u-1",
    }
    assert request["spec"]["expirationSeconds"] == credentials.TOKEN_TTL_S
