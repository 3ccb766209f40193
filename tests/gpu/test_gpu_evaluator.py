"""The evaluator on a CUDA GPU: bundled candidates, device time, poisoning, the xdist lock."""

import os
import shutil
import subprocess
import sys

import pytest

from pytest_cudaagent import EvalConfig, evaluate
from tests.helpers import CUDA_CANDIDATES, PROBLEMS, REPO, TEST_PROBLEMS

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", sorted(p.stem for p in PROBLEMS.glob("*.py")))
def test_bundled_cuda_candidate_passes_and_is_timed(name):
    result = evaluate(PROBLEMS / f"{name}.py", CUDA_CANDIDATES / f"{name}.py", EvalConfig(device="cuda"))
    assert result.status == "passed", result.summary() + result.log
    candidate = result.timing["candidate"]
    assert candidate.median_ms > 0 and candidate.device_ms is not None and candidate.device_ms > 0
    assert {"eager", "compile"} <= set(result.timing)
    assert result.speedup_vs_eager and result.speedup_vs_compile
    assert result.kernels, "the profiler saw no kernel"
    assert result.env["gpu_name"] and result.reward >= 1
    assert not result.precision, result.precision  # full fp32 everywhere


def test_uninitialised_output_reads_poison_not_an_old_answer(tmp_path):
    lazy = tmp_path / "lazy.py"
    lazy.write_text(
        "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, *args):\n        super().__init__()\n"
        "    def forward(self, x):\n        return torch.empty_like(x)\n")
    result = evaluate(TEST_PROBLEMS / "small_leaky_relu.py", lazy, EvalConfig(device="cuda", timing=False))
    assert result.status == "incorrect"
    assert result.trials[0].mismatches == result.trials[0].numel


def test_two_xdist_workers_on_one_gpu_never_time_at_once(tmp_path):
    """Three bundled pairs on two xdist workers: both workers evaluate, and no two timings (the
    candidates' and the eager baselines') overlap. Three, not all five: the point is two workers
    at once, and each pair costs its builds and timings on the device."""
    problems, candidates = tmp_path / "problems", tmp_path / "candidates"
    problems.mkdir()
    candidates.mkdir()
    names = ("leaky_relu", "row_sum", "softmax")
    for name in names:
        shutil.copy(PROBLEMS / f"{name}.py", problems)
        shutil.copy(CUDA_CANDIDATES / f"{name}.py", candidates)  # same name and bytes: same build cache entry
    lock_log = tmp_path / "lock.log"
    env = {**os.environ, "CUDAAGENT_LOCK_LOG": str(lock_log)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist", "-n", "2", "-p", "no:cacheprovider", "-v",
         "--cudaagent-problems", str(problems), "--cudaagent-candidates", str(candidates),
         "--cudaagent-device", "cuda", "--cudaagent-baselines", "eager", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[gw0]" in run.stdout and "[gw1]" in run.stdout, run.stdout[-3000:]  # both workers evaluated
    holds = sorted((int(a), int(r), holder) for _, holder, a, r in (line.split() for line in lock_log.read_text().splitlines()))
    assert len(holds) >= len(names) and len({holder for *_, holder in holds}) >= 2, holds
    for (_, released, _), (acquired, _, _) in zip(holds, holds[1:], strict=False):
        assert acquired >= released


def test_split_nvcc_and_nvcc_give_the_same_verdicts_and_error_lines(tmp_path):
    """split_nvcc (the default) against nvcc itself, each from an empty build cache: the bundled
    candidate passes under both; one with an undeclared name fails to build under both, with the
    front end's error line in Result.error."""
    honest = CUDA_CANDIDATES / "leaky_relu.py"
    broken = tmp_path / "broken_leaky_relu.py"
    broken.write_text(honest.read_text().replace("v.x = v.x > 0.f", "v.x = undeclared > 0.f", 1))
    for split in (False, True):
        config = EvalConfig(device="cuda", timing=False, baselines=(), split_nvcc=split, cache_dir=tmp_path / f"cache-{split}")
        passed = evaluate(PROBLEMS / "leaky_relu.py", honest, config)
        assert passed.status == "passed", (split, passed.summary() + passed.log)
        failed = evaluate(PROBLEMS / "leaky_relu.py", broken, config)
        assert failed.status == "build_error", (split, failed.summary())
        assert 'identifier "undeclared" is undefined' in failed.error, (split, failed.error)


_FLAGGED_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, drawn_on_gpu):
        return x + drawn_on_gpu


def get_inputs():
    {draw}
    return [x, torch.tensor(float(torch.empty(0).is_cuda))]


def get_init_inputs():
    return []
