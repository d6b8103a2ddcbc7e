"""The client's renderers: pure functions from the read model's rows (routines.query, and the
daemon's typed replies in ipc) to the text a command prints. Tested as data
(tests/cli/test_render.py). The daemon never imports them: it answers rows, and the client
renders them the same whether they came from the daemon or were read here.
"""
