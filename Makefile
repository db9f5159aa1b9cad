# mlbench: the commands a user and CI run. Everything installs into $(VENV).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
export MLBENCH_HOME ?= $(HOME)/.mlbench
# Open MPI refuses to start as root without these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install test-deps test chaos run stop bench study lint format docs clean

# The dashboard's browser libraries (uPlot), exactly as package-lock.json pins them; Django
# serves them as static files. Re-run only when the lockfile changes.
NODE_STAMP := node_modules/.installed
install: $(STAMP) $(NODE_STAMP)

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || bash scripts/apt-install.sh nodejs npm
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# torch goes in first and pinned: anything unpinned would pull a multi-GB CUDA build. Where
# pip's configured index has no CPU build of torch, use e.g.
# TORCH_INDEX=https://download.pytorch.org/whl/cpu make install
TORCH_INDEX ?=
$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -qq --upgrade pip
	$(PIP) install -qq -c constraints.txt $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) torch==2.13.0
	$(PIP) install -qq -c constraints.txt -e '.[all]'
	touch $(STAMP)

# System pieces the tests use (PostgreSQL binaries, Chromium); Redis comes from the venv.
# The original platform's client (mlbench-core 3.0.0) goes into a venv of its own: the
# compatibility suite drives it against a live master (tests/api/test_seed_client.py). It is
# installed without its own pins (a 2020 kubernetes client, torch), which it does not need
# to talk HTTP; only requests and kubernetes, at this project's versions.
SEED_VENV := .venv-seed
# The tensorflow implementation's framework (1.6 GB): the tests run it, `make run` does not
# need it, so it is installed here and not by `make install`.
TF_STAMP := $(VENV)/.tensorflow-installed
# The spark implementation's pyspark (490 MB, the same reasoning); its Java comes from the
# system: Debian's default-jre-headless, installed by scripts/install-test-deps.sh.
SPARK_STAMP := $(VENV)/.spark-installed
# The flink implementation's PyFlink (390 MB) cannot share $(VENV): its pins (py4j, pandas,
# numpy, protobuf) are not this project's, so it gets a venv of its own with the worker
# package and MPI, pinned by constraints-flink.txt. Runs of it name its Python with
# MLBENCH_FLINK_PYTHON (the tests do; docs/installation.rst).
FLINK_VENV := .venv-flink
FLINK_STAMP := $(FLINK_VENV)/.installed
# `make test` makes these with -j4: the system packages (apt), npm and the seed client's
# venv download beside the pip installs into $(VENV) and $(FLINK_VENV). Those build this
# checkout's editable wheel, which writes mlbench.egg-info here, so they go one at a time
# (order-only prerequisites: after $(STAMP), tensorflow, then spark, then flink). apt
# waits for npm, which may need apt itself.
test-deps: install $(SEED_VENV)/.installed $(TF_STAMP) $(SPARK_STAMP) $(FLINK_STAMP) \
  test-system-deps

.PHONY: test-system-deps
test-system-deps: | $(NODE_STAMP)
	bash scripts/install-test-deps.sh

$(TF_STAMP): $(STAMP) constraints.txt
	$(PIP) install -qq -c constraints.txt -e '.[tensorflow]'
	touch $@

$(SPARK_STAMP): $(STAMP) constraints.txt | $(TF_STAMP)
	$(PIP) install -qq -c constraints.txt -e '.[spark]'
	touch $@

# The MLflow tracking server that bench_api.py's ingestion runs beside ours (a venv of its
# own: its 88 packages are not this project's; constraints-mlflow.txt pins them).
MLFLOW_VENV := .venv-mlflow
MLFLOW_STAMP := $(MLFLOW_VENV)/.installed
$(MLFLOW_STAMP): constraints-mlflow.txt
	test -x $(MLFLOW_VENV)/bin/python || $(PYTHON) -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/pip install -qq -c constraints-mlflow.txt mlflow psycopg2-binary
	touch $@

$(FLINK_STAMP): setup.py constraints-flink.txt | $(SPARK_STAMP)
	test -x $(FLINK_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/pip install -qq -c constraints-flink.txt -e '.[flink]'
	touch $@

$(SEED_VENV)/.installed: constraints.txt
	test -x $(SEED_VENV)/bin/python || $(PYTHON) -m venv $(SEED_VENV)
	$(SEED_VENV)/bin/pip install -qq -c constraints.txt requests kubernetes
	$(SEED_VENV)/bin/pip install -qq -c constraints.txt --no-deps mlbench-core
	touch $@

# The tests get MLBENCH_HOMEs of their own, so they never touch (or cancel) the runs of a
# master started by `make run`; scripts/run-tests.sh says why the suite runs in two lanes.
test:
	$(MAKE) -j4 --output-sync=target test-deps
	PY=$(PY) bash scripts/run-tests.sh

# The chaos series' long form (tests/chaos/, docs/chaos.rst): CHAOS_RUNS runs queued on a
# real embedded master while faults of every kind come at moments drawn from CHAOS_SEED
# (a new seed when unset; it is printed, and replays the series). CHAOS_DRIVER=slurm runs
# it on the repository's local Slurm cluster. The summary in numbers is printed and written
# to chaos-results/chaos-<driver>-<seed>.json; exit status 1 when an invariant was violated.
CHAOS_RUNS ?= 40
CHAOS_DRIVER ?= local
CHAOS_SEED ?=
chaos: test-deps
	$(PY) -m tests.chaos --runs $(CHAOS_RUNS) --driver $(CHAOS_DRIVER) \
	  $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) --out chaos-results

