# The verbs of the project. Every target sets up what it needs first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DMQ    := $(VENV)/bin/dropboxmq
STAMP  := $(VENV)/.installed

# Debian packages the fault-injection, power-loss and database tests, the JMS adapter's ActiveMQ run and the multi-host (network file system on loopback) tests need (CI is root).
APT_PACKAGES ?= fiu-utils libfiu-dev python3-fiu xfsprogs postgresql openjdk-17-jdk-headless libgeronimo-jms-1.1-spec-java libactivemq-java \
  moosefs-master moosefs-chunkserver moosefs-client glusterfs-server glusterfs-client sshfs openssh-server openssh-client samba smbnetfs

.PHONY: setup system-deps run conformance conformance-spark conformance-celery conformance-jms test spec spec-deep bench bench-netfs stress stress-smoke clean

setup: $(STAMP)

system-deps:        ## Debian packages (root); skipped when all are present
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml Makefile   # a changed install recipe (the path entry below) re-runs it
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	# The editable install's import hook is invisible to mypy (PEP 561) and to Spark's data-source
	# discovery (pkgutil): a plain path entry for reference/ makes user code type-check and Spark find it.
	$(PY) -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_path("purelib"), "dropboxmq-reference.pth").write_text(str(pathlib.Path("reference").resolve()) + "\n")'
	touch $@

REPORTS := reports

run: setup          ## the main job: the conformance suite on the embedded default (reference, shell, broken examples), TLC included
	$(DMQ) conformance run --out $(REPORTS)/conformance --html $(REPORTS)/conformance.html --junit $(REPORTS)/conformance.xml

conformance: setup  ## the conformance suite; IMPL=path/to/manifest.toml (or a shipped one by name, e.g. activemq) judges one implementation, ONLY=check id
	$(DMQ) conformance run $(if $(IMPL),--impl $(IMPL)) $(if $(ONLY),--only $(ONLY)) --out $(REPORTS)/conformance \
	  --html $(REPORTS)/conformance.html --junit $(REPORTS)/conformance.xml

conformance-spark: setup  ## Spark jobs under the suite: the data source's producer and consumer pass, Spark's own text writer and file stream source are caught
	$(DMQ) conformance run --impl spark-producer --impl spark-consumer --impl spark-text-writer --impl spark-file-stream \
	  --out $(REPORTS)/conformance-spark --html $(REPORTS)/conformance-spark.html --junit $(REPORTS)/conformance-spark.xml

conformance-jms: setup  ## JMS providers through the Java adapter: ActiveMQ passes, the defective wrappers over it are caught by the checks aimed at them (needs make system-deps)
	$(DMQ) conformance run --impl activemq --impl defective-jms-ack-before-listener --impl defective-jms-per-message-ack \
	  --impl defective-jms-concurrent-listeners --out $(REPORTS)/conformance-jms --html $(REPORTS)/conformance-jms.html \
	  --junit $(REPORTS)/conformance-jms.xml

conformance-celery: setup  ## Celery's producer and worker on the dropboxmq:// kombu transport under the suite
	$(DMQ) conformance run --impl celery-producer --impl celery-worker \
	  --out $(REPORTS)/conformance-celery --html $(REPORTS)/conformance-celery.html --junit $(REPORTS)/conformance-celery.xml

test: setup         ## the whole suite, in parallel
	$(PY) -m pytest -n auto

spec: setup         ## SANY + TLC: CI models, mutants, witnesses
	$(DMQ) spec check

spec-deep: setup
	$(DMQ) spec check --deep

bench: setup        ## floor (C when gcc/cc is present), reference and peers side by side; results in stress/results/
	$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) -m dropboxmq_stress.bench --json stress/results/bench-$$(date +%Y-%m-%d-%H%M%S).json
	$(PY) -m dropboxmq_stress.spark_bench --json stress/results/spark-bench-$$(date +%Y-%m-%d-%H%M%S).json
	$(MAKE) bench-netfs

bench-netfs: setup  ## make bench's network-file-system part: local disk, MooseFS, GlusterFS, sshfs on loopback (each skipped with its reason without root, FUSE or packages); ~6 min
	$(PY) -m dropboxmq_stress.netfs_bench --json stress/results/netfs-bench-$$(date +%Y-%m-%d-%H%M%S).json

stress: setup system-deps   ## every nemesis (long profile), the hostile-root fuzzer's and the API model tester's long profiles, every crash state (deep), the multi-host case on MooseFS and sshfs; root needed for tmpfs / loop / FUSE mounts
	$(DMQ) stress run --profile long --out reports/stress-long --baseline stress/baselines/long.json
	DROPBOXMQ_FUZZ_PROFILE=long $(PY) -m pytest -n auto -q tests/test_hostile_fuzz.py
	mkdir -p reports && $(PY) -m dropboxmq_stress.apitester --profile long --seconds 900 --json reports/apitester-long.json
	$(PY) -m dropboxmq_stress.crashstates --deep --json reports/crashstates-deep.json
	# two hosts on real network file systems on loopback (issue 28); exit 1 unless lost 0, only flagged duplicates, nothing left
	$(PY) -m dropboxmq_stress.multihost --fs moosefs --kill --restart-server --json reports/multihost-moosefs.json
	$(PY) -m dropboxmq_stress.multihost --fs sshfs --kill --restart-server --cut --json reports/multihost-sshfs.json

stress-smoke: setup system-deps   ## <= 3 min: kills + contention + full disk + fail-at-N
	$(DMQ) stress run --profile smoke --out reports/stress-smoke --baseline stress/baselines/smoke.json

clean:
	rm -rf $(VENV) var reports .pytest_cache
