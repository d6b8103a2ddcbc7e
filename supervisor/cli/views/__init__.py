"""What the read commands show, as data and as text: the pure row builders and renderers
of `brief`, `history` and `cost`, which the CLI runs in-process (`list` and `status` are the
read model's, routines.query, rendered by supervisor/cli/render/).

Each module holds one command's view in three parts: a function that gathers what it shows
(the one that reads a ledger or the files), a pure function that builds the rows from that
data (tested as data, tests/supervisor/test_views.py), and a renderer from rows to text.
"""
