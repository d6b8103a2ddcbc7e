"""What the read commands show, as data and as text: the pure row builders and renderers
both the CLI (in-process) and the daemon (answering a thin client, supervisor/control/answers.py)
run, so the two print the same bytes (tests/supervisor/test_thin_client.py).

Each module holds one command's view in three parts: a function that gathers what it shows
(the one that reads a ledger or the files), a pure function that builds the rows from that
data (tested as data, tests/supervisor/test_views.py), and a renderer from rows to text.
"""
