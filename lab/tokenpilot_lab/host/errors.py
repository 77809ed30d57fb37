"""Errors of the dev cluster. Each message names what is wrong and what to do about it.

DevClusterError
├── ToolchainMissing    no usable Go on PATH
├── BuildFailed         a `go build` failed (log tail included)
├── BinariesMissing     `up` before `build`
├── StateDirError       stale, corrupt or foreign state directory
├── NodePoolError       malformed node-pool file (field named)
├── ImageMapError       malformed image-to-command mapping file
├── PortInUse           a requested port is taken
├── ComponentFailed     a process exited at start or never became ready (log tail included)
└── WaitTimeout         something did not happen in time
"""

from __future__ import annotations


class DevClusterError(Exception):
    """Base class; the message is meant to be printed to the user as-is."""


class ToolchainMissing(DevClusterError):
    pass


class BuildFailed(DevClusterError):
    pass


class BinariesMissing(DevClusterError):
    pass


class StateDirError(DevClusterError):
    pass


class NodePoolError(DevClusterError):
    pass


class ImageMapError(DevClusterError):
    pass


class PortInUse(DevClusterError):
    pass


class ComponentFailed(DevClusterError):
    pass


class WaitTimeout(DevClusterError):
    pass
