"""The command line, beside the daemon: `vinos-routine`'s argv parsing and the in-process
flows of its commands.

- `thinclient`: the console script's entry; `list`, `status`, `history` and `cost` are asked
  of a running daemon, which prints them through the same views (supervisor/views/).
- `daemonsock`: the control socket as the quick clients (thinclient, waybarfollow) find it.
- `main`: the full parser and `main(argv) -> int`, for everything else.
- `commands/`: one module a command, each with `register(subparsers)` and its `run`.
- `completions`, `waybarfollow`, `mcpserve`: shell completions, the bar's follow mode and
  `vinos-routine mcp`'s server.

Nothing here is imported at package import: the thin path loads no parser (its test,
tests/supervisor/test_thin_client.py, counts the modules). The daemon never imports this
package (an import-linter contract in pyproject.toml).
"""
