"""The lab's `tokenpilot` subcommands, registered under the `tokenpilot.commands` entry point
group. Each module defines `configure(parser)` and `run(args) -> int`, as the operator's do."""
