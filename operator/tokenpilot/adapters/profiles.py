"""Read GPU profiles from files, directories and ConfigMap data into the pure parser.

Where the built-in profiles live: a checkout has them in the top-level `policies/gpus/`; an
installed wheel carries the same files as data files under `<prefix>/share/tokenpilot/gpus`
(pyproject's `[tool.setuptools.data-files]`). The first of those that exists is used, so there is
one copy of each profile in the source tree and nothing is generated.
"""

from __future__ import annotations

import logging
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.profiles import EXAMPLE_PROFILE, ProfileCatalog, merge_catalogs, parse_profile

if TYPE_CHECKING:  # the kube client is not imported by `tokenpilot plan`, which reads files
    from tokenpilot.adapters.kube import KubeClient

PROFILE_SUFFIXES = (".yaml", ".yml")
log = logging.getLogger("tokenpilot.profiles")


def builtin_profiles_dir() -> Path:
    """The directory holding the built-in profiles, in a checkout or an installed wheel."""
    candidates = [
        Path(__file__).resolve().parents[3] / "policies" / "gpus",
        Path(sysconfig.get_path("data")) / "share" / "tokenpilot" / "gpus",
        Path(sys.prefix) / "share" / "tokenpilot" / "gpus",
    ]
    for candidate in candidates:
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise InvalidSpec(
        f"built-in GPU profiles not found (looked in {tried}); reinstall tokenpilot or run "
        f"from a checkout that has policies/gpus/"
    )


def read_profile_file(path: Path) -> GPUProfile:
    """One profile file; errors name the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidSpec(f"{path}: cannot read GPU profile ({exc.strerror})") from None
    return parse_profile(text, str(path))


def read_profile_dir(directory: Path) -> list[GPUProfile]:
    """Every `*.yaml`/`*.yml` profile in a directory, in name order."""
    if not directory.is_dir():
        raise InvalidSpec(
            f"{directory}: GPU profile directory does not exist; pass a directory of profile "
            f"YAML files"
        )
    files = sorted(p for p in directory.iterdir() if p.suffix in PROFILE_SUFFIXES)
    return [read_profile_file(p) for p in files]


def parse_configmap_data(data: Mapping[str, str], configmap: str) -> list[GPUProfile]:
    """Profiles from a ConfigMap's `data`: one profile per key ending in .yaml or .yml."""
    profiles = []
    for key in sorted(data):
        if not key.endswith(PROFILE_SUFFIXES):
            raise InvalidSpec(
                f"ConfigMap {configmap}: key {key!r} is not a profile; name each key "
                f"<sku>.yaml and put one GPU profile in it"
            )
        profiles.append(parse_profile(data[key], f"ConfigMap {configmap}, key {key}"))
    return profiles


def load_builtin_catalog() -> ProfileCatalog:
    """The profiles that ship with TokenPilot."""
    return ProfileCatalog(read_profile_dir(builtin_profiles_dir()))


# Where a profile for an unknown GPU goes, in the words of each way of running.
HOW_TO_ADD_FOR_CLI = (
    f"put a profile for it (same format as {EXAMPLE_PROFILE}) in a directory and pass "
    "--profiles-dir DIR"
)


def how_to_add_for_operator(configmap: str | None) -> str:
    where = (
        f"ConfigMap {configmap}"
        if configmap
        else "a ConfigMap passed as tokenpilot run --gpu-profiles-configmap NAMESPACE/NAME"
    )
    return (
        f"add <sku>.yaml with a profile for it (same format as {EXAMPLE_PROFILE}) to {where} "
        "(with the chart: the gpuProfiles value)"
    )


def load_catalog(
    dirs: Iterable[Path] = (),
    configmap_data: Mapping[str, str] | None = None,
    configmap: str = "gpu-profiles",
    how_to_add: str = HOW_TO_ADD_FOR_CLI,
) -> ProfileCatalog:
    """Built-ins overridden by each directory in order, then by the ConfigMap's profiles."""
    catalog = load_builtin_catalog()
    for directory in dirs:
        catalog = merge_catalogs(catalog, read_profile_dir(Path(directory)))
    if configmap_data:
        catalog = merge_catalogs(catalog, parse_configmap_data(configmap_data, configmap))
    return ProfileCatalog(catalog.profiles, how_to_add)


def load_catalog_from_cluster(client: KubeClient, configmap: str | None) -> ProfileCatalog:
    """Built-ins, overridden by the profiles in ConfigMap `configmap` ("namespace/name") when
    one is named; a missing ConfigMap leaves the built-ins (with a warning)."""
    how_to_add = how_to_add_for_operator(configmap)
    if configmap is None:
        return load_catalog(how_to_add=how_to_add)
    namespace, name = configmap_name(configmap)
    body = client.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    if body is None:
        # The chart always creates it; without it the built-in profiles still serve.
        log.warning("ConfigMap %s not found; using the built-in GPU profiles only", configmap)
        return load_catalog(how_to_add=how_to_add)
    return load_catalog(
        configmap_data=body.get("data") or {}, configmap=configmap, how_to_add=how_to_add
    )


def configmap_name(configmap: str) -> tuple[str, str]:
    """(namespace, name) of `--gpu-profiles-configmap NAMESPACE/NAME`, or InvalidSpec."""
    namespace, _slash, name = configmap.partition("/")
    if not namespace or not name or "/" in name:
        raise InvalidSpec(
            f"--gpu-profiles-configmap {configmap}: write it as NAMESPACE/NAME, "
            "e.g. tokenpilot-system/gpu-profiles"
        )
    return namespace, name


def chosen_profile(
    catalog: ProfileCatalog, gpu: str | None, gpu_profile: Path | None
) -> GPUProfile:
    """The profile a command line names: `--gpu` from `catalog`, or `--gpu-profile FILE`, which
    overrides the catalog's profile of the same SKU (keeping its step-model parameters and
    measurements unless the file has its own)."""
    if gpu_profile is not None:
        if gpu is not None:
            raise InvalidSpec("give --gpu or --gpu-profile, not both")
        own = read_profile_file(gpu_profile)
        return merge_catalogs(catalog, [own]).get(own.name)
    if gpu is None:
        raise InvalidSpec(
            f"--gpu is required: name a SKU ({', '.join(catalog.names)}) or pass --gpu-profile FILE"
        )
    return catalog.get(gpu)
