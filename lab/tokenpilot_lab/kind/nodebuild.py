"""The node image's build: the plan of `nodeimage` carried out with Go, debootstrap, podman
(kind's own storage) and containerd in a build container. Each step is one command bounded in
time; a failing one raises KindBuildFailed with the tail of its output. Intermediate images and
the build container are removed whatever happens; node images of earlier inputs are removed
once a new one is committed, unless a cluster still uses one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tokenpilot_lab.devcluster import build as gobuild
from tokenpilot_lab.devcluster import paths
from tokenpilot_lab.devcluster.versions import KUBERNETES_VERSION
from tokenpilot_lab.host.errors import DevClusterError
from tokenpilot_lab.kind.errors import KindBuildFailed, KindNotBuilt
from tokenpilot_lab.kind.nodeimage import (
    CONTAINERD_CONFIG,
    INPUTS_LABEL,
    KIND_FILES,
    MIRROR,
    NODE_LABEL,
    NODE_PACKAGES,
    PAUSE_SOURCE,
    PROXY_PACKAGES,
    REPOSITORY,
    SUITE,
    ComponentImage,
    current_tag,
    image_tag,
    inputs_digest,
    plan_images,
    sandbox_image,
    source_files,
)
from tokenpilot_lab.kind.podman import KindPodman
from tokenpilot_lab.kind.versions import KIND_VERSION, NODE_IMAGE_COMPONENTS

STEP_TIMEOUT_S = 1800.0
COMMAND_TIMEOUT_S = 600.0
LOG_TAIL_LINES = 25


@dataclass
class BuildReport:
    tag: str
    built: bool
    seconds: float = 0.0
    steps: list[tuple[str, float]] = field(default_factory=list)
    go: list[gobuild.BuildResult] = field(default_factory=list)


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])


def _run(
    argv: Sequence[str],
    what: str,
    *,
    env: Mapping[str, str] | None = None,
    stdin: Path | None = None,
    timeout_s: float = COMMAND_TIMEOUT_S,
    cwd: Path | None = None,
) -> str:
    """Run one command of the build; KindBuildFailed with its output's tail if it fails."""
    try:
        if stdin is None:
            proc = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                env=dict(env) if env is not None else None,
                timeout=timeout_s,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        else:
            with stdin.open("rb") as handle:
                done = subprocess.run(
                    list(argv),
                    capture_output=True,
                    env=dict(env) if env is not None else None,
                    timeout=timeout_s,
                    cwd=cwd,
                    stdin=handle,
                    check=False,
                )
            proc = subprocess.CompletedProcess(
                done.args,
                done.returncode,
                done.stdout.decode(errors="replace"),
                done.stderr.decode(errors="replace"),
            )
    except FileNotFoundError as exc:
        raise KindBuildFailed(f"{what}: {argv[0]} is not installed ({exc})") from exc
    except subprocess.TimeoutExpired:
        raise KindBuildFailed(
            f"{what}: `{' '.join(argv)}` ran longer than {timeout_s:.0f} s"
        ) from None
    if proc.returncode != 0:
        raise KindBuildFailed(
            f"{what}: `{' '.join(argv)}` exited with {proc.returncode}:\n"
            f"{_tail(proc.stderr or proc.stdout)}"
        )
    return proc.stdout


class _Podman:
    """podman under kind's own storage (KindPodman), each call bounded in time."""

    def __init__(self, config: KindPodman) -> None:
        self.env = config.environ()

    def __call__(self, *args: str, what: str, **kwargs: object) -> str:
        return _run(["podman", *args], what, env=self.env, **kwargs)  # type: ignore[arg-type]

    def label(self, image: str, key: str) -> str | None:
        proc = subprocess.run(
            ["podman", "image", "inspect", "--format", f'{{{{ index .Labels "{key}" }}}}', image],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
            check=False,
        )
        return proc.stdout.strip() if proc.returncode == 0 else None

    def quietly(self, *args: str) -> None:
        """A clean-up call: its failure (already gone, still in use) is no failure of the build."""
        subprocess.run(
            ["podman", *args], capture_output=True, env=self.env, timeout=120, check=False
        )


def built_tag() -> str:
    """The node image for the current inputs; KindNotBuilt if `make kind` has not made it."""
    tag = current_tag()
    config = KindPodman.default()
    if not config.storage_conf.is_file() or _Podman(config).label(tag, INPUTS_LABEL) is None:
        raise KindNotBuilt(
            f"the kind node image {tag} is not built yet: run `make kind` (or `tokenpilot kind "
            "build`) once; later runs reuse it"
        )
    return tag


