PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench asan clean

$(STAMP): requirements-dev.txt pyproject.toml setup.py $(wildcard csrc/*) $(wildcard plugins/*/pyproject.toml)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/aisimulate run examples/mooncake_demo.json

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) bench/run.py

# the C core under AddressSanitizer and UBSan (build/asan/), with the native and parity tests
asan: $(STAMP)
	bench/asan.sh $(abspath $(PY))

clean:
	rm -rf $(VENV) build *.egg-info aisimulate_core/_native*.so
