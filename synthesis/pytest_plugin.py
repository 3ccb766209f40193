"""pytest plugin: the synthesis filters as test items, one per problem file, so that pytest-xdist
spreads them over workers and GPUs (each xdist worker is pinned to one GPU by the cudaagent
plugin). An item passes when its task is kept and fails with the filters' reasons otherwise.

    pytest -p no:cacheprovider -n 8 --cudaagent-synth tasks/ --cudaagent-synth-out verdicts.jsonl

Hooks and options only: the work is `synthesis.pipeline.check_file` (the same as `cudaagent synth
check`: the static checks, then the runtime filters in a worker process with a timeout). Each file
is checked on its own, so near-duplicates among the files are not looked for here (`synth run`
does that); near-duplicates of KernelBench are, with --cudaagent-synth-kernelbench.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cudaagent.core.config import resolve_device
from pytest_cudaagent.plugin import drop_default_tests
from pytest_cudaagent.records.user_paths import absolute_path


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cudaagent-synth", "cuda-agent synthesis filters")
    group.addoption("--cudaagent-synth", action="append", default=[], metavar="PATH",
                    help="a problem file or a directory of them to filter (repeatable)")
    group.addoption("--cudaagent-synth-out", default=None, metavar="FILE",
                    help="append every verdict to this JSONL file as it finishes")
    group.addoption("--cudaagent-synth-kernelbench", default=None, metavar="PATH",
                    help="KernelBench clone or dataset files: drop near-duplicates of its problems")
    group.addoption("--cudaagent-synth-window", default="1,100", metavar="MIN_MS,MAX_MS",
                    help="eager runtime window in ms (default 1,100)")


WINDOW = pytest.StashKey[tuple[float, float]]()


def absolute(typed: str, base: Path) -> Path:
    """A path option against the directory pytest started in, before any test changes directory."""
    return Path(absolute_path(typed, base))


def pytest_configure(config: pytest.Config) -> None:
    try:
        min_ms, max_ms = (float(v) for v in config.getoption("cudaagent_synth_window").split(","))
    except ValueError:
        raise pytest.UsageError("--cudaagent-synth-window takes MIN_MS,MAX_MS, e.g. 1,100") from None
    config.stash[WINDOW] = (min_ms, max_ms)
    if config.getoption("cudaagent_synth") and getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS:
        # No test paths on the command line: collect nothing but the tasks (pytest would
        # otherwise walk the current folder, or the project's testpaths, for tests).
        config.args[:] = []


def problem_files(paths: list[str], base: Path) -> list[Path]:
    """The files to check, absolute against `base` (where pytest started); messages name them
    as typed."""
    files = []
    for typed in paths:
        path = absolute(typed, base)
        if path.is_dir():
            files += sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
        elif path.is_file():
            files.append(path)
        else:
            raise pytest.UsageError(f"--cudaagent-synth {typed}: no such file or directory")
    return files


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    files = problem_files(config.getoption("cudaagent_synth"), config.invocation_params.dir)
    if files:
        drop_default_tests(config, items)
    for path in files:
        items.append(SynthFilterItem.from_parent(session, name=f"cudaagent-synth::{path.stem}", path_to_check=path))


class TaskDropped(Exception):
    def __init__(self, verdict: dict):
        details = "; ".join(f"{reason}: {verdict['details'].get(reason, '')}" for reason in verdict["reasons"])
        super().__init__(f"dropped: {details}")
        self.verdict = verdict


class SynthFilterItem(pytest.Item):
    def __init__(self, *, path_to_check: Path, **kwargs):
        super().__init__(**kwargs)
        self.path_to_check = path_to_check

    def runtest(self) -> None:
        from .filters import FilterConfig
        from .pipeline import check_file

        device = resolve_device(self.config.getoption("cudaagent_device", None) or "auto")
        base = self.config.invocation_params.dir
        kernelbench = self.config.getoption("cudaagent_synth_kernelbench")
        min_ms, max_ms = self.config.stash[WINDOW]
        filters = FilterConfig(device=device, min_ms=min_ms, max_ms=max_ms)
        verdict = check_file(self.path_to_check, filters, absolute(kernelbench, base) if kernelbench else None)
        self.user_properties.append(("cudaagent_synth_verdict", json.dumps(verdict)))
        out = self.config.getoption("cudaagent_synth_out")
        if out:
            from pytest_cudaagent.records.results_file import append_json_line

            append_json_line(absolute(out, base), json.dumps(verdict))
        if not verdict["kept"]:
            raise TaskDropped(verdict)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, TaskDropped):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path_to_check, None, f"cudaagent-synth: {self.path_to_check.name}"