# The default benchmark through the whole platform: start the embedded master under
# MLBENCH_HOME (nothing happens if it already runs), then ResNet-20 on CIFAR-10 (synthetic
# when the real data cannot be downloaded) with 2 workers of 1 core each and a 120 s
# training budget (accuracy after time), with a progress bar, the results and the dashboard URL.
RUN_BUDGET ?= 120
run: install
	$(VENV)/bin/mlbench up --detach
	$(VENV)/bin/mlbench run resnet20-cifar10-2-workers --task resnet20-cifar10 --workers 2 \
	  --cpus 1 --dataset auto --time-budget $(RUN_BUDGET) --wait

stop:
	@if [ -x $(VENV)/bin/mlbench ]; then $(VENV)/bin/mlbench down; else echo "nothing to stop"; fi

# The algorithm study's measurement (issue 45, docs/studies.rst): the seven algorithms over
# the suite's workloads at unlimited and 10 Mbit/s on the embedded master, written to
# bench-results/study-<id>.{json,md}. STUDY_ARGS narrows it, e.g. STUDY_ARGS="--workloads
# logreg-epsilon". Hours on 2 cores; tests/e2e/test_study.py is its short form in `make test`.
STUDY_ARGS ?=
study: install
	$(VENV)/bin/mlbench up --detach
	$(PY) tests/benchmarks/study.py $(STUDY_ARGS)

# bench_frameworks.py measures the tensorflow implementation too. QUICK=1 passes --quick to
# every bench: fewer rounds and smaller sets (the API's and the pages' benches keep their
# size): 66.5 minutes on 2 cores with the installs, against many hours for the long form.
QUICK ?=
bench: install $(TF_STAMP) $(SPARK_STAMP) $(FLINK_STAMP) $(MLFLOW_STAMP)
	@mkdir -p bench-results
	@set -e; for f in tests/benchmarks/bench_*.py; do echo "== $$f"; \
	  $(PY) $$f $(if $(QUICK),--quick); done
	@$(PY) tests/benchmarks/common.py --collect bench-results

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

docs: install
	$(VENV)/bin/sphinx-build -W -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) $(SEED_VENV) $(FLINK_VENV) $(MLFLOW_VENV) build dist *.egg-info docs/_build bench-results chaos-results test-output .pytest_cache .ruff_cache
	find . -name __pycache__ -prune -exec rm -rf {} +

# --- Kubernetes (docs/installation.rst) ----------------------------------------------------
# Both images, tagged REGISTRY/mlbench_master:VERSION and :latest (VERSION: setup.py's):
#   make images [BASE=hub|local|IMAGE] [ASSETS=npm|context] [device=cpu|cuda]
#               [PIP_CONF=host|FILE] [CA_BUNDLE=FILE] [docker_registry=REGISTRY]
# BASE=local makes a Debian base here with debootstrap (no Docker Hub); PIP_CONF and
# CA_BUNDLE reach the build as BuildKit secrets, never as a layer. Without a running
# engine, as root: scripts/images/engine.sh start (a private one; see its header).
# Build and push one image: make publish-docker component=master|worker docker_registry=REGISTRY
# [docker_tag=latest] [device=cpu|cuda] (device: the worker's torch build).
docker_tag ?= latest
device ?= cpu
BASE ?= hub
ASSETS ?=
PIP_CONF ?=
CA_BUNDLE ?=
IMAGE_BUILD = $(PYTHON) scripts/images/build.py --base $(BASE) --device $(device) \
  $(if $(ASSETS),--assets $(ASSETS)) $(if $(PIP_CONF),--pip-conf $(PIP_CONF)) \
  $(if $(CA_BUNDLE),--ca $(CA_BUNDLE)) $(if $(docker_registry),--registry $(docker_registry))
.PHONY: images publish-docker e2e-kind
images:
	$(IMAGE_BUILD)

publish-docker:
	@case "$(component)" in master|worker) ;; *) \
	  echo "usage: make publish-docker component=master|worker docker_registry=REGISTRY"; exit 2;; esac
	@test -n "$(docker_registry)" || { \
	  echo "set docker_registry=REGISTRY (e.g. gcr.io/PROJECT or localhost:5000)"; exit 2; }
	$(IMAGE_BUILD) --tag $(docker_tag) $(component)
	docker push $(docker_registry)/mlbench_$(component):$(docker_tag)

# On a machine with Docker, kind, kubectl and helm: a throwaway cluster, both images, the
# chart, one 2-worker run through the API that must end FINISHED; the cluster is deleted.
e2e-kind:
	bash scripts/k8s/e2e-kind.sh
