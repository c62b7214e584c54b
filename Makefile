# Setup and common tasks. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch/torchvision are capped here for this environment (a local wheel cache); the
# package itself only requires torch>=2.2. Override on other machines, e.g.
#   make test TORCH_SPEC="torch torchvision"
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
# Further packages for this installation, e.g. the fsspec backends of a store whose blobs
# live at a URL (the leaderboard workflow passes its BLOB_BACKENDS variable here).
EXTRA_PACKAGES ?=
STAMP := $(VENV)/.fewtrans-installed
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)

.PHONY: install sandbox test test-fast demo lint docs manifests clean

# setuptools explains every editable install in a banner ("Editable installation. Please be
# careful with folders ..."); pip re-emits it as a BuildBackendWarning. It is informational.
QUIET_BUILD := PYTHONWARNINGS="ignore:Editable installation"

# pip runs quietly, so each step says what it installs (a few minutes on a fresh machine).
$(STAMP): pyproject.toml setup.py plugins/fewtrans-example/pyproject.toml Makefile
	@echo "install: a virtual environment in $(VENV) with pip, $(TORCH_SPEC), fewtrans-board[dev,ray] and the example plugin (editable)$(if $(EXTRA_PACKAGES), and $(EXTRA_PACKAGES)); a few minutes on a fresh machine"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "install: 1/3 pip"
	$(PY) -m pip install --quiet --upgrade pip
	@echo "install: 2/3 $(TORCH_SPEC) (the largest download)"
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	@echo "install: 3/3 fewtrans-board[dev,ray] and plugins/fewtrans-example, editable$(if $(EXTRA_PACKAGES), with $(EXTRA_PACKAGES))"
	$(QUIET_BUILD) $(PY) -m pip install --quiet -e ".[dev,ray]" -e plugins/fewtrans-example $(TORCH_SPEC) $(EXTRA_PACKAGES)
	touch $(STAMP)
	@echo "install: done ($(VENV)/bin/fewtrans-board)"

install: $(STAMP)

# Plugin workers run in a bubblewrap sandbox (Debian/Ubuntu package 'bubblewrap').
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  { $(SUDO) apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq bubblewrap >/dev/null; }; } || \
	  echo "warning: no bubblewrap: plugin workers run unsandboxed and verification tests fail (apt-get install bubblewrap)" >&2

# One pytest worker per core (pytest-xdist; an idle worker takes queued tests from the busy
# one, so the long end-to-end tests do not leave a core idle at the end); PYTEST_ARGS= runs
# them in one process.
PYTEST_ARGS ?= -n auto --dist worksteal
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE=1):
# sandboxed plugin workers see the package read-only and can only read the .pyc files the
# test processes write, and the hundreds of processes the suite starts would each compile
# the package (and pytest each worker's rewritten test modules) from source again.
WRITE_BYTECODE := PYTHONDONTWRITEBYTECODE=

test: $(STAMP) sandbox
	$(WRITE_BYTECODE) $(PY) -m pytest $(PYTEST_ARGS)

# Unit tests of every module: no process started, no training beyond a few steps (the
# tests marked slow are left out). A minute or two on 2 cores; `make test` runs everything.
test-fast: $(STAMP)
	$(WRITE_BYTECODE) $(PY) -m pytest $(PYTEST_ARGS) -m "not slow"

# The main job on the embedded default: HPE on digits, pretrained demo CNN vs random init.
demo: $(STAMP)
	$(VENV)/bin/fewtrans-board demo --out demo-output

# Rebuild the committed (embedded) manifests and leaderboard/manifests/README.md.
manifests: $(STAMP)
	$(PY) -m fewtrans_board.episodes

lint: $(STAMP)
	$(VENV)/bin/ruff check fewtrans_board tests plugins benchmarks scripts
	$(VENV)/bin/ruff format --check fewtrans_board tests plugins benchmarks scripts
	$(VENV)/bin/mypy fewtrans_board

docs: $(STAMP)
	$(PY) -m fewtrans_board.jobs.docs --schemas docs/schemas README.md CONTRIBUTING.md

clean:
	rm -rf $(VENV) build dist *.egg-info demo-output
