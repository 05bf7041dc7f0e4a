"""What several test folders share, imported as ``helpers.<module>`` (pytest puts ``tests/`` on ``sys.path``; the
scripts in ``tests/scripts`` and ``bench/`` insert it themselves).

- ``allocation``: allocators with a known behaviour (recording, skewed, weighted) and the brute-force knapsack optimum;
- ``trainer``: a tiny dataset, deterministic and scripted rewards, CPU configs and one trainer builder;
- ``tiny_model`` / ``tiny_vlm``: a tiny Qwen2 / LLaVA and its tokenizer / processor, built offline;
- ``stand_in_llm``: an in-process stand-in for vLLM's ``LLM`` (TRL's colocate mode on CPU);
- ``launch``: ``accelerate launch`` on two CPU ranks, and subprocesses that cannot hang a test run.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
