"""The README's examples run as written (#45): the plugin's fixture example, from the
repository's root as the README says, on the CPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _python_block(containing: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    return next(block for block in blocks if containing in block)


@pytest.mark.slow
def test_the_plugin_fixture_example_passes_as_written(tmp_path):
    example = tmp_path / "test_readme_example.py"
    example.write_text(_python_block("def test_my_kernel(cudaagent)"))
    run = subprocess.run([sys.executable, "-m", "pytest", str(example), "-q", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout


def test_the_readme_names_where_kernelbench_comes_from_and_how_training_starts():
    text = (REPO / "README.md").read_text()
    assert "git clone https://github.com/ScalingIntelligence/KernelBench" in text
    training = text[text.index("### Training"):]
    assert "cudaagent train --config policy/trainer/configs/tiny-pipeline.yaml" in training[:800]
    assert (REPO / "policy/trainer/configs/tiny-pipeline.yaml").is_file()
