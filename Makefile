# The two commands a newcomer needs (see README.md):
#   make run   - install what the server needs (runtime dependencies only) and start it
#                on streamdb.conf (data in ./data)
#   make test  - install what the tests need (test and spark extras, redis-server,
#                Prometheus, Java, ioredis, Chromium) and run every test
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
# Two stamps, one per set of dependencies: a venv made by `make run` has no test or
# Spark packages, so `make test` must install them even though the venv exists.
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
# The install compiles the core (setup.py; see docs/ARCHITECTURE.md "Compiled core"):
# an edited compiled module is rebuilt by installing again.
BUILD_INPUTS := pyproject.toml $(wildcard setup.py streamdb/compiled.py streamdb/*/*.pyx streamdb/*/*.pxd) \
                $(shell sed -n 's/^ *"\(streamdb\/.*\.py\)",$$/\1/p' streamdb/compiled.py)

.PHONY: run test soak deps test-deps redis-server redis-sentinel chromium prometheus java node-clients spark-deps bench clean

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

# The server's runtime dependencies only: no test or Spark extras.
$(RUN_STAMP): $(BUILD_INPUTS) | $(VPY)
	@echo "streamdb: installing the server's dependencies into $(VENV) and compiling its core with Cython (about 2 minutes on 2 cores)..."
	$(VPY) -m pip install -q -e .
	@echo "streamdb: installed"
	touch $@

# Everything the tests import (test + spark extras) includes the runtime set.
$(TEST_STAMP): $(BUILD_INPUTS) | $(VPY)
	@echo "streamdb: installing the server, test and Spark packages into $(VENV) and compiling the core with Cython (a few minutes)..."
	$(VPY) -m pip install -q -e '.[test,spark]'
	@echo "streamdb: installed"
	touch $@ $(RUN_STAMP)

# Both end with the byte-compiled modules up to date (quick when they are): an
# editable install leaves the package uncompiled, and where PYTHONDONTWRITEBYTECODE
# is set every start of the server (a restart after a crash, each start a benchmark
# or a test times) compiles the whole package again, ~55 ms of CPU.
deps: $(RUN_STAMP)
	@$(VPY) -m compileall -q streamdb >/dev/null
test-deps: $(TEST_STAMP)
	@$(VPY) -m compileall -q streamdb >/dev/null

# Differential tests and benchmarks compare against a real redis-server 7.0
# (Debian's package).  Install it when it is missing.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server from Debian's packages"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server redis-tools >/dev/null; }

# The high-availability tests run Debian's Redis Sentinel against StreamDB nodes
# (tests/replication/test_sentinel.py; they skip without it).
redis-sentinel:
	@command -v redis-sentinel >/dev/null 2>&1 || { \
	  echo "installing redis-sentinel from Debian's packages"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-sentinel >/dev/null; }

# The console's browser tests (tests/console/) drive Debian's headless Chromium through
# its chromedriver with Selenium (the test extra); they skip without it.
chromium:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	  echo "installing chromium and chromium-driver from Debian's packages (about 100 MB, a few minutes)..."; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null \
	  && echo "chromium installed"; }

# The Prometheus test runs Debian's Prometheus against StreamDB servers and queries the
# Grafana dashboard's expressions (tests/ops/test_prometheus.py; it skips without it).
# The test runs the binary with its own config and storage: the package's service and
# its recommended node exporter are not needed (on a systemd machine the package
# still enables and starts its own service, on port 9090).
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
	  echo "installing prometheus from Debian's packages (for the dashboard's test)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# (deps byte-compiles the package: see above.)
run: deps
	$(VPY) -m streamdb streamdb.conf

# ioredis (Node.js) for the client-compatibility test and the Sentinel failover test
# of its `sentinels` option (they skip without it); Node.js and npm from Debian's
# packages when either is missing, so that a fresh machine runs them too.
node-clients:
	@{ command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; } || { \
	  echo "installing Node.js and npm from Debian's packages (for the ioredis tests)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	@[ -d .cache/node/node_modules/ioredis ] || { \
	  echo "installing ioredis into .cache/node with npm"; \
	  mkdir -p .cache/node && npm install --prefix .cache/node --silent --no-audit --no-fund ioredis@5 >/dev/null 2>&1 \
	  || echo "ioredis not installed (npm failed): its tests will be skipped"; }

# A Java runtime for Spark from Debian's packages, when there is none.
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "installing a Java runtime (openjdk-17-jre-headless) for Spark"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }

# For the Spark pipelines (streamdb-spark) and the data source: the spark extra
# (pyspark, pyarrow) in the venv, and Java.
# The extra's requirements are read from pyproject.toml and installed on their own:
# `pip install -e '.[spark]'` would rebuild the package and compile the core again.
SPARK_REQS = $(VPY) -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['spark']))"
spark-deps: deps java
	@$(VPY) -c 'import pyspark, pyarrow' 2>/dev/null || { \
	  echo "streamdb: installing pyspark and pyarrow into $(VENV) (a large download)..."; \
	  $(SPARK_REQS) > $(VENV)/spark-requirements.txt && \
	  $(VPY) -m pip install -q -r $(VENV)/spark-requirements.txt; }

# STREAMDB_PURE=1 make test runs the tests on the plain Python core instead of
# the compiled one (the server processes the tests start inherit it);
# STREAMDB_TEST_STREAM_CACHE=64kb make test runs them with that stream cache.
test: test-deps redis-server redis-sentinel chromium prometheus node-clients java
	$(VPY) -m pytest -q $(PYTEST_ARGS)

# Long crash/soak loops, bounded by STREAMDB_SOAK_SECONDS (CI runs a short one).
soak: test-deps
	$(VPY) -m pytest -q -m soak $(PYTEST_ARGS)

bench: deps redis-server
	$(VPY) tools/bench.py

clean:
	rm -rf $(VENV) data .pytest_cache .hypothesis build
	find streamdb \( -name '*.so' -o -name '*.c' \) -delete
