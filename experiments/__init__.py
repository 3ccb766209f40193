"""The measurement scripts behind the README's numbers (its "Measured" section), run from a
checkout with `python -m experiments.NAME`. Not installed with the package: nothing in
pytest_cudaagent, benchmark, policy or synthesis imports them."""
