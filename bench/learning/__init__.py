"""The accuracy-per-token benchmark's parts: the task (task.py), its pretrained model (model.py), one RL run
(runs.py) and the statistics over seeds (analysis.py). ``bench/bench_learning.py`` is the command."""
