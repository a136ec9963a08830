# Leveret: two commands on a fresh machine, `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

RABBITMQADMIN := $(VENV)/bin/rabbitmqadmin

.PHONY: run test lint typecheck unit bench bench-pipeline clean system-deps

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,pipeline]'
	touch $(STAMP)

# System packages the test suite drives: headless Chromium for the management page test
# (Java for PySpark is on the machine). Installed once, only when missing (needs root).
system-deps:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q chromium)
	@command -v java >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q default-jre-headless)

# RabbitMQ's own management CLI, to test our management API with the real tool: the one
# Python script, taken out of Debian's rabbitmq-server package (downloaded, not installed:
# no Erlang, no service).
$(RABBITMQADMIN): $(STAMP)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; cd "$$tmp"; \
	apt-get download -q rabbitmq-server >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get download -q rabbitmq-server); \
	dpkg-deb -x rabbitmq-server_*.deb root; \
	cp root/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_management-*/priv/www/cli/rabbitmqadmin \
		"$(abspath $(RABBITMQADMIN))"
	chmod +x $(RABBITMQADMIN)

run: $(STAMP)
	$(VENV)/bin/leveret serve --host 127.0.0.1 --port 5672 --data-dir ./data

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP) system-deps $(RABBITMQADMIN)
	$(PY) -m pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(PY) bench/run.py

bench-pipeline: $(STAMP)
	$(PY) bench/pipeline_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
