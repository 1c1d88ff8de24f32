# Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# nbgrader runs `alembic` and jupyter-book runs kernels: the environment's bin/ comes first.
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup sandbox browser postgres slurm speech private site test lint release check-release benchmark clean

setup: $(VENV)/.installed sandbox browser postgres slurm speech private

## The course directory is the instructor's alone: other users of the machine read no solution, submission or grade
private: $(VENV)/.installed
	@$(PY) -m course.privacy .

## bubblewrap walls off submitted code while it is graded (Debian package bubblewrap)
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "warning: bubblewrap is missing (apt-get install bubblewrap): grading falls back to resource limits"; fi; }

## headless Chromium opens every page of the built site in the browser test (Debian chromium, chromium-driver)
browser:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "warning: chromium is missing (apt-get install chromium chromium-driver): the browser test is skipped"; fi; }

## PostgreSQL: the gradebook several grading machines share, and the test of concurrent runs (Debian postgresql)
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; \
	  else echo "warning: PostgreSQL is missing (apt-get install postgresql): the concurrent-gradebook test on PostgreSQL is skipped"; fi; }

## Slurm: the batch example's test runs deploy/grade.sbatch on a one-node cluster here (Debian slurm-wlm, with munge)
slurm:
	@command -v slurmctld >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null; \
	  else echo "warning: Slurm is missing (apt-get install slurm-wlm): the Slurm example's test is skipped"; fi; }

## espeak-ng: python -m course.tools spoken-digits makes chapter 10's spoken digits with it, and a test makes one voice
## again (Debian espeak-ng; the shipped data set needs nothing installed)
speech:
	@command -v espeak-ng >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq espeak-ng >/dev/null; \
	  else echo "warning: espeak-ng is missing (apt-get install espeak-ng): the test that rebuilds the spoken digits is skipped"; fi; }

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

## The website: _build/html/index.html, and its Chinese edition in _build/html/zh/. A page is executed again when
## its code, or the code it runs, changed; the Chinese pages, whose code cells are the English ones, reuse those runs
site: setup
	$(PY) -m course.tools site

## The linter (configured in pyproject.toml), then the whole test suite; SKIP_SLOW=1 leaves out the long end-to-end items
## Two workers (pytest-xdist): most items wait on a subprocess or a sandbox, so a second keeps both cores busy.
## A module, or the modules that read one session build, run in one worker (tests/conftest.py).
TEST_WORKERS ?= 2
test: setup lint
	$(PY) -m pytest -n $(TEST_WORKERS) --no-loadscope-reorder $(if $(SKIP_SLOW),-m "not slow")

lint: setup
	$(VENV)/bin/ruff check .

## Regenerate exercises/ and reference/ from solutions/ (and fill the instructor's gradebook)
release: setup
	$(PY) -m course.tools release

## Fail if exercises/ or reference/ are stale
check-release: setup
	$(PY) -m course.tools release --check

## Grade a class in one process and in two shards at once (time, memory), then 40 submissions against nbgrader autograde
benchmark: setup
	$(PY) benchmarks/grading.py --nbgrader

clean:
	rm -rf _build
