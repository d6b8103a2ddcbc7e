"""Commented routine files that `vinos-routine create` starts from (package data: *.toml).

`@NAME@` in a template is replaced by the new routine's name.
"""
