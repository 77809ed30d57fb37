"""Domain errors of the core, raised by pure functions and mapped to kopf outcomes by handlers.

    TokenPilotError            anything the core refuses, with a message a person can act on
    ├── InvalidSpec            the spec contradicts itself or names a flag the operator owns
    ├── UnknownGPU             a SKU or GPU product label no profile knows
    └── Infeasible             well-formed, but cannot run: weights do not fit, no node can host

Handlers turn all three into a permanent failure (the user must change something); none of
them is retried on a timer, so a bad spec never becomes a crash loop.
"""

from __future__ import annotations


class TokenPilotError(Exception):
    """A refusal by the core; the message says what is wrong and how to fix it, in one sentence
    a condition can carry. `detail` holds the longer reasons (figures, what each candidate
    offered) for an Event or a log line."""

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class InvalidSpec(TokenPilotError, ValueError):
    """The spec contradicts itself or sets something the operator owns."""


class UnknownGPU(TokenPilotError, LookupError):
    """A SKU name or nvidia.com/gpu.product value that no GPU profile knows; `how_to_add` says
    where a profile for it would go, in the words of whoever loaded the catalog; `choices` the
    SKUs a family name such as A100 could mean (empty when the name is simply unknown)."""

    def __init__(
        self,
        message: str,
        *,
        how_to_add: str,
        detail: str | None = None,
        choices: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, detail=detail)
        self.how_to_add = how_to_add
        self.choices = choices


class Infeasible(TokenPilotError):
    """A well-formed spec that cannot run on what the cluster or the GPU offers."""
