"""End to end on the CPU: compose, filter in a worker, write tasks, manifest, summary; resume;
the CLI handlers and their exit codes; the LLM composer through a fake engine."""

import argparse
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import psutil
import pytest

from synthesis.cli import main, register
from synthesis.llm_composer import EngineAdapter, LLMComposer, extract_code
from synthesis.manifest import Manifest
from synthesis.pipeline import SynthConfig, run_synthesis
from synthesis.pool import PoolConfig

from .test_filters import HONEST, task

REPO = Path(__file__).resolve().parents[2]


def config_for(tmp_path, small_catalogue, tiny_sizes, cpu_filters, count, resume=False):
    small_catalogue.save(tmp_path / "catalogue.json")
    return SynthConfig(count=count, out_dir=tmp_path / "run", seed=3,
                       catalogue=tmp_path / "catalogue.json", resume=resume,
                       filters=cpu_filters, pool=PoolConfig(workers=1, task_timeout_s=120),
                       composer=tiny_sizes)


def test_run_writes_tasks_manifest_and_summary_and_resumes(tmp_path, small_catalogue, tiny_sizes, cpu_filters):
    frame = run_synthesis(config_for(tmp_path, small_catalogue, tiny_sizes, cpu_filters, 5))
    run = tmp_path / "run"
    manifest = pd.read_parquet(run / "manifest.parquet")
    assert len(manifest) == 5 and list(manifest["id"]) == sorted(manifest["id"])
    assert {"id", "source_hash", "operators", "input_shapes", "eager_ms", "compile_ms", "reasons",
            "checks", "kept"} <= set(manifest.columns)
    kept = manifest[manifest["kept"]]
    assert len(kept) >= 1
    for row in kept.itertuples():
        assert (run / row.path).is_file() and row.eager_ms > 0
    summary = (run / "summary.md").read_text()
    assert "Outcomes" in summary and "Operators in kept tasks" in summary and "Time per filter" in summary
    assert (run / "summary.png").stat().st_size > 0

    with pytest.raises(FileExistsError, match="--resume"):
        run_synthesis(config_for(tmp_path, small_catalogue, tiny_sizes, cpu_filters, 7))
    frame = run_synthesis(config_for(tmp_path, small_catalogue, tiny_sizes, cpu_filters, 7, resume=True))
    assert len(frame) == 7
    lines = (run / "manifest.jsonl").read_text().splitlines()
    assert len(lines) == 7  # the first five were not filtered again


