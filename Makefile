# kiln: `make demo` and `make test` do all set-up on a fresh Debian 12 machine.
PYTHON ?= python3
BUILD  ?= build
JOBS   ?= 2
PYTEST_ARGS ?=

.PHONY: setup build install demo test test-cpp test-python test-adaptive lint bench bench-knobs soak docs clean
QUICK ?=

setup:
	bash tools/setup.sh

# Configured every time (a few seconds): the options are explicit, so a build
# folder configured by hand with other options gets what `make` needs.
build: setup
	cmake -S . -B $(BUILD) -G Ninja -DKILN_BUILD_EXTENSION=ON -DKILN_BUILD_TESTS=ON -DKILN_BUILD_BENCH=ON \
	  -DCMAKE_PREFIX_PATH="$$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PYTHON) -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" \
	  -DPython3_EXECUTABLE="$$(command -v $(PYTHON))" > /dev/null
	cmake --build $(BUILD) -j $(JOBS)

# Editable install: registers the torch.backends entry point (autoload) and
# picks up python/kiln/_C*.so as CMake rebuilds it. Never resolves torch.
# (Re)installs unless kiln already resolves to this checkout.
install: build
	@test "$$($(PYTHON) -c 'import importlib.util as u; s = u.find_spec("kiln"); print(s.origin if s else "")' 2>/dev/null)" \
	  = "$(CURDIR)/python/kiln/__init__.py" || \
	  $(PYTHON) -m pip install -q --no-build-isolation --no-deps -e python

demo: install
	KILN_METRICS=1 $(PYTHON) examples/train_demo.py

test-cpp: build
	$(BUILD)/kiln_core_tests

test-python: install
	$(PYTHON) -m pytest -q tests/python $(PYTEST_ARGS)

# The in-process suite runs under the fixed policy (tests/python/conftest.py);
# conformance, the differential test and the cache suites (whose programs
# take the pytest process's policy) run again under the defaults.
ADAPTIVE_DEFAULTS = KILN_ASYNC_COMPILE=1 KILN_COMPILE_THRESHOLD=2
test-adaptive: install
	$(ADAPTIVE_DEFAULTS) $(PYTHON) -m pytest -q tests/python/test_opinfo_conformance.py \
	  tests/python/test_module_conformance.py tests/python/test_lazy_differential.py \
	  tests/python/test_cache.py tests/python/test_cache_crash.py $(PYTEST_ARGS)

test: test-cpp test-python test-adaptive

# Python lint and formatting (ruff.toml; ruff pinned in tools/setup.sh). To fix:
# `python3 -m ruff format . && python3 -m ruff check --fix .` (never --unsafe-fixes).
# Style and layering: ruff for Python, clang-format for C++ (configurations
# committed: ruff.toml, .clang-format), and DESIGN.md's include rules.
lint: setup
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check --diff .
	clang-format-19 --dry-run --Werror $$(git ls-files '*.cpp' '*.h')
	$(PYTHON) tools/check_layering.py .

# Writes bench/results/<date>-<host>.json and regenerates docs/benchmarks.md
# and docs/img/*.png. Every (workload, contender) pair runs in a fresh process,
# interleaved over 5 rounds. QUICK=1: size scale 0.25, one round, torch.compile
# on gpt_train only, under 5 minutes (benchmarks.md says what it left out).
bench: install
	@$(PYTHON) -c 'import matplotlib' 2>/dev/null || $(PYTHON) -m pip install -q matplotlib
	$(PYTHON) bench/run_bench.py $(if $(QUICK),--quick,) --micro $(BUILD)/kiln_runtime_bench --report

# What each adaptive-eager knob setting does against the defaults, in fresh
# interleaved processes (bench/knob_sweep.py; the numbers of docs/tuning.md).
# Writes bench/results/knobs-<date>-<host>.json. About 10 minutes.
bench-knobs: install
	$(PYTHON) bench/knob_sweep.py

# The persistent-cache issue's memory soak: one process, SOAK_PROGRAMS random
# programs in lazy mode, each checked against eager CPU; resident memory must
# level off (bench/soak.py). Writes bench/results/soak-<date>.json.
SOAK_PROGRAMS ?= 20000
soak: install
	$(PYTHON) bench/soak.py --programs $(SOAK_PROGRAMS) --out bench/results/soak-$$(date +%Y-%m-%d).json

docs: install
	$(PYTHON) -m kiln knobs --markdown > docs/knobs.md

clean:
	rm -rf $(BUILD) python/kiln/_C*.so
