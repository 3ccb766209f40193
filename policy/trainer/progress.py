"""A rich progress bar per stage showing the few numbers worth watching while it runs."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

WATCHED = ("reward_mean", "pass_rate", "kl", "value_loss", "explained_variance", "sft_loss")


class StageProgress:
    def __init__(self, stage: str, total: int, completed: int = 0, enabled: bool = True):
        self._progress = None
        if enabled:
            self._progress = Progress(
                TextColumn(f"[bold]{stage}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[watched]}"),
            )
            self._task = self._progress.add_task(stage, total=total, completed=completed, watched="")

    def __enter__(self) -> StageProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def advance(self, metrics: dict) -> None:
        if self._progress is None:
            return
        watched = "  ".join(f"{k}={metrics[k]:.3g}" for k in WATCHED if isinstance(metrics.get(k), float))
        self._progress.update(self._task, advance=1, watched=watched)
