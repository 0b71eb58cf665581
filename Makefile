# Herald's two contracts: `make run` and `make test` set up everything they need on a fresh
# Debian machine (apt packages, a venv, pip packages), then run.

VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= data
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: all setup system-deps run test test-soak lint proto bench clean

all: test

system-deps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server (apt)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: system-deps $(VENV)/.installed

run: setup
	$(VENV)/bin/herald standalone --data-dir $(DATA_DIR)

test: setup lint
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-soak: setup
	HERALD_SOAK=1 $(PY) -m pytest -q tests/chaos $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check services tests bench proto
	$(VENV)/bin/mypy
	cd services && ../$(VENV)/bin/lint-imports --config ../pyproject.toml

proto: setup
	$(PY) proto/generate.py

bench: setup
	$(PY) bench/produce_consume.py --messages 200000 --size 100
	$(PY) bench/produce_consume.py --messages 100000 --size 1024
	$(PY) bench/produce_consume.py --messages 200000 --size 100 --cluster 3/2/2
	$(PY) bench/produce_consume.py --messages 200000 --size 100 --proxy
	$(PY) bench/failover_gap.py
	$(PY) bench/dlq_worker.py --letters 5000

clean:
	rm -rf $(VENV) $(DATA_DIR) .pytest_cache .mypy_cache .ruff_cache
