"""The command line, beside the daemon: `vinos-routine`'s argv parsing and the in-process
flows of its commands.

- `thinclient`: the console script's entry; `list` and `status` ask a running daemon for the
  read model's rows (routines.query) and render them (`reads`, `render/`).
- `daemonsock`: the control socket as the quick clients (thinclient, waybarfollow) find it,
  and `ask`: one request, its result.
- `reads`: `list`, `status` and `status --waybar`, the daemon's rows or the files', rendered.
- `render/`: the renderers, pure functions from rows to text (the daemon never imports them).
- `main`: the full parser and `main(argv) -> int`, for everything else.
- `commands/`: one module a command, each with `register(subparsers)` and its `run`.
- `completions`, `waybarfollow`, `mcpserve`: shell completions, the bar's follow mode and
  `vinos-routine mcp`'s server.

Nothing here is imported at package import: the quick path loads no parser (its test,
tests/supervisor/test_thin_client.py, counts the modules). The daemon never imports this
package (an import-linter contract in pyproject.toml).
"""