'''
_ADDS = ("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x, drawn_on_gpu):\n"
         "        return x + {value}\n")


@pytest.mark.parametrize("draw, drawn_on_gpu", [
    ("x = torch.randn(64, 64)", 1.0),
    # A generator of the host's cannot draw on the GPU: the whole get_inputs runs on the host.
    ("x = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))", 0.0),
], ids=["on the gpu", "needs the host"])
def test_inputs_are_drawn_on_the_gpu_unless_get_inputs_needs_the_host(tmp_path, draw, drawn_on_gpu):
    problem, candidate = tmp_path / "flagged.py", tmp_path / "adds.py"
    problem.write_text(_FLAGGED_PROBLEM.format(draw=draw))
    candidate.write_text(_ADDS.format(value=drawn_on_gpu))
    result = evaluate(problem, candidate, EvalConfig(device="cuda", timing=False, policy="permissive"))
    assert result.status == "passed", result.summary() + result.log


def test_a_batch_shares_the_reference_on_the_gpu():
    """Three bundled leaky ReLU evaluations under one batch id (reference_batch.py): the second and
    third use the first's reference worker, its CUDA context and prepared sets, and still pass and
    are timed on inputs of their own; a vandal in between (it zeroes what it was sent) changes
    nothing for the next."""
    from pytest_cudaagent.workers.reference_batch import close_kept
    from tests.helpers import TEST_CANDIDATES

    config = EvalConfig(device="cuda", reference_batch="gpu-batch", baselines=("eager",))
    try:
        first = evaluate(PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py", config)
        vandal = evaluate(PROBLEMS / "leaky_relu.py", TEST_CANDIDATES / "zeroes_shared_memory_leaky.py", config)
        third = evaluate(PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py", config)
    finally:
        close_kept()
    assert first.status == "passed" and third.status == "passed", first.summary() + third.summary()
    assert vandal.status != "passed"
    assert [first.env["reference_shared"], vandal.env["reference_shared"], third.env["reference_shared"]] == [1, 2, 3]
    assert third.timing["candidate"].median_ms > 0 and "reference.prepare" not in third.profile


def test_the_next_problems_reference_is_served_by_the_same_process_on_the_gpu(tmp_path):
    """reused_reference.py on the GPU: three problems in a row without timing, each reference
    after the first served by the first's process, its CUDA context kept open; each verdict its
    own (the first problem's code against the third is wrong there), and the kept context counted
    in no footprint (the peak is reset at release)."""
    from pytest_cudaagent.workers import reused_reference

    def its_own_model(problem):
        path = tmp_path / f"{problem.stem}_as_candidate.py"
        path.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
        return path

    config = EvalConfig(device="cuda", timing=False, policy="permissive")
    reused_reference.allow()
    try:
        leaky = evaluate(PROBLEMS / "leaky_relu.py", its_own_model(PROBLEMS / "leaky_relu.py"), config)
        softmax = evaluate(PROBLEMS / "softmax.py", its_own_model(PROBLEMS / "softmax.py"), config)
        wrong = evaluate(PROBLEMS / "row_sum.py", its_own_model(PROBLEMS / "leaky_relu.py"), config)
    finally:
        reused_reference.allow(False)
    assert [leaky.status, softmax.status] == ["passed"] * 2, leaky.summary() + softmax.summary()
    assert wrong.status != "passed" and not wrong.correct
    assert len({result.env["pids"]["reference"] for result in (leaky, softmax, wrong)}) == 1
    assert [softmax.env["reference_reused"], wrong.env["reference_reused"]] == [1, 2]
    # The kept process's context opened once: the later ones' preparation opened none.
    assert softmax.profile["reference.prepare.gpu"] < 0.05 and wrong.profile["reference.prepare.gpu"] < 0.05


def test_the_next_candidate_starts_ahead_on_the_gpu():
    """start_ahead.py on the GPU: the bundled leaky ReLU is announced after a PyTorch-written one;
    its worker (CUDA context, sandbox, load_inline build) starts once the first has built, while
    the first is checked and timed beside it; its evaluation finds it built and passes, timed as
    one started with its evaluation is."""
    from pytest_cudaagent.workers import start_ahead
    from tests.helpers import TEST_CANDIDATES

    config = EvalConfig(device="cuda", policy="permissive", baselines=("eager",))
    try:
        start_ahead.state().announce(PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py", config)
        first = evaluate(PROBLEMS / "leaky_relu.py", TEST_CANDIDATES / "pytorch_leaky_relu.py", config)
        ahead = evaluate(PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py", config)
    finally:
        start_ahead.forget()
    assert first.status == "passed" and ahead.status == "passed", first.summary() + ahead.summary()
    assert ahead.env["started_ahead_s"] > first.phase_seconds["correctness"]
    # Built before its evaluation: what remained of the build is short beside the build itself.
    assert ahead.phase_seconds["build"] < ahead.profile["candidate.built_after"]
    assert ahead.timing["candidate"].median_ms > 0 and ahead.speedup_vs_eager is not None
