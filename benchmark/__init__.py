"""KernelBench-style batch benchmarking on top of the evaluator: load problem sets, pair
candidate solutions, evaluate them in parallel through the pytest plugin, time baselines, and
report leaderboards (markdown, CSV, HTML)."""
