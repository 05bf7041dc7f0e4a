"""Helpers of examples/demo.py (and bench/bench_learning_smollm2.py): the seeded arithmetic questions and their
exact-match reward (``arithmetic``), SmolLM2-135M-Instruct as a local folder, offline too (``model``), and sampled
accuracy (``evaluate``). Imported as ``demo_utils``: a script in examples/ has that folder on ``sys.path``."""
