"""The `tokenpilot` subcommands. Each module defines `configure(parser)` and `run(args) -> int`."""
