"""Build the pinned control-plane binaries with the installed Go into the per-user cache.

Each component is built in a tiny wrapper module that requires the published module at its pinned
version. Published go.mod files of Kubernetes and etcd replace their sibling modules with relative
paths (`k8s.io/api => ./staging/src/k8s.io/api`), which `go install mod@version` refuses; the
wrapper turns each relative replace into the published sibling release, generated from the real
go.mod rather than hard-coded. Output goes to bin/<component>-<version>/ with a `build.json`
receipt written last, so an interrupted build is never mistaken for a finished one and a second
run finds everything in place and does nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenpilot_lab.devcluster import paths
from tokenpilot_lab.devcluster.versions import CLIENT_TOOLS, COMPONENTS, Component
from tokenpilot_lab.host.errors import BinariesMissing, BuildFailed, ToolchainMissing

MIN_GO = (1, 24)
RECEIPT = "build.json"
GO_TIMEOUT_S = 3 * 3600  # a cold Kubernetes build on two busy cores takes tens of minutes


@dataclass(frozen=True)
class GoToolchain:
    path: str
    version: tuple[int, int]
    version_text: str


@dataclass(frozen=True)
class BuildResult:
    component: Component
    built: bool  # False when the cache already had it
    seconds: float
    size_bytes: int


def find_go() -> GoToolchain:
    go = shutil.which("go")
    if go is None:
        raise ToolchainMissing(
            "no Go toolchain on PATH: the dev-cluster binaries are built from source with Go "
            f">= {MIN_GO[0]}.{MIN_GO[1]}. Install Go (https://go.dev/dl/, or your distribution's "
            "golang package), make sure `go version` works, then run `make tools`."
        )
    try:
        out = subprocess.run(
            [go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60, check=True
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError) as exc:
        raise ToolchainMissing(
            f"`{go} env GOVERSION` failed ({exc}); is the Go install broken?"
        ) from exc
    match = re.match(r"go(\d+)\.(\d+)", out)
    if match is None:
        raise ToolchainMissing(f"cannot read the Go version from {out!r} ({go})")
    version = (int(match.group(1)), int(match.group(2)))
    if version < MIN_GO:
        raise ToolchainMissing(
            f"{go} is {out}; the pinned Kubernetes and etcd need Go >= {MIN_GO[0]}.{MIN_GO[1]}. "
            "Install a newer Go and run `make tools` again."
        )
    return GoToolchain(path=go, version=version, version_text=out)


def component_dir(component: Component) -> Path:
    return paths.bin_root() / component.key


def is_built(component: Component) -> bool:
    directory = component_dir(component)
    if not (directory / RECEIPT).is_file():
        return False
    return all(os.access(directory / name, os.X_OK) for name in component.binaries)


def binary(name: str, components: Iterable[Component] = COMPONENTS) -> Path:
    """Path of a built binary by name (`etcd`, `kube-apiserver`, `kwok`, ...), looked up in
    `components` (the dev cluster's by default)."""
    for component in components:
        if name in component.binaries:
            if not is_built(component):
                raise BinariesMissing(
                    f"{name} {component.version} is not built yet (looked in "
                    f"{component_dir(component)}). Run `make tools` "
                    "(or `tokenpilot dev-cluster build`) once; later runs reuse the cache."
                )
            return component_dir(component) / name
    raise KeyError(name)


def wrapper_gomod(component: Component, published: dict[str, object]) -> str:
    """The go.mod of the wrapper module, given the published go.mod as `go mod edit -json`.

    Relative replaces (Kubernetes staging, etcd siblings) point at the published sibling release;
    placeholders that point at a non-existent directory (etcd's FORBIDDEN_DEPENDENCY) are dropped;
    other replaces are kept as published, since a dependency's replaces do not apply to us.
    """
    go_version = str(published.get("Go") or "1.24")
    lines = [
        "module tokenpilot.local/build/" + component.name,
        "",
        f"go {go_version}",
        "",
        f"require {component.module} {component.version}",
        "",
    ]
    replaces: list[str] = []
    for entry in published.get("Replace") or []:  # type: ignore[attr-defined]
        old = entry["Old"]
        new = entry["New"]
        old_spec = old["Path"] + (f" {old['Version']}" if old.get("Version") else "")
        if new["Path"].startswith(("./", "../")):
            if "FORBIDDEN" in new["Path"]:
                continue
            replaces.append(f"\t{old_spec} => {old['Path']} {component.sibling_version}")
        else:
            new_spec = new["Path"] + (f" {new['Version']}" if new.get("Version") else "")
            replaces.append(f"\t{old_spec} => {new_spec}")
    if replaces:
        lines += ["replace (", *sorted(replaces), ")", ""]
    return "\n".join(lines)


def go_env(go: GoToolchain) -> dict[str, str]:
    env = dict(os.environ)
    # Never let Go fetch a different toolchain or pick up a workspace from the caller's tree.
    env.update(GOTOOLCHAIN="local", GOWORK="off", CGO_ENABLED="0")
    flags = env.get("GOFLAGS", "").split()
    env["GOFLAGS"] = " ".join([f for f in flags if not f.startswith("-mod=")] + ["-mod=mod"])
    return env


def _run_go(go: GoToolchain, args: list[str], cwd: Path, log: Path) -> str:
    with log.open("a") as log_file:
        log_file.write(f"$ go {' '.join(args)}\n")
        log_file.flush()
        try:
            proc = subprocess.run(
                [go.path, *args],
                cwd=cwd,
                env=go_env(go),
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                timeout=GO_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise BuildFailed(
                f"`go {args[0]}` ran longer than {GO_TIMEOUT_S} s; see {log}"
            ) from exc
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise BuildFailed(f"`go {' '.join(args)}` failed in {cwd} (full log: {log}):\n{tail}")
    return proc.stdout


def build_component(component: Component, go: GoToolchain) -> BuildResult:
    started = time.monotonic()
    work = paths.build_root() / component.key
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "build.log"
    info = json.loads(
        _run_go(
            go, ["mod", "download", "-json", f"{component.module}@{component.version}"], work, log
        )
    )
    published = json.loads(_run_go(go, ["mod", "edit", "-json", info["GoMod"]], work, log))
    (work / "go.mod").write_text(wrapper_gomod(component, published))
    staging = paths.bin_root() / f".{component.key}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    ldflags = " ".join(["-s", "-w", *component.ldflags])
    for name, package in component.binaries.items():
        _run_go(
            go,
            ["build", "-trimpath", "-ldflags", ldflags, "-o", str(staging / name), package],
            work,
            log,
        )
    seconds = time.monotonic() - started
    size = sum((staging / name).stat().st_size for name in component.binaries)
    receipt = {
        "component": component.name,
        "version": component.version,
        "go": go.version_text,
        "build_seconds": round(seconds, 1),
        "size_bytes": size,
        "binaries": sorted(component.binaries),
    }
    (staging / RECEIPT).write_text(json.dumps(receipt, indent=2) + "\n")
    final = component_dir(component)
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    return BuildResult(component=component, built=True, seconds=seconds, size_bytes=size)


def build(
    components: Iterable[Component] = COMPONENTS,
    *,
    force: bool = False,
    progress: Callable[[str], None] = lambda _msg: None,
) -> list[BuildResult]:
    """Build what is missing (or everything with `force`); a warm cache costs no Go call at all."""
    todo = [c for c in components if force or not is_built(c)]
    results: list[BuildResult] = []
    for component in components:
        if component not in todo:
            receipt = json.loads((component_dir(component) / RECEIPT).read_text())
            results.append(BuildResult(component, False, 0.0, int(receipt["size_bytes"])))
    if not todo:
        return results
    go = find_go()
    for component in todo:
        progress(
            f"building {component.key} ({', '.join(component.binaries)}) with {go.version_text}"
        )
        result = build_component(component, go)
        progress(
            f"built {component.key} in {result.seconds:.0f} s, {result.size_bytes / 2**20:.0f} MiB"
        )
        results.append(result)
    return results


def tools_dir() -> Path:
    """Where `make tools` links the client tools: beside the `tokenpilot` command (the
    virtualenv's bin), which is on the PATH wherever `tokenpilot` is."""
    return Path(sysconfig.get_path("scripts"))


def link_tools(dest: Path | None = None) -> list[Path]:
    """Symlink the built helm and kubectl into `dest` (default `tools_dir()`), replacing an
    earlier link but never a file of someone else's; the links made or kept."""
    dest = tools_dir() if dest is None else dest
    dest.mkdir(parents=True, exist_ok=True)
    linked = []
    for name in CLIENT_TOOLS:
        target, link = binary(name), dest / name
        if link.exists() and not link.is_symlink():
            continue  # a real file: not ours to replace
        staging = dest / f".{name}.link-{os.getpid()}"
        staging.unlink(missing_ok=True)
        staging.symlink_to(target)
        staging.replace(link)
        linked.append(link)
    return linked
