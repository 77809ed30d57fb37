"""Does a live object still say what we rendered? One generic containment check, not a list of
fields.

`difference(desired, live)` is None when every value the renderer set is present in the live
object, and otherwise names the first path that differs. Extra live content is ignored: the
API server adds defaults (protocols, schemes, timeouts), controllers add annotations, and people
may add labels; none of that is drift. Lists of named items (containers, env, ports, volumes)
match by name; other lists match by position and must have the same length. Quantities compare
by value, since the API server may rewrite `0.5` as `500m`.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}
_QUANTITY = re.compile(r"^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def _quantity(value: Any) -> Decimal | None:
    match = _QUANTITY.match(str(value))
    if match is None:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation:
        return None


def _same_scalar(desired: Any, live: Any) -> bool:
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is live
    if desired == live:
        return True
    a, b = _quantity(desired), _quantity(live)
    return a is not None and a == b


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def difference(desired: Any, live: Any, path: str = "") -> str | None:
    """None when `live` contains `desired`; else the first differing path, in words."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return f"{path or '.'} is not an object"
        for key, value in desired.items():
            found = difference(value, live.get(key), f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(desired, list):
        if not isinstance(live, list):
            return f"{path} is missing"
        if _named(desired) and _named(live):
            by_name = {item["name"]: item for item in live}
            for item in desired:
                if item["name"] not in by_name:
                    return f"{path}[{item['name']}] is missing"
                found = difference(item, by_name[item["name"]], f"{path}[{item['name']}]")
                if found is not None:
                    return found
            return None
        if len(desired) != len(live):
            return f"{path} has {len(live)} items, want {len(desired)}"
        for index, (want, have) in enumerate(zip(desired, live, strict=True)):
            found = difference(want, have, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if live is None and desired is not None:
        return f"{path} is missing"
    if not _same_scalar(desired, live):
        return f"{path} is {live!r}, want {desired!r}"
    return None
