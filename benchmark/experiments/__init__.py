"""Lab-notebook measurement scripts: each says in one line what it measures; run with `python -m benchmark.experiments.NAME`."""
