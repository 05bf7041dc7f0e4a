"""The `make demo` pieces: SmolLM2-135M-Instruct offline (``model``), a seeded arithmetic mix with its reward
(``arithmetic``), the training recipe (``train``) and sampled accuracy (``evaluate``). Used by examples/demo.py and
bench/bench_learning.py; docs/report.md describes the demo."""
