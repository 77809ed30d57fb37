"""Small YAML input files (node pools, the image map) read into pydantic models, with errors a
user can act on.

Every message names the file. A validation error names each bad field as a path into the file
(`pools[0].gpu.count`, `images[1].command`) and points at the default file as an example of
the format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as the user would write it: `pools[0].gpu.count`."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


@dataclass(frozen=True)
class InputFile(Generic[M]):
    """One kind of input file: what it is called in messages and what it parses into."""

    what: str  # "node-pool file": how messages name the file
    top_key: str  # the list every file of this kind starts with
    model: type[M]
    error: type[Exception]
    default: Path  # read when no path is given; shown as the example of the format

    def parse(self, text: str, source: str) -> M:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise self.error(f"{source}: not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise self.error(
                f"{source}: expected a mapping with the `{self.top_key}:` list at the top"
            )
        try:
            return self.model.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{field_path(e['loc'])}: {e['msg']}" for e in exc.errors())
            raise self.error(
                f"{source}: invalid {self.what}: {problems}. "
                f"See the default file {self.default} for the format."
            ) from exc

    def load(self, path: Path | None) -> M:
        path = path or self.default
        try:
            text = path.read_text()
        except OSError as exc:
            raise self.error(f"cannot read {self.what} {path}: {exc.strerror}") from exc
        return self.parse(text, str(path))
