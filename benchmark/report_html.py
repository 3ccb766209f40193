"""The self-contained HTML report: the leaderboard's tables and matplotlib plots embedded as
base64 PNG (fast_p curves per level, speedup histograms, candidate vs compile time per problem)."""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on the servers this runs on
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .leaderboard import NOTES, Leaderboard, fast_p  # noqa: E402

# fast_p is drawn from p = 0 to this factor: past it few kernels remain on KernelBench.
FAST_P_MAX = 4.0


def figure_png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def fast_p_curves(best: pd.DataFrame) -> str:
    levels = sorted(best["level"].unique())
    figure, axes = plt.subplots(1, len(levels), figsize=(5 * len(levels), 3.6), squeeze=False)
    p_values = np.linspace(0.0, FAST_P_MAX, 81)
    for axis, level in zip(axes[0], levels, strict=True):
        problems = best[best["level"] == level]
        for run, run_problems in problems.groupby("run", sort=False):
            for mode, style in (("eager", "--"), ("compile", "-"), ("max-autotune", ":")):
                if run_problems[f"speedup_{mode}"].isna().all():
                    continue
                axis.plot(p_values, [fast_p(run_problems, mode, p) for p in p_values], style,
                          label=f"{run} vs {mode}")
        axis.set(title=f"{level}: fast_p", xlabel="speedup threshold p", ylabel="% of problems", ylim=(0, 102))
        axis.axvline(1.0, color="grey", linewidth=0.6)
        axis.legend(fontsize=7)
    return figure_png(figure)


def speedup_histograms(frame: pd.DataFrame) -> str:
    modes = [mode for mode in ("eager", "compile") if not frame[f"speedup_{mode}"].isna().all()]
    figure, axes = plt.subplots(1, max(len(modes), 1), figsize=(5 * max(len(modes), 1), 3.6), squeeze=False)
    for axis, mode in zip(axes[0], modes, strict=False):  # one empty axis when no mode
        speedups = frame[f"speedup_{mode}"].dropna()
        speedups = speedups[speedups > 0]
        bins = np.logspace(math.log10(speedups.min() / 1.1), math.log10(speedups.max() * 1.1), 25)
        for run, run_rows in frame.groupby("run", sort=False):
            values = run_rows[f"speedup_{mode}"].dropna()
            axis.hist(values[values > 0], bins=bins, alpha=0.6, label=run)
        axis.set_xscale("log")
        axis.axvline(1.0, color="grey", linewidth=0.6)
        axis.set(title=f"speedup vs {mode} (passed candidates)", xlabel="speedup (log)", ylabel="candidates")
        axis.legend(fontsize=7)
    if not modes:
        axes[0][0].text(0.5, 0.5, "no baseline timed", ha="center", va="center")
        axes[0][0].set_axis_off()
    return figure_png(figure)


def time_scatter(best: pd.DataFrame) -> str:
    """Each solved problem's best candidate time against its torch.compile (else eager) time."""
    reference = "compile_ms" if not best["compile_ms"].isna().all() else "eager_ms"
    solved = best[best["passed"]].dropna(subset=["candidate_ms", reference])
    figure, axis = plt.subplots(figsize=(5.5, 4.5))
    for level, rows in solved.groupby("level"):
        axis.scatter(rows[reference], rows["candidate_ms"], s=18, label=level)
    if len(solved):
        low = min(solved[reference].min(), solved["candidate_ms"].min()) / 1.5
        high = max(solved[reference].max(), solved["candidate_ms"].max()) * 1.5
        axis.plot([low, high], [low, high], color="grey", linewidth=0.8, label="same time")
        axis.set(xscale="log", yscale="log")
        axis.legend(fontsize=7)
    axis.set(title="best candidate vs " + reference.removesuffix("_ms"), xlabel=f"{reference.removesuffix('_ms')} ms",
             ylabel="candidate ms (below the line: faster)")
    return figure_png(figure)


_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}
table{border-collapse:collapse;font-size:13px;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f2f2f2}
td:first-child,th:first-child{text-align:left}img{max-width:100%}
.scroll{overflow-x:auto;max-width:100%;margin-bottom:1.5em}.scroll table{margin-bottom:0}"""


def _table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p>(none)</p>"
    # A wide table scrolls in its own box instead of running past the page (and clipping the
    # flagged column at 1300 px).
    html = frame.to_html(index=False, na_rep="-", float_format=lambda value: f"{value:g}", border=0)
    return f'<div class="scroll">{html}</div>'


def render_html(board: Leaderboard) -> str:
    # A plot needs rows: every Result may be flagged for review (kept out of the headline tables).
    plots = [(title, draw(data)) for title, draw, data in (
        ("fast_p per level", fast_p_curves, board.best),
        ("Speedup distribution", speedup_histograms, board.frame),
        ("Per-problem time", time_scatter, board.best)) if not data.empty]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>cuda-agent benchmark</title>"
             f"<style>{_STYLE}</style></head><body><h1>cuda-agent benchmark</h1>"
             f"<p><b>{html.escape(board.convention)}</b></p><p>{html.escape(NOTES)}</p>",
             "<h2>Leaderboard</h2>", _table(board.summary),
             "<h2>fast_p by baseline</h2>", _table(board.fast_p)]
    parts += [f"<h2>{title}</h2><img alt='{title}' src='data:image/png;base64,{png}'>" for title, png in plots]
    parts += ["<h2>Reward distribution (candidates)</h2>", _table(board.rewards),
              "<h2>Best of k per problem</h2>", _table(board.problems),
              "<h2>Flagged for review</h2>", _table(board.flagged),
              "<h2>Harness errors</h2>", _table(board.harness_errors)]
    if board.frame["run"].nunique() > 1:
        parts += ["<h2>Changes between runs</h2>", _table(board.changes)]
    parts += ["<h2>Environment</h2>", _table(board.environment), "</body></html>"]
    return "\n".join(parts)


def write_html(board: Leaderboard, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(render_html(board))
    return path
