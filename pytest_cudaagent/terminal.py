"""The commands' rich Console: on a terminal, its width; elsewhere (a log file, a pipe, CI) wide
enough that tables, paths and compiler lines are never wrapped or cut ("fast…", "geom…"), so a
log reads as the terminal would at full width."""

from __future__ import annotations

import os
import sys

from rich.console import Console

# Off a terminal, rich would take 80 columns. COLUMNS still wins where the user set it.
LOG_WIDTH = 400


def console(stderr: bool = False, **options) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if "width" not in options and not os.environ.get("COLUMNS") and not stream.isatty():
        options["width"] = LOG_WIDTH
    return Console(stderr=stderr, **options)