def kind_binary() -> Path:
    try:
        return gobuild.binary("kind", NODE_IMAGE_COMPONENTS)
    except DevClusterError as exc:
        raise KindNotBuilt(f"kind {KIND_VERSION} is not built yet: run `make kind`") from exc


def _pause_binary(go: gobuild.GoToolchain, log: Callable[[str], None]) -> Path:
    """The pause stand-in, built into the cache under the digest of its source."""
    digest = hashlib.sha256((PAUSE_SOURCE / "main.go").read_bytes()).hexdigest()[:12]
    directory = paths.bin_root() / f"pause-{digest}"
    binary = directory / "pause"
    if os.access(binary, os.X_OK):
        return binary
    log("building the pause stand-in")
    staging = paths.bin_root() / f".pause-{digest}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _run(
        [go.path, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(staging / "pause"), "."],
        "building the pause stand-in",
        env=gobuild.go_env(go),
        cwd=PAUSE_SOURCE,
    )
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)
    return binary


def _kind_files(go: gobuild.GoToolchain, work: Path) -> Path:
    """kind's base files from the module download of sigs.k8s.io/kind at KIND_VERSION."""
    info = json.loads(
        _run(
            [go.path, "mod", "download", "-json", f"sigs.k8s.io/kind@{KIND_VERSION}"],
            f"downloading sigs.k8s.io/kind@{KIND_VERSION}",
            env=gobuild.go_env(go),
            cwd=work,
        )
    )
    files = Path(info["Dir"]) / KIND_FILES
    if not (files / CONTAINERD_CONFIG).is_file():
        raise KindBuildFailed(
            f"sigs.k8s.io/kind@{KIND_VERSION} has no {KIND_FILES}/{CONTAINERD_CONFIG}; "
            "its base image layout changed: adapt tokenpilot_lab/kind/nodeimage.py"
        )
    return files


def _debootstrap(rootfs: Path, packages: Sequence[str], debs: Path, what: str) -> None:
    if shutil.which("debootstrap") is None:
        raise KindBuildFailed(
            "debootstrap is missing: run hack/install-system-deps.sh (apt-get install debootstrap)"
        )
    debs.mkdir(parents=True, exist_ok=True)
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            f"--cache-dir={debs}",
            SUITE,
            str(rootfs),
            MIRROR,
        ],
        what,
        timeout_s=STEP_TIMEOUT_S,
    )
    # Only a package manager or a reader needs these; an image is rebuilt, never upgraded.
    for pattern in ("var/cache/apt/*", "var/lib/apt/lists/*", "usr/share/doc/*",
                    "usr/share/man/*", "usr/share/locale/*", "var/log/*"):  # fmt: skip
        for path in rootfs.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    # The build host's; podman provides its own at run time.
    (rootfs / "etc" / "resolv.conf").write_text("")
    (rootfs / "etc" / "hostname").write_text("")


def _copy_kind_files(files: Path, rootfs: Path) -> None:
    """kind's base files into the root file system with the modes kind's base image gives
    them: scripts 0755 (/usr/local/bin, /kind/bin), every other file 0644, directories 0755."""
    for source in sorted(files.rglob("*")):
        relative = source.relative_to(files)
        target = rootfs / relative
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            target.chmod(0o755)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        shutil.copyfile(source, target)
        script = relative.parts[:3] == ("usr", "local", "bin") or relative.parts[:2] == (
            "kind",
            "bin",
        )
        target.chmod(0o755 if script else 0o644)


