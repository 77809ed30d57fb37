"""TokenPilot: a Kubernetes operator and SLO autoscaler for LLM inference on vLLM.

Layers, each importing only downward (enforced by import-linter, see `.importlinter`):

    cli > commands > handlers > adapters > core > api

`api` holds the LLMService types, `core` the pure decisions, `adapters` every piece of I/O,
`handlers` the kopf entry points and `commands` the operator's `tokenpilot` subcommands. The
lab (`tokenpilot_lab`, a distribution of its own) builds on this package; nothing here imports
it.
"""

__version__ = "0.1.0"
