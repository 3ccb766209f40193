"""A leaderboard's files: leaderboard.md, leaderboard.csv (the per-level summary), problems.csv
and report.html. Above both leaderboard.py (the tables) and report_html.py (the page), which
then need not import each other both ways."""

from __future__ import annotations

from pathlib import Path

from .leaderboard import Leaderboard, to_markdown
from .report_html import write_html


def write_reports(board: Leaderboard, out_dir: str | Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "leaderboard.md", "csv": out_dir / "leaderboard.csv",
             "problems_csv": out_dir / "problems.csv", "html": out_dir / "report.html"}
    paths["markdown"].write_text(to_markdown(board))
    board.summary.to_csv(paths["csv"], index=False)
    board.problems.to_csv(paths["problems_csv"], index=False)
    write_html(board, paths["html"])
    return paths
