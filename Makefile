# Leveret: two commands on a fresh machine, `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Two installs into one venv: what serving needs (make run), then the test and pipeline
# extras on top (make test). Each redone when pyproject.toml changes.
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

RABBITMQADMIN := $(VENV)/bin/rabbitmqadmin

.PHONY: run run-fast compiled test lint typecheck unit unit-compiled bench bench-pipeline fuzz clean \
	system-deps docs

# The venv starts with today's pip and setuptools (--upgrade-deps): the bundled pip takes
# seconds to match wheels against its tags, and the venv's setuptools builds the editable
# install in place (--no-build-isolation: no second, throwaway environment). Together they cut
# a fresh `make run` by about 4 s. A venv made before then gets them first, once.
PIP_INSTALL := $(PY) -m pip install -q --disable-pip-version-check
$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv --upgrade-deps $(VENV)
	$(PIP_INSTALL) --no-build-isolation --check-build-dependencies -e . 2>/dev/null || \
		{ $(PIP_INSTALL) --upgrade pip setuptools && $(PIP_INSTALL) --no-build-isolation -e . ; }
	touch $@

$(TEST_STAMP): $(RUN_STAMP)
	$(PIP_INSTALL) -e '.[test,pipeline]'
	touch $@

# System packages the test suite drives: headless Chromium for the management page test
# (Java for PySpark is on the machine). Installed once, only when missing (needs root).
system-deps:
	@command -v chromium >/dev/null 2>&1 || \
		(apt-get update -q && apt-get install -y -q --no-install-recommends chromium)
	@command -v java >/dev/null 2>&1 || \
		(apt-get update -q && apt-get install -y -q --no-install-recommends default-jre-headless)

# RabbitMQ's own management CLI, to test our management API with the real tool: the one
# Python script, taken out of Debian's rabbitmq-server package (downloaded, not installed:
# no Erlang, no service).
$(RABBITMQADMIN): $(TEST_STAMP)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; cd "$$tmp"; \
	apt-get download -q rabbitmq-server >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get download -q rabbitmq-server); \
	dpkg-deb -x rabbitmq-server_*.deb root; \
	cp root/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_management-*/priv/www/cli/rabbitmqadmin \
		"$(abspath $(RABBITMQADMIN))"
	chmod +x $(RABBITMQADMIN)

run: $(RUN_STAMP)
	$(VENV)/bin/leveret serve --host 127.0.0.1 --port 5672 --data-dir ./data

# The compiled build (setup.py, build_support/compiled.txt): the package installed into
# build/compiled with its hot modules compiled by mypyc; PYTHONPATH puts it before the venv's
# editable (pure) install. Needs a C compiler; pip fetches mypy for the build.
COMPILED := build/compiled
COMPILED_STAMP := $(COMPILED)/.built
$(COMPILED_STAMP): $(RUN_STAMP) setup.py build_support/backend.py build_support/compiled.txt \
		$(shell find broker exchanges storage -name '*.py')
	rm -rf $(COMPILED)
	LEVERET_COMPILE=1 $(PIP_INSTALL) --no-deps \
		--target $(COMPILED) .
	touch $@

compiled: $(COMPILED_STAMP)

run-fast: $(COMPILED_STAMP)
	PYTHONPATH=$(CURDIR)/$(COMPILED) $(VENV)/bin/leveret serve --host 127.0.0.1 --port 5672 \
		--data-dir ./data

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy reads modules from folders, and the namespace exists only in packaging (pyproject's
# package-dir): check a tree of links shaped as installed, leveret/ = broker/ + the others.
typecheck: $(TEST_STAMP)
	rm -rf build/typecheck && mkdir -p build/typecheck/leveret
	ln -s $(CURDIR)/broker/* $(CURDIR)/exchanges $(CURDIR)/storage $(CURDIR)/pipeline \
		build/typecheck/leveret/
	cd build/typecheck && $(CURDIR)/$(VENV)/bin/mypy --config-file $(CURDIR)/pyproject.toml

# The suite on the pure build, then again on the compiled one (LEVERET_TEST_BUILD tells
# tests/test_cli.py which build must be the one imported), on uvloop as `leveret serve` runs.
unit: $(TEST_STAMP) system-deps $(RABBITMQADMIN)
	LEVERET_TEST_BUILD="pure Python" $(PY) -m pytest -q

unit-compiled: $(TEST_STAMP) system-deps $(RABBITMQADMIN) $(COMPILED_STAMP)
	LEVERET_TEST_BUILD=compiled LEVERET_TEST_LOOP=uvloop PYTHONPATH=$(CURDIR)/$(COMPILED) \
		$(PY) -m pytest -q

test: lint typecheck unit unit-compiled

# The documentation site (docs/, mkdocs.yml) in build/site/; tests/test_docs_site.py builds
# it with --strict in make test.
docs: $(TEST_STAMP)
	$(VENV)/bin/mkdocs build --strict

bench: $(TEST_STAMP)
	$(PY) bench/run.py --readme

bench-pipeline: $(TEST_STAMP)
	$(PY) bench/pipeline_bench.py

# The AMQP fuzzer (tests/fuzz/) for FUZZ_SECONDS: progress, then executions/s and coverage.
# `make test` runs it briefly (tests/fuzz/test_fuzz.py).
FUZZ_SECONDS ?= 300
fuzz: $(TEST_STAMP)
	$(PY) bench/fuzz.py --seconds $(FUZZ_SECONDS)

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
