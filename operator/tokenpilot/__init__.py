"""TokenPilot: a Kubernetes operator and SLO autoscaler for LLM inference on vLLM.

Layers, each importing only downward (enforced by import-linter, see `.importlinter`):

    cli > commands > tooling > handlers > adapters > core > api

`api` holds the LLMService types, `core` the pure decisions, `adapters` every piece of I/O,
`handlers` the kopf entry points, `tooling` the developer rig (dev cluster, engine simulator
server, load generator, demo) and `commands` the `tokenpilot` subcommands.
"""

__version__ = "0.1.0"