def _install(binary: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(binary, target)
    target.chmod(0o755)


# What kind's base image runs at build time, on Debian's paths: containerd and runc come from
# Debian's packages (in /usr/bin, /usr/sbin) where kind's units look in /usr/local, and the CNI
# plugins in /usr/lib/cni where containerd looks in /opt/cni/bin.
SETUP_SCRIPT = r"""
set -euo pipefail
find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
  /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
  /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
echo ReadKMsg=no >>/etc/systemd/journald.conf
ln -sf /usr/lib/systemd/systemd /sbin/init
for tool in containerd ctr containerd-shim-runc-v2; do
  ln -sf "/usr/bin/$tool" "/usr/local/bin/$tool"
done
mkdir -p /opt/cni && rm -rf /opt/cni/bin && ln -s /usr/lib/cni /opt/cni/bin
sed -i 's/^\(\s*restrict_oom_score_adj\s*=\s*\).*/\1true/' /etc/containerd/config.toml
grep -q '^\s*restrict_oom_score_adj = true' /etc/containerd/config.toml
systemctl enable kubelet.service containerd.service undo-mount-hacks.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests
hook='{"path": "/kind/bin/mount-product-files.sh"}'
ctr oci spec \
  | jq ".hooks.createContainer[.hooks.createContainer|length] |= . + $hook" \
  | jq 'del(.process.rlimits)' >/etc/containerd/cri-base.json
"""

IMPORT_SCRIPT = r"""
set -euo pipefail
nohup containerd >/var/log/containerd-build.log 2>&1 &
for _ in $(seq 1 60); do
  [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "containerd did not answer within 30 s:" >&2
tail -20 /var/log/containerd-build.log >&2
exit 1
"""
STOP_SCRIPT = r"""
pkill -x containerd
for _ in $(seq 1 40); do pgrep -x containerd >/dev/null || exit 0; sleep 0.25; done
echo "containerd did not stop within 10 s" >&2
exit 1
"""


BUILD_INIT = "/run/tokenpilot-build-init"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NODE_CHANGES = (
    'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
    "CMD []",
    "ENV container=docker",
    "STOPSIGNAL SIGRTMIN+3",
)


def _pack(root: Path, tarball: Path, what: str) -> None:
    _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(tarball), "."], f"packing {what}")


def _component_archives(
    images: Sequence[ComponentImage],
    binaries: Mapping[str, Path],
    proxy_root: Path,
    work: Path,
    podman: _Podman,
    intermediate: list[str],
) -> list[tuple[str, Path]]:
    """Each component image made (one layer, `podman import`) and saved as a docker archive."""
    archives = []
    for image in images:
        root = proxy_root if image.userland else work / f"image-{image.binary}"
        _install(binaries[image.binary], root / image.path.lstrip("/"))
        changes = ["--change", f"ENV {PATH_ENV}"]
        if image.entrypoint:
            changes += ["--change", f"ENTRYPOINT {json.dumps(list(image.entrypoint))}"]
        tarball = work / f"{image.binary}.rootfs.tar"
        _pack(root, tarball, image.name)
        podman("import", *changes, str(tarball), image.name, what=f"importing {image.name}")
        intermediate.append(image.name)
        tarball.unlink()
        archive = work / f"{image.binary}.image.tar"
        podman("save", "--format", "docker-archive", "-o", str(archive), image.name,
               what=f"saving {image.name}")  # fmt: skip
        archives.append((image.name, archive))
    return archives


def _node_base(
    files: Path, binaries: Mapping[str, Path], node_root: Path, base: str, podman: _Podman
) -> None:
    """The node's root file system, with kind's files and the node binaries, as image `base`."""
    _copy_kind_files(files, node_root)
    for name in ("kubeadm", "kubelet", "kubectl"):
        _install(binaries[name], node_root / "usr" / "bin" / name)
    (node_root / "kind" / "version").write_text(KUBERNETES_VERSION)
    tarball = node_root.with_suffix(".rootfs.tar")
    _pack(node_root, tarball, "the node's root file system")
    shutil.rmtree(node_root)
    podman("import", str(tarball), base, what="importing the node's root file system")
    tarball.unlink()


def _set_up_and_import(
    container: str, archives: Sequence[tuple[str, Path]], podman: _Podman
) -> None:
    """kind's build-time set-up in the build container, then the component images into its
    containerd, pinned so that the kubelet's image garbage collection never removes them."""
    podman("exec", container, "bash", "-c", SETUP_SCRIPT, what="setting up the node")
    podman("exec", container, "bash", "-c", IMPORT_SCRIPT, what="starting containerd")
    ctr = ("exec", "-i", container, "ctr", "--namespace=k8s.io", "images")
    for name, archive in archives:
        podman(*ctr, "import", "--all-platforms", "--no-unpack", "--digests", "-",
               stdin=archive, what=f"importing {name} into the node's containerd")  # fmt: skip
        podman(*ctr, "label", name, "io.cri-containerd.pinned=pinned", what=f"pinning {name}")
    present = podman(*ctr, "list", "-q", what="listing the node's images").split()
    missing = [name for name, _ in archives if name not in present]
    if missing:
        raise KindBuildFailed(f"the node's containerd does not list {', '.join(missing)}")
    podman("exec", container, "bash", "-c", STOP_SCRIPT, what="stopping the build's containerd")


