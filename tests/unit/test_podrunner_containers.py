"""The containers pod mode, pure parts: the `podman run` command line a pod becomes, the Service
names it resolves, and the final phase a pod that is not restarted reaches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tokenpilot_lab.podrunner import containers, imagemap
from tokenpilot_lab.podrunner.status import ContainerState, status_patch

WORK = Path("/state/pods/ns_op_operator")


def operator_pod(**spec: Any) -> dict[str, Any]:
    container = {
        "name": "operator",
        "image": "tokenpilot/operator:0.1.0",
        "securityContext": {
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "kube-api-access-x", "mountPath": containers.SERVICE_ACCOUNT_DIR},
        ],
    }
    return {
        "metadata": {"name": "op", "namespace": "ns", "uid": "0123456789abcdef"},
        "spec": {
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532},
            "containers": [container],
            "volumes": [
                {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                {
                    "name": "kube-api-access-x",
                    "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
                },
            ],
            **spec,
        },
    }


def argv_for(pod: dict[str, Any], **overrides: Any) -> containers.ContainerRun:
    options: dict[str, Any] = {
        "podman": ["podman"],
        "name": "tp-x",
        "cluster_id": "/state",
        "pod": pod,
        "container": pod["spec"]["containers"][0],
        "image": pod["spec"]["containers"][0]["image"],
        "command": None,
        "args": ["run", "--metrics-address=127.9.0.2"],
        "env": {"POD_IP": "127.9.0.2"},
        "mounts": containers.Mounts(
            work_dir=WORK,
            kubeconfig=Path("/state/pods/op.kubeconfig"),
            service_account_dir=Path("/state/pods/op.serviceaccount"),
        ),
        "limits": {"nofile": 20000, "nproc": 32768},
        "hosts": {},
    }
    options.update(overrides)
    return containers.container_argv(**options)


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == flag]


def test_the_chart_security_context_becomes_podman_flags() -> None:
    argv = argv_for(operator_pod()).argv
    assert flag_values(argv, "--user") == ["65532:65532"]
    assert "--read-only" in argv and "--read-only-tmpfs=false" in argv
    assert flag_values(argv, "--cap-drop") == ["ALL"]
    assert flag_values(argv, "--security-opt") == ["no-new-privileges"]
    assert flag_values(argv, "--network") == ["host"]
    assert flag_values(argv, "--pull") == ["never"]
    assert "--rm" in argv
    assert flag_values(argv, "--ulimit") == ["nofile=20000:20000", "nproc=32768:32768"]


def test_the_image_and_args_come_last_and_the_pods_env_and_credentials_are_passed() -> None:
    run = argv_for(operator_pod())
    argv = run.argv
    assert argv[-3:] == ["tokenpilot/operator:0.1.0", "run", "--metrics-address=127.9.0.2"]
    assert "POD_IP=127.9.0.2" in flag_values(argv, "--env")
    assert f"KUBECONFIG={containers.KUBECONFIG_PATH}" in flag_values(argv, "--env")
    volumes = flag_values(argv, "--volume")
    assert f"{WORK}/volumes/tmp:/tmp" in volumes
    assert f"/state/pods/op.serviceaccount:{containers.SERVICE_ACCOUNT_DIR}:ro" in volumes
    assert f"/state/pods/op.kubeconfig:{containers.KUBECONFIG_PATH}:ro" in volumes
    assert run.empty_dirs == [WORK / "volumes" / "tmp"]
    assert f"{containers.CLUSTER_LABEL}=/state" in flag_values(argv, "--label")


def test_a_command_replaces_the_entrypoint() -> None:
    argv = argv_for(operator_pod(), command=["python", "-c"], args=["print(1)"]).argv
    assert flag_values(argv, "--entrypoint") == ['["python", "-c"]']
    assert argv[-2:] == ["tokenpilot/operator:0.1.0", "print(1)"]


def test_a_memory_empty_dir_is_a_tmpfs_of_its_size_limit() -> None:
    pod = operator_pod()
    pod["spec"]["volumes"][0]["emptyDir"] = {"medium": "Memory", "sizeLimit": "2Gi"}
    argv = argv_for(pod).argv
    assert flag_values(argv, "--mount") == [
        "type=tmpfs,destination=/tmp,tmpfs-mode=1777,tmpfs-size=2147483648"
    ]


def test_a_volume_source_the_mode_cannot_provide_is_refused_by_name() -> None:
    pod = operator_pod()
    pod["spec"]["volumes"][0] = {"name": "tmp", "persistentVolumeClaim": {"claimName": "c"}}
    with pytest.raises(containers.ContainerSpecError, match=r"volume 'tmp'.*persistentVolumeClaim"):
        argv_for(pod)


def test_service_names_resolve_to_a_ready_pod_behind_the_service() -> None:
    service = {"metadata": {"name": "tp-metrics"}, "spec": {"selector": {"app": "tp"}}}

    def pod(ip: str, ready: bool, labels: dict[str, str]) -> dict[str, Any]:
        status = "True" if ready else "False"
        return {
            "metadata": {"namespace": "ns", "labels": labels},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": status}]},
        }

    pods = [pod("127.9.0.3", False, {"app": "tp"}), pod("127.9.0.5", True, {"app": "tp"})]
    pods.append(pod("127.9.0.4", True, {"app": "other"}))
    hosts = containers.service_hosts("ns", [service], pods)
    assert hosts == {
        "tp-metrics": "127.9.0.5",
        "tp-metrics.ns": "127.9.0.5",
        "tp-metrics.ns.svc": "127.9.0.5",
        "tp-metrics.ns.svc.cluster.local": "127.9.0.5",
    }


def test_engine_images_are_told_to_bind_the_pod_ip_in_a_container() -> None:
    rule = imagemap.load(None).rule_for("tokenpilot/engine-sim:0.1.0")
    assert rule is not None
    args = imagemap.render_container_args(
        rule, args=["m", "--host", "0.0.0.0"], pod_ip="127.9.0.7", port=8000
    )
    assert args == ["m", "--host", "0.0.0.0", "--host", "127.9.0.7"]
    operator = imagemap.load(None).rule_for("tokenpilot/operator:0.1.0")
    assert operator is not None
    assert imagemap.render_container_args(operator, args=["run"], pod_ip="x", port=1) == ["run"]


def test_a_pod_whose_containers_exited_for_good_reaches_its_final_phase() -> None:
    pod = {
        "spec": {"containers": [{"name": "check", "image": "i"}]},
        "status": {"phase": "Running", "conditions": []},
    }
    done = ContainerState(
        running=False, ready=False, last_exit_code=0, last_finished_at="t", terminated=True
    )
    patch = status_patch(pod, {"check": done}, "now")
    assert patch is not None and patch["status"]["phase"] == "Succeeded"
    (status,) = patch["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 0
    failed = ContainerState(
        running=False, ready=False, last_exit_code=1, last_finished_at="t", terminated=True
    )
    patch = status_patch(pod, {"check": failed}, "now")
    assert patch is not None and patch["status"]["phase"] == "Failed"
    restarting = ContainerState(running=False, ready=False, last_exit_code=1, restart_count=1)
    patch = status_patch(pod, {"check": restarting}, "now")
    assert patch is not None and "phase" not in patch["status"]
