"""Lab-notebook scripts: each measures one thing for the README, run with `python -m benchmark.experiments.NAME`."""
