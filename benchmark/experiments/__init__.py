"""Lab-notebook scripts: each measures one thing the README quotes (`python -m benchmark.experiments.NAME`)."""
