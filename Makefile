# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest's worker processes (pytest-xdist): most tests wait on a kernel or a subprocess,
# so two workers use a 2-core machine's cores; 0 runs every test in this process.
TEST_WORKERS ?= 2

.PHONY: setup demo test lint typecheck unit lab bench clean

# The torch tests run in CI: torch is pinned to one release so that pip takes that file
# (a plain `pip install torch` picks the newest, a multi-GB CUDA build on Linux).
TORCH ?= torch==2.13.0

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet '$(TORCH)'
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

# Bytecode for the editable install (kernels the tests start import it, as an installed
# copy would be imported, instead of compiling it again each time).
setup: $(STAMP)
	$(BIN)/python -m compileall -q ipy_resume

demo: $(STAMP)
	$(BIN)/ipy-resume demo

lint: $(STAMP)
	$(BIN)/ruff check ipy_resume tests benchmarks
	$(BIN)/ruff format --check ipy_resume tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS)


lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

# Benchmarks against the machine's floors and the peers (joblib, ipycache, dill, Kishu):
# installs the `bench` extra, then prints the table and writes benchmarks/results/.
# BENCH_ARGS="--scale 0.1 --repeat 2 --only 1,3" for a quick run.
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=

# The extra's packages are installed from pyproject.toml's [project.optional-dependencies]
# bench list; ipy_resume itself is already installed (editable) by the setup stamp.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['bench']))" > $(VENV)/bench-requirements.txt
	$(BIN)/python -m pip install --quiet -r $(VENV)/bench-requirements.txt
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist

# ---- JupyterLab side panel, widget and browser tests ------------------------------------------
# `pip install -e .` (the setup stamp) already builds labextension/ through hatch-jupyter-builder;
# `labext` rebuilds it after TypeScript edits and links it into the venv.
JLPM := $(abspath $(BIN))/jlpm
LAB_STAMP := $(VENV)/.labext-built
UI_STAMP := ui-tests/node_modules/.installed
LAB_SOURCES := $(wildcard labextension/src/*.ts labextension/style/*) labextension/package.json

.PHONY: labext chromium ui-deps ui-test screenshots

$(LAB_STAMP): $(STAMP) $(LAB_SOURCES)
	cd labextension && $(JLPM) install && PATH=$(abspath $(BIN)):$$PATH $(JLPM) build
	$(BIN)/jupyter-builder develop --overwrite .
	touch $(LAB_STAMP)

labext: $(LAB_STAMP)

# Debian's chromium: Playwright's own browser download cannot work on these machines.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

$(UI_STAMP): $(STAMP) ui-tests/package.json ui-tests/yarn.lock
	cd ui-tests && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(JLPM) install
	touch $(UI_STAMP)

ui-deps: $(UI_STAMP)

# Galata tests of the panel and the widget; screenshots land in ui-tests/test-results/.
ui-test: $(LAB_STAMP) $(UI_STAMP) chromium
	cd ui-tests && PATH=$(abspath $(BIN)):$$PATH npx playwright test

# Refresh the README's pictures of the panel and the widget (docs/img/*.png).
screenshots: $(LAB_STAMP) $(UI_STAMP) chromium
	cd ui-tests && IPY_RESUME_DOCS_DIR=$(CURDIR)/docs/img PATH=$(abspath $(BIN)):$$PATH npx playwright test

# ---- everything, in order: set-up, lint, types, browser tests, then pytest ---------------------
# pytest exits 5 when it collected nothing; that must never pass as green.
test: setup lint typecheck ui-test
	$(BIN)/python -m pytest -n $(TEST_WORKERS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi; exit $$rc
