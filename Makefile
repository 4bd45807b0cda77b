# The two commands: `make run` starts Colloc on this machine, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint browser clean catalog test-catalog

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Colloc needs Python 3.11 or newer (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/colloc up

# lint-imports: the layering contracts in pyproject.toml ([tool.importlinter])
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Chromium and its driver for the dashboard's browser tests, from Debian's packages.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
		echo "installing chromium and chromium-driver for the browser tests"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

test: lint browser
	COLLOC_REQUIRE_BROWSER=1 $(BIN)/pytest -q

# The architecture catalog's generator and the tests that need torch (the catalog build,
# `colloc estimate --trace`) run in a venv of their own: torch with its CUDA libraries is
# several GB, which `make test` does without (those tests skip there).
CATALOG_VENV := .venv-catalog
CATALOG_STAMP := $(CATALOG_VENV)/.installed

$(CATALOG_STAMP): pyproject.toml
	$(PYTHON) -m venv $(CATALOG_VENV)
	$(CATALOG_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CATALOG_VENV)/bin/python -m pip install --quiet -e ".[dev,catalog]"
	touch $(CATALOG_STAMP)

# regenerate estimator/catalog/data/*.json, then test it
catalog: $(CATALOG_STAMP)
	$(CATALOG_VENV)/bin/python -m estimator.catalog.build
	$(MAKE) test-catalog

test-catalog: $(CATALOG_STAMP)
	COLLOC_REQUIRE_TORCH=1 $(CATALOG_VENV)/bin/pytest -q tests/estimator/test_catalog.py \
		tests/estimator/test_catalog_build.py tests/estimator/test_trace.py

clean:
	rm -rf $(VENV) $(CATALOG_VENV) colloc-data .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
