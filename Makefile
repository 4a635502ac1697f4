PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench asan clean

$(STAMP): requirements-dev.txt pyproject.toml setup.py $(wildcard csrc/*) $(wildcard plugins/*/pyproject.toml)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -r requirements-dev.txt
	@# bytecode as a wheel install has it: an editable checkout would otherwise compile every
	@# import on each start where PYTHONDONTWRITEBYTECODE is set (35-40 ms of `aisimulate run`)
	$(PY) -m compileall -q aisimulate_core plugins > /dev/null
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/aisimulate run examples/mooncake_demo.json

# the whole suite, then every recorded reference case again on the pure-Python twins of the C
# core (AISIMULATE_BACKEND=python): both backends must match the reference exactly
REFERENCE_TESTS := tests/test_reference_parity.py tests/test_semantics_cases.py \
	tests/test_cluster_cases.py tests/test_trace_reference.py tests/test_cluster_weka.py

test: $(STAMP)
	$(PY) -m pytest
	AISIMULATE_BACKEND=python $(PY) -m pytest -q $(REFERENCE_TESTS)

# every workload against the reference, then the 32-point sweep (--jobs 1 and 2, its per-point
# overhead over bare runs)
bench: $(STAMP)
	$(PY) bench/run.py
	$(PY) bench/sweep_bench.py

# the C core under AddressSanitizer and UBSan (build/asan/), with the native and parity tests
asan: $(STAMP)
	bench/asan.sh $(abspath $(PY))

clean:
	rm -rf $(VENV) build *.egg-info aisimulate_core/_native*.so
