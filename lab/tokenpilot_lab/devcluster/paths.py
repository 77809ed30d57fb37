"""Where the dev cluster keeps things: a per-user cache, honouring XDG_CACHE_HOME."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tokenpilot"


def bin_root() -> Path:
    """Built binaries, one directory per component and version: bin/<component>-<version>/."""
    return cache_root() / "bin"


def build_root() -> Path:
    """Scratch wrapper modules used while building; safe to delete."""
    return cache_root() / "build"


def default_state_dir(name: str) -> Path:
    return cache_root() / "dev-cluster" / name
