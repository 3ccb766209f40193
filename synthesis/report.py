"""The run's summary: candidates and kept per hour, kept and dropped per reason, operator
frequencies, runtimes and the time each filter took, as markdown tables and one figure. Built
from the manifest alone, so a run that was stopped or killed is summarised the same way."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pandas as pd

RUNTIME_BINS_MS = [0, 1, 2, 5, 10, 20, 50, 100, float("inf")]


def markdown_table(frame: pd.DataFrame) -> str:
    columns = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in frame.itertuples(index=False):
        cells = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def reason_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Candidates per outcome: kept, or the filter that dropped them (the first that failed)."""
    outcome = frame.apply(lambda row: "kept" if row["kept"] else (list(row["reasons"]) or ["?"])[0], axis=1)
    counts = outcome.value_counts()
    table = pd.DataFrame({"outcome": counts.index, "tasks": counts.values})
    table["share"] = (table["tasks"] / max(len(frame), 1)).map(lambda v: f"{v:.1%}")
    return table


def operator_table(frame: pd.DataFrame, top: int = 30) -> pd.DataFrame:
    counter = collections.Counter(op for ops in frame.loc[frame["kept"], "families"] for op in ops)
    return pd.DataFrame(counter.most_common(top), columns=["operator", "kept tasks"])


def runtime_table(frame: pd.DataFrame) -> pd.DataFrame:
    kept = frame[frame["kept"]]
    rows = []
    for column in ("eager_ms", "compile_ms"):
        values = kept[column].dropna()
        counts = pd.cut(values, RUNTIME_BINS_MS, right=False).value_counts(sort=False)
        rows.append(pd.Series(counts.values, index=[str(i) for i in counts.index], name=column))
    table = pd.DataFrame(rows).T.reset_index().rename(columns={"index": "runtime (ms)"})
    return table


LOCK_WAIT_ROW = "(of these, waiting for the device lock)"


def filter_time_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Worker seconds per filter stage, over the tasks that reached it; a last row says how much
    of the workload and compile stages went to waiting for another worker's timing."""
    totals: dict[str, float] = collections.defaultdict(float)
    runs: dict[str, int] = collections.defaultdict(int)
    for text in frame["filter_seconds"]:
        for name, seconds in (json.loads(text) if isinstance(text, str) else text).items():
            totals[name] += seconds
            runs[name] += 1
    all_seconds = sum(totals.values()) or 1.0
    rows = [(name, runs[name], totals[name], totals[name] / runs[name], totals[name] / all_seconds)
            for name in totals]
    waits = frame["lock_wait_seconds"].fillna(0.0).astype(float)
    if waits.sum() > 0:
        waiting = int((waits > 0).sum())
        rows.append((LOCK_WAIT_ROW, waiting, float(waits.sum()), float(waits.sum()) / waiting, waits.sum() / all_seconds))
    return pd.DataFrame(rows, columns=["filter", "tasks", "seconds", "seconds per task", "share"])


def session_table(frame: pd.DataFrame, sessions: list[dict]) -> pd.DataFrame:
    """Per session: its workers, the candidates it recorded, and its wall seconds, from its start
    to its clean end or, when it was killed, to the last candidate it recorded."""
    finished = frame["finished_at"].astype(float)
    starts = [session["started_at"] for session in sessions]
    rows = []
    for start, next_start, session in zip(starts, [*starts[1:], float("inf")], sessions, strict=True):
        mine = frame[(finished >= start) & (finished < next_start)]
        ended = "ended_at" in session
        end = session["ended_at"] if ended else (float(mine["finished_at"].max()) if len(mine) else start)
        rows.append((session["session"], session.get("workers"), len(mine), int(mine["kept"].sum()),
                     end - start, "clean" if ended else "killed"))
    return pd.DataFrame(rows, columns=["session", "workers", "candidates", "kept", "wall s", "end"])


def throughput(frame: pd.DataFrame, sessions: list[dict]) -> dict:
    """Candidates (all, and those that reached the runtime filters) and kept tasks, per hour of
    the sessions' wall time."""
    wall_s = float(session_table(frame, sessions)["wall s"].sum()) if sessions else None
    kept = int(frame["kept"].sum()) if len(frame) else 0
    runtime = int(frame["checks"].map(lambda text: "eager" in json.loads(text)).sum()) if len(frame) else 0
    numbers = {"candidates": len(frame), "runtime_filtered": runtime, "kept": kept, "sessions": len(sessions),
               "wall_s": wall_s}
    for name in ("candidates", "runtime_filtered", "kept"):
        numbers[f"{name}_per_hour"] = numbers[name] / wall_s * 3600 if wall_s else None
    return numbers


def throughput_lines(numbers: dict) -> list[str]:
    counts = (f"{numbers['candidates']} candidates ({numbers['runtime_filtered']} through the "
              f"runtime filters), {numbers['kept']} kept")
    if not numbers["wall_s"]:
        return [f"{counts}."]
    return [f"{counts}, in {numbers['wall_s']:.0f} s of wall time over {numbers['sessions']} "
            f"session(s): {numbers['candidates_per_hour']:.0f} candidates filtered per hour "
            f"({numbers['runtime_filtered_per_hour']:.0f} through the runtime filters), "
            f"{numbers['kept_per_hour']:.0f} kept per hour."]


def write_summary(frame: pd.DataFrame, run_dir: str | Path, sessions: list[dict] | None = None) -> Path:
    run_dir = Path(run_dir)
    kept = int(frame["kept"].sum()) if len(frame) else 0
    lines = [f"# Synthesis run: {len(frame)} candidates, {kept} kept", "",
             *throughput_lines(throughput(frame, sessions or [])), ""]
    sections = [
        ("Outcomes (first failed filter)", reason_table(frame)),
        ("Operators in kept tasks", operator_table(frame)),
        ("Runtime of kept tasks", runtime_table(frame)),
        ("Time per filter (worker seconds)", filter_time_table(frame)),
    ]
    for title, table in sections:
        lines += [f"## {title}", "", markdown_table(table) if len(table) else "(none)", ""]
    path = run_dir / "summary.md"
    path.write_text("\n".join(lines))
    plot_summary(frame, run_dir / "summary.png")
    return path


def plot_summary(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(16, 5))
    reasons = reason_table(frame)
    axes[0].barh(reasons["outcome"], reasons["tasks"], color="tab:blue")
    axes[0].set_title("candidates per outcome")
    operators = operator_table(frame, top=20)
    axes[1].barh(operators["operator"][::-1], operators["kept tasks"][::-1], color="tab:green")
    axes[1].set_title("operators in kept tasks (top 20)")
    eager = frame.loc[frame["kept"], "eager_ms"].dropna()
    if len(eager):
        bins = np.logspace(np.log10(max(eager.min(), 1e-3)), np.log10(eager.max() * 1.01), 20)
        axes[2].hist(eager, bins=bins, color="tab:orange")
        axes[2].set_xscale("log")
    axes[2].set_title("eager runtime of kept tasks (ms)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
