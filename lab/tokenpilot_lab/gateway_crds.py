"""Where the lab finds the CRDs of the Gateway API and its Inference Extension, as published.

The InferencePool CRD (Gateway API Inference Extension v1.6.0) is kept as data beside the
checkout, in `<repo>/../shared/third_party/` (or `$TOKENPILOT_THIRD_PARTY`), because the module
proxy does not serve that module. The Gateway API's own CRDs come from the module
`sigs.k8s.io/gateway-api` itself: `go mod download` puts it in the Go module cache and the CRDs
are read from its `config/crd/standard/`. Each function returns paths to install or to read as
a user would; a file that cannot be had raises FileNotFoundError saying where it was looked for
and what to do.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tokenpilot_lab.devcluster.build import find_go, go_env
from tokenpilot_lab.host.errors import ToolchainMissing

THIRD_PARTY_ENV = "TOKENPILOT_THIRD_PARTY"
INFERENCE_EXTENSION_DIR = "gateway-api-inference-extension"
INFERENCE_POOL_CRD = "inference.networking.k8s.io_inferencepools.yaml"
GATEWAY_API_MODULE = "sigs.k8s.io/gateway-api"
GATEWAY_API_VERSION = "v1.7.0"
GATEWAY_API_CRD_DIR = Path("config") / "crd" / "standard"
# A cold download of the module is about 3 MB; a slow proxy still answers well inside this.
GO_TIMEOUT_S = 600


def repo_root() -> Path:
    # lab/tokenpilot_lab/gateway_crds.py -> repository root
    return Path(__file__).resolve().parents[2]


def third_party_dir() -> Path:
    """$TOKENPILOT_THIRD_PARTY, else `<repo>/../shared/third_party`."""
    override = os.environ.get(THIRD_PARTY_ENV)
    return Path(override) if override else repo_root().parent / "shared" / "third_party"


def inference_pool_crd() -> Path:
    """The InferencePool CRD (inference.networking.k8s.io/v1) kept in the third-party folder."""
    path = third_party_dir() / INFERENCE_EXTENSION_DIR / INFERENCE_POOL_CRD
    if not path.is_file():
        source = f"${THIRD_PARTY_ENV}" if os.environ.get(THIRD_PARTY_ENV) else "the default"
        raise FileNotFoundError(
            f"the InferencePool CRD is not at {path} ({source}); put the third-party folder "
            f"there (with {INFERENCE_EXTENSION_DIR}/{INFERENCE_POOL_CRD}) or set "
            f"{THIRD_PARTY_ENV} to the folder that holds it"
        )
    return path


def _go_json(args: list[str]) -> tuple[dict[str, Any], str]:
    """Run `go <args>` outside any module; its JSON answer (empty if none) and its stderr."""
    try:
        go = find_go()
    except ToolchainMissing as exc:
        raise FileNotFoundError(f"the Gateway API CRDs come from its Go module: {exc}") from exc
    # An empty folder: a go.mod or go.work around the caller must not change what is fetched.
    with tempfile.TemporaryDirectory(prefix="tokenpilot-gateway-api-") as cwd:
        try:
            proc = subprocess.run(
                [go.path, *args],
                cwd=cwd,
                env=go_env(go),
                capture_output=True,
                text=True,
                timeout=GO_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise FileNotFoundError(
                f"`go {' '.join(args)}` ran longer than {GO_TIMEOUT_S} s; is the module proxy "
                "(GOPROXY) reachable?"
            ) from exc
    try:
        answer = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except json.JSONDecodeError:
        answer = {}
    return answer, proc.stderr.strip()


def gateway_api_dir(version: str = GATEWAY_API_VERSION) -> Path:
    """The folder of `sigs.k8s.io/gateway-api@version` in the Go module cache, downloaded if
    it is not there yet."""
    module = f"{GATEWAY_API_MODULE}@{version}"
    downloaded, stderr = _go_json(["mod", "download", "-json", module])
    directory = downloaded.get("Dir")
    if directory is None:
        # The module's go.mod may ask for a newer Go than the one installed (v1.7.0 asks for
        # 1.27): `go mod download` then reports an error, although it has fetched, checked and
        # unpacked the module; the CRDs are YAML and need no toolchain, so the unpacked folder
        # is asked for. Any other failure leaves no folder, and its error is reported.
        listed, _ = _go_json(["list", "-m", "-json", module])
        directory = listed.get("Dir")
    if directory is None or not Path(directory).is_dir():
        error = downloaded.get("Error") or stderr or "no folder in its answer"
        raise FileNotFoundError(
            f"`go mod download {module}` did not give the module's folder ({error}); check "
            "that the module proxy (GOPROXY) serves it"
        )
    return Path(directory)


def gateway_api_crds(
    names: Iterable[str] = ("httproutes",), version: str = GATEWAY_API_VERSION
) -> list[Path]:
    """The standard-channel CRDs of the Gateway API `version`, by plural name (`httproutes`,
    `gateways`, ...), in the order asked for."""
    crd_dir = gateway_api_dir(version) / GATEWAY_API_CRD_DIR
    paths = [crd_dir / f"gateway.networking.k8s.io_{name}.yaml" for name in names]
    missing = [path.name for path in paths if not path.is_file()]
    if missing:
        known = sorted(p.name for p in crd_dir.glob("gateway.networking.k8s.io_*.yaml"))
        raise FileNotFoundError(
            f"{', '.join(missing)} not in {crd_dir}; the standard channel of "
            f"{GATEWAY_API_MODULE}@{version} has {', '.join(known) or 'no CRDs'}"
        )
    return paths