def test_check_command_exit_codes(tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(HONEST)
    bad.write_text(task("return x - x"))
    window = ["--device", "cpu", "--min-ms", "0.0001", "--max-ms", "100000", "--no-compile"]
    assert main(["synth", "check", str(good), "--output", str(tmp_path / "good.json"), *window]) == 0
    verdict = json.loads((tmp_path / "good.json").read_text())
    assert verdict["kept"] and verdict["reasons"] == []
    assert main(["synth", "check", str(bad), "--output", str(tmp_path / "bad.json"), *window]) == 1
    assert json.loads((tmp_path / "bad.json").read_text())["reasons"] == ["constant_output"]
    stochastic = tmp_path / "random.py"
    stochastic.write_text(task("return torch.nn.functional.dropout(x, 0.5)"))
    assert main(["synth", "check", str(stochastic), *window]) == 1  # refused before any run


def test_register_adds_synth_with_three_commands():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    for argv in (["synth", "crawl"], ["synth", "run", "--count", "1", "--out", "x"], ["synth", "check", "p.py"]):
        assert callable(parser.parse_args(argv).func)


@dataclass
class FakeCompletion:
    text: str
    token_ids: list


@dataclass
class FakeSampling:
    temperature: float
    max_tokens: int


class FakeEngine:
    """Answers every conversation with a fixed task: the first honest, the second random."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, sampling):
        self.calls.append((prompts, sampling))
        answers = [f"Here it is:\n```python\n{HONEST}```", f"```python\n{task('return x + torch.rand_like(x)')}```"]
        return [FakeCompletion(answers[len(self.calls) % 2 == 0], []) for _ in prompts]


def test_llm_composer_through_an_engine_and_the_same_filters(tmp_path, small_catalogue, tiny_sizes, cpu_filters):
    engine = FakeEngine()
    composer = LLMComposer(small_catalogue, EngineAdapter(engine, FakeSampling), seed=1)
    proposed = composer.propose(0)
    assert proposed.task_id == "llm_1_000000" and proposed.origin == "llm"
    assert "class Model" in proposed.source and "```" not in proposed.source
    prompts, sampling = engine.calls[0]
    assert prompts[0][0]["role"] == "system" and "Fuse these operators" in prompts[0][1]["content"]
    assert isinstance(sampling, FakeSampling)
    assert composer.seed_operators(4) == composer.seed_operators(4)

    config = config_for(tmp_path, small_catalogue, tiny_sizes, cpu_filters, 2)
    frame = run_synthesis(config, LLMComposer(small_catalogue, EngineAdapter(FakeEngine(), FakeSampling)))
    by_id = frame.set_index("id")
    assert by_id.loc["llm_0_000000", "reasons"] == ["stochastic_operator"] or by_id.loc["llm_0_000001", "reasons"] == ["stochastic_operator"]
    assert by_id["kept"].sum() == 1


def test_extract_code_takes_the_fenced_block():
    assert extract_code("text\n```python\nx = 1\n```\nmore") == "x = 1\n"
    assert extract_code("x = 2") == "x = 2\n"


def test_progress_line_prints_counts_and_rate_when_not_a_terminal():
    import io
    import time

    from rich.console import Console

    from synthesis.pipeline import ProgressLine

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=200)
    line = ProgressLine(console, total=3, started=time.perf_counter() - 10, every_s=3600)
    line.maybe_print(kept=0)  # too soon after the start: nothing
    assert buffer.getvalue() == ""
    line.maybe_print(kept=1)
    line.maybe_print(kept=2)  # the last one always prints
    assert "3/3 filtered, 2 kept" in buffer.getvalue()
    assert "candidates/h" in buffer.getvalue()


def test_time_budget_stops_proposing_and_resume_goes_on(tmp_path, small_catalogue, tiny_sizes, cpu_filters):
    config = config_for(tmp_path, small_catalogue, tiny_sizes, cpu_filters, 4)
    config.stop_after_s = 0.0
    frame = run_synthesis(config)
    assert len(frame) == 0
    assert "0 candidates" in (tmp_path / "run" / "summary.md").read_text()
    frame = run_synthesis(config_for(tmp_path, small_catalogue, tiny_sizes, cpu_filters, 2, resume=True))
    assert len(frame) == 2 and frame["finished_at"].notna().all()
    sessions = Manifest(tmp_path / "run").sessions()
    assert [("ended_at" in session, session["todo"]) for session in sessions] == [(True, 4), (True, 2)]


def test_sigterm_ends_the_workers_and_the_killed_run_is_summarised(tmp_path, small_catalogue):
    """`timeout` sends SIGTERM: the run's process exits and takes its filter workers with it
    (they would otherwise go on holding the GPU); the summary then comes from the manifest."""
    small_catalogue.save(tmp_path / "catalogue.json")
    run = tmp_path / "run"
    command = [sys.executable, "-m", "synthesis", "synth", "run", "--count", "500", "--out", str(run),
               "--catalogue", str(tmp_path / "catalogue.json"), "--workers", "2", "--device", "cpu",
               "--min-ms", "0.0001", "--max-ms", "100000", "--no-compile"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(Manifest(run).records) < 2 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
        workers = psutil.Process(process.pid).children(recursive=True)
        assert len(Manifest(run).records) >= 2 and workers
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 128 + signal.SIGTERM
        _, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, f"workers left running: {alive}"
    finally:
        process.kill()
    summary = subprocess.run([sys.executable, "-m", "experiments.synthesis_throughput", "--out", str(run),
                              "--summary-only", "--json", str(tmp_path / "numbers.json")],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr
    assert "| 0 | 2 |" in summary.stdout and "killed" in summary.stdout  # the session table
    assert "## Outcomes" in summary.stdout and "## Time per filter" in summary.stdout
    numbers = json.loads((tmp_path / "numbers.json").read_text())
    assert numbers["candidates"] == len(Manifest(run).records) and numbers["candidates_per_hour"] > 0
