# vinos-routine — see README.md. `make demo` and `make test` are the quick start.
#
# Targets ending in -here run in place as the current (unprivileged) user; the plain targets
# go through scripts/as-user.sh, which, when started as root (as CI is), installs the system
# packages and re-runs the -here target as an unprivileged user in a copy of the tree.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The top-level packages, named once in pyproject.toml ([tool.setuptools.packages.find]).
PACKAGES := $(shell $(PYTHON) scripts/packages.py)
ifeq ($(strip $(PACKAGES)),)
$(error scripts/packages.py found no packages in pyproject.toml)
endif

.PHONY: demo test bench lint venv demo-here test-here bench-here completions clean

demo:
	@scripts/as-user.sh demo-here

test:
	@scripts/as-user.sh test-here

bench:
	@scripts/as-user.sh bench-here

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PACKAGES)

demo-here: venv
	@$(BIN)/python scripts/demo.py

test-here: lint
	$(BIN)/pytest -q $(PYTEST_ARGS)

bench-here: venv
	$(BIN)/python -m bench

completions: venv
	$(BIN)/python scripts/gen-completions.py

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .pytest_cache .ruff_cache