def build(
    *, force: bool = False, progress: Callable[[str], None] = lambda _msg: None
) -> BuildReport:
    """Build the binaries that are missing and the node image if its inputs changed."""
    started = time.monotonic()
    go_results = gobuild.build(NODE_IMAGE_COMPONENTS, progress=progress)
    digest = inputs_digest(source_files())
    tag = image_tag(digest)
    config = KindPodman.default()
    config.write()
    podman = _Podman(config)
    if not force and podman.label(tag, INPUTS_LABEL) == digest:
        return BuildReport(tag, False, time.monotonic() - started, [], go_results)
    if os.geteuid() != 0:
        raise KindBuildFailed(
            "the kind node image is made with debootstrap and rootful podman, which need root; "
            "run `sudo make kind`"
        )
    steps: list[tuple[str, float]] = []
    mark = time.monotonic()

    def step(what: str) -> None:
        nonlocal mark
        now = time.monotonic()
        steps.append((what, now - mark))
        progress(f"{what}: {now - mark:.0f} s")
        mark = now

    go = gobuild.find_go()
    cache = paths.cache_root() / "kind"
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="node-image.", dir=cache))
    container = f"tokenpilot-kind-build-{os.getpid()}"
    base = f"{REPOSITORY}-base:{digest}"
    intermediate: list[str] = []
    try:
        files = _kind_files(go, work)
        binaries = {
            name: gobuild.binary(name, NODE_IMAGE_COMPONENTS)
            for component in NODE_IMAGE_COMPONENTS
            for name in component.binaries
        }
        binaries["pause"] = _pause_binary(go, progress)
        listed = _run(
            [str(binaries["kubeadm"]), "config", "images", "list",
             "--kubernetes-version", KUBERNETES_VERSION],
            "asking kubeadm for its images",
        ).splitlines()  # fmt: skip
        images = plan_images(listed, sandbox_image((files / CONTAINERD_CONFIG).read_text()))
        step("the pause stand-in and kind's base files")

        progress(
            f"debootstrap {SUITE}: the node ({', '.join(NODE_PACKAGES)}) and, beside it, "
            f"kube-proxy's userland ({', '.join(PROXY_PACKAGES)})"
        )
        # Side by side: both wait on the mirror more than on the CPU. Each keeps its own
        # cache of packages, so that they never write the same file.
        with ThreadPoolExecutor(max_workers=2) as pool:
            jobs = [
                pool.submit(_debootstrap, work / name, packages, cache / "debs" / name, what)
                for name, packages, what in (
                    ("node", NODE_PACKAGES, "debootstrap of the node"),
                    ("proxy", PROXY_PACKAGES, "debootstrap of kube-proxy's userland"),
                )
            ]
            for job in jobs:
                job.result()
        step("debootstrap of the node and of kube-proxy's userland")

        archives = _component_archives(images, binaries, work / "proxy", work, podman, intermediate)
        step(f"{len(archives)} component images")
        _node_base(files, binaries, work / "node", base, podman)
        intermediate.append(base)
        step("the node's root file system")

        # The pause stand-in as its PID 1: it reaps containerd once it is stopped.
        podman("run", "--detach", "--name", container, "--privileged", "--network", "none",
               "--volume", f"{binaries['pause']}:{BUILD_INIT}:ro", "--entrypoint", BUILD_INIT,
               base, what="starting the build container")  # fmt: skip
        _set_up_and_import(container, archives, podman)
        step("kind's set-up and the images in the node's containerd")
        changes = [*NODE_CHANGES, f"LABEL {INPUTS_LABEL}={digest}",
                   f"LABEL {NODE_LABEL}={KUBERNETES_VERSION}"]  # fmt: skip
        podman("commit", *(a for c in changes for a in ("--change", c)), container, tag,
               what="committing the node image", timeout_s=STEP_TIMEOUT_S)  # fmt: skip
        step("committing the node image")
    finally:
        podman.quietly("rm", "--force", "--time", "0", container)
        for name in intermediate:
            podman.quietly("rmi", "--force", name)
        shutil.rmtree(work, ignore_errors=True)
    _remove_older_node_images(podman, tag)
    return BuildReport(tag, True, time.monotonic() - started, steps, go_results)


def _remove_older_node_images(podman: _Podman, keep: str) -> None:
    """Node images of earlier inputs; one still used by a cluster stays (rmi refuses)."""
    listed = subprocess.run(
        ["podman", "images", "--filter", f"label={NODE_LABEL}", "--format",
         "{{.Repository}}:{{.Tag}}"],
        capture_output=True, text=True, env=podman.env, timeout=60, check=False,
    ).stdout.split()  # fmt: skip
    for image in listed:
        if image != keep:
            podman.quietly("rmi", image)
