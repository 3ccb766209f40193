"""The synthesis run: propose candidates, drop the statically bad ones here, filter the rest on
worker processes, write each kept task as a KernelBench-format file, record every candidate in
the manifest, and summarise. Resumable: a run directory's manifest says what is already done.
A time budget (`stop_after_s`) stops proposing new candidates and lets those in flight finish,
so a run bounded in time still ends with its summary."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from pytest_cudaagent.core.files import BadFileError, check_problem
from pytest_cudaagent.records.state_files import remove_leftovers, write_atomically
from pytest_cudaagent.terminal import console as console_for_output

from .catalogue import Catalogue
from .compose import Composer, ComposerConfig
from .contamination import ContaminationIndex, load_kernelbench_index
from .filters import FilterConfig, FilterOutcome
from .manifest import Manifest, TaskRecord
from .pool import FilterPool, PoolConfig
from .report import write_summary
from .signature import ProblemSignature, problem_signature, stochastic_calls
from .stage_log import STAGE_LOG
from .task import Task

CATALOGUE_FILE = "catalogue.json"
CRAWL_LOG_FILE = "crawl_log.csv"
TASKS_DIR = "tasks"


class Proposer(Protocol):
    origin: str

    def task_id(self, index: int) -> str: ...

    def propose(self, index: int) -> Task: ...


@dataclass
class SynthConfig:
    count: int
    out_dir: Path
    seed: int = 0
    kernelbench: Path | None = None
    similarity: float = 0.8
    catalogue: Path | None = None  # default: <out_dir>/catalogue.json, crawled when missing
    transformers_models: int | None = None  # crawl only the first N transformers models
    resume: bool = False
    stop_after_s: float | None = None  # propose no new candidate after this many seconds
    filters: FilterConfig = field(default_factory=FilterConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)
    composer: ComposerConfig = field(default_factory=ComposerConfig)


def static_checks(task: Task, index: ContaminationIndex) -> tuple[ProblemSignature | None, FilterOutcome]:
    """The checks that need no run: format, stochastic operators, contamination, duplicates."""
    outcome = FilterOutcome(source=task.source)
    with tempfile.TemporaryDirectory(prefix="cudaagent-synth-") as directory:
        path = Path(directory) / f"{task.task_id}.py"
        path.write_text(task.source)
        try:
            check_problem(path)
            signature = problem_signature(task.source)
        except (BadFileError, SyntaxError) as error:
            return None, outcome.fail("bad_format", str(error))
    random_calls = stochastic_calls(task.source)
    if random_calls:
        outcome.fail("stochastic_operator", f"draws random numbers: {', '.join(random_calls)}")
    if not outcome.reasons and (source := index.contaminated_by(signature)):
        outcome.fail("contaminated_kernelbench", f"near-duplicate of KernelBench {source}")
    if not outcome.reasons and (first := index.duplicate_of(task.task_id, signature)):
        outcome.fail("duplicate", f"same operator sequence and input ranks as {first}")
    outcome.checks["static"] = "fail" if outcome.reasons else "pass"
    return signature, outcome


def record_for(task: Task, signature: ProblemSignature | None, outcome: FilterOutcome,
               path: str | None) -> TaskRecord:
    return TaskRecord(
        id=task.task_id, origin=task.origin, source_hash=task.source_hash,
        operators=task.operators or (signature.operators if signature else []),
        families=signature.operators if signature else [],
        input_shapes=task.input_shapes, dtype=task.dtype, kept=outcome.kept,
        reasons=outcome.reasons, details=outcome.details, checks=outcome.checks,
        eager_ms=outcome.eager_ms, compile_ms=outcome.compile_ms, batch_size=outcome.batch_size,
        output_shapes=outcome.output_shapes, filter_seconds=outcome.filter_seconds, path=path,
        lock_wait_seconds=outcome.lock_wait_seconds, finished_at=time.time(),
    )


class ProgressLine:
    """A plain line every `every_s` seconds when the console is not a terminal (a log file, a
    remote job's output), where rich's bar shows nothing until the run ends."""

    def __init__(self, console: Console, total: int, started: float, every_s: float = 30.0):
        self.console, self.total, self.started, self.every_s = console, total, started, every_s
        self.done = 0
        self.last_print = started

    def maybe_print(self, kept: int) -> None:
        self.done += 1
        now = time.perf_counter()
        if self.console.is_terminal or (now - self.last_print < self.every_s and self.done < self.total):
            return
        self.last_print = now
        elapsed = now - self.started
        self.console.print(f"synth: {self.done}/{self.total} filtered, {kept} kept, {elapsed:.0f} s, "
                           f"{self.done / elapsed * 3600:.0f} candidates/h", highlight=False)


def load_or_crawl_catalogue(config: SynthConfig, console: Console) -> Catalogue:
    path = config.catalogue or config.out_dir / CATALOGUE_FILE
    if Path(path).is_file():
        return Catalogue.load(path)
    from .crawl import crawl

    console.print(f"[bold]No catalogue at {path}: crawling torch and transformers (a minute or two)")
    catalogue = crawl(transformers_models=config.transformers_models)
    catalogue.save(path)
    catalogue.save_log(Path(path).with_name(CRAWL_LOG_FILE))
    return catalogue


def run_synthesis(config: SynthConfig, proposer: Proposer | None = None,
                  console: Console | None = None) -> pd.DataFrame:
    console = console or console_for_output(stderr=True)
    out_dir = Path(config.out_dir)
    manifest = Manifest(out_dir)
    if manifest.records and not config.resume:
        raise FileExistsError(
            f"{out_dir} already holds a run ({len(manifest.records)} candidates); pass --resume "
            "to continue it, or choose another --out"
        )
    if manifest.skipped_message:
        console.print(f"[yellow]{escape(manifest.skipped_message)}[/]", highlight=False)
    (out_dir / TASKS_DIR).mkdir(parents=True, exist_ok=True)
    remove_leftovers(out_dir / TASKS_DIR)  # task files a killed session was writing
    if proposer is None:
        proposer = Composer(load_or_crawl_catalogue(config, console), config.composer, config.seed)
    index = (load_kernelbench_index(config.kernelbench, config.similarity)
             if config.kernelbench else ContaminationIndex(config.similarity))
    for record in manifest.records.values():  # duplicates of candidates from earlier sessions
        ranks = [len(shape) for shape in record.input_shapes]
        index.duplicate_of(record.id, ProblemSignature(record.families, ranks))

    write_lock = threading.Lock()
    signatures: dict[str, ProblemSignature | None] = {}
    todo = [i for i in range(config.count) if proposer.task_id(i) not in manifest.records]
    session = manifest.start_session(count=config.count, todo=len(todo), workers=config.pool.workers,
                                     device=config.filters.device, stop_after_s=config.stop_after_s)
    pool_config = dataclasses.replace(config.pool, stage_log=out_dir / STAGE_LOG)
    started = time.perf_counter()
    columns = [TextColumn("[bold]synth"), BarColumn(), MofNCompleteColumn(),
               TextColumn("kept {task.fields[kept]}"), TimeRemainingColumn()]
    log_line = ProgressLine(console, len(todo), started)
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("synth", total=len(todo), kept=0)
        kept_count = 0

        def finish(task: Task, outcome: FilterOutcome) -> None:
            nonlocal kept_count
            with write_lock:
                path = None
                if outcome.kept:
                    path = f"{TASKS_DIR}/{task.task_id}.py"
                    write_atomically(out_dir / path, outcome.source)
                    kept_count += 1
                manifest.append(record_for(task, signatures.pop(task.task_id, None), outcome, path))
                progress.update(bar, advance=1, kept=kept_count)
                log_line.maybe_print(kept_count)

        def candidates():
            for position in todo:
                if config.stop_after_s is not None and time.perf_counter() - started >= config.stop_after_s:
                    console.print(f"synth: time budget of {config.stop_after_s:.0f} s spent; no new "
                                  "candidates, finishing those in flight (--resume continues)", highlight=False)
                    return
                task = proposer.propose(position)
                signature, outcome = static_checks(task, index)
                signatures[task.task_id] = signature
                if outcome.reasons:
                    finish(task, outcome)
                else:
                    yield task

        FilterPool(config.filters, pool_config).run(candidates(), finish)
    manifest.end_session(session)
    frame = manifest.frame()
    manifest.write_parquet()
    summary = write_summary(frame, out_dir, manifest.sessions())
    console.print(f"{int(frame['kept'].sum())} of {len(frame)} kept; summary in {summary}")
    return frame


def check_file(problem: Path, filters: FilterConfig, kernelbench: Path | None = None,
               similarity: float = 0.8, task_timeout_s: float = PoolConfig.task_timeout_s) -> dict:
    """Every filter on one problem file, the runtime ones in a worker process (`cudaagent synth
    check` and the cudaagent_synth pytest plugin)."""
    index = load_kernelbench_index(kernelbench, similarity) if kernelbench else ContaminationIndex(similarity)
    task = Task(problem.stem, problem.read_text(), "file")
    signature, outcome = static_checks(task, index)
    if not outcome.reasons:
        outcomes = []
        FilterPool(filters, PoolConfig(workers=1, task_timeout_s=task_timeout_s)).run(
            iter([task]), lambda _, result: outcomes.append(result))
        checks = {**outcome.checks, **outcomes[0].checks}
        outcome = outcomes[0]
        outcome.checks = checks
    verdict = outcome.to_dict()
    verdict.pop("source")
    verdict["problem"] = str(problem)
    verdict["operators"] = signature.operators if signature else []
    return verdict
