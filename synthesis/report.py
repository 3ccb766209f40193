"""The run's summary: kept and dropped per reason, operator frequencies, runtimes and the time
each filter took, as markdown tables and one figure."""

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


def filter_time_table(frame: pd.DataFrame) -> pd.DataFrame:
    totals: dict[str, float] = collections.defaultdict(float)
    runs: dict[str, int] = collections.defaultdict(int)
    for text in frame["filter_seconds"]:
        for name, seconds in (json.loads(text) if isinstance(text, str) else text).items():
            totals[name] += seconds
            runs[name] += 1
    all_seconds = sum(totals.values()) or 1.0
    return pd.DataFrame(
        [(name, runs[name], totals[name], totals[name] / runs[name], totals[name] / all_seconds)
         for name in totals],
        columns=["filter", "tasks", "seconds", "seconds per task", "share"],
    )


def write_summary(frame: pd.DataFrame, run_dir: str | Path, wall_seconds: float | None = None) -> Path:
    run_dir = Path(run_dir)
    kept = int(frame["kept"].sum()) if len(frame) else 0
    lines = [f"# Synthesis run: {len(frame)} candidates, {kept} kept", ""]
    if wall_seconds:
        per_hour = len(frame) / wall_seconds * 3600
        lines += [f"Wall time {wall_seconds:.0f} s: {per_hour:.0f} candidates filtered per hour, "
                  f"{kept / wall_seconds * 3600:.0f} kept per hour.", ""]
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
