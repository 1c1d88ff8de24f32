# Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# nbgrader runs `alembic` and jupyter-book runs kernels: the environment's bin/ comes first.
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup site test release check-release clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

## The website, every chapter executed: _build/html/index.html
site: setup
	$(VENV)/bin/jupyter-book build .

## The whole test suite
test: setup
	$(PY) -m pytest

## Regenerate exercises/ and reference/ from solutions/ (and fill the instructor's gradebook)
release: setup
	$(PY) -m coursetools release

## Fail if exercises/ or reference/ are stale
check-release: setup
	$(PY) -m coursetools release --check

clean:
	rm -rf _build
