"""Errors of the kind tooling; each message says what is wrong and what to do about it.

KindError
├── KindBuildFailed     a step of the node image build failed (its output's tail included)
├── KindNotBuilt        the node image or the kind binary is not built yet (`make kind`)
└── KindNetworkError    the pod network could not be planned or applied (the node named)
"""

from __future__ import annotations


class KindError(Exception):
    """Base class; the message is meant to be printed to the user as-is."""


class KindBuildFailed(KindError):
    pass


class KindNotBuilt(KindError):
    pass


class KindNetworkError(KindError):
    pass
