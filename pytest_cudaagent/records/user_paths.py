"""Paths as the user typed them. Every command and pytest option makes its paths absolute against
the caller's working directory before anything runs in another one (the batch runner's pytest
runs in OUT/.bench-run, the agent's tools in a workspace), and messages name a path the way it
was typed, not its absolute spelling."""

from __future__ import annotations

import os
from pathlib import Path


def absolute_path(typed: str | Path, base: str | Path) -> str:
    """`typed` against `base`. abspath, not resolve(): a symlinked folder keeps the name the
    user knows it by."""
    return os.path.abspath(os.path.join(base, os.path.expanduser(str(typed))))


class TypedPaths:
    """Absolute paths for the work, the typed spelling for the messages."""

    def __init__(self, base: str | Path | None = None):
        self.base = Path(base) if base is not None else Path.cwd()
        self._typed: dict[str, str] = {}  # absolute -> as typed

    def absolute(self, typed: str | Path, base: str | Path | None = None) -> str:
        """`typed` against `base` (default: this object's), remembering its spelling."""
        absolute = absolute_path(typed, base or self.base)
        if absolute != str(typed):
            self._typed[absolute] = str(typed).rstrip("/") or str(typed)
        return absolute

    def resolve_args(self, args, *names: str) -> None:
        """Rewrites the named attributes of an argparse namespace in place (str, Path, or a list
        of them; None stays None), keeping each value's type."""
        for name in names:
            value = getattr(args, name, None)
            if isinstance(value, list):
                setattr(args, name, [type(item)(self.absolute(item)) for item in value])
            elif value is not None:
                setattr(args, name, type(value)(self.absolute(value)))

    def shown(self, message: str) -> str:
        """`message` with every absolute path this object made put back as typed (a path under
        one of them keeps its tail: KernelBench/level1/1_x.py)."""
        for absolute in sorted(self._typed, key=len, reverse=True):
            message = message.replace(absolute, self._typed[absolute])
        return message


def command_paths(args) -> TypedPaths:
    """The command's TypedPaths, made on first call: the attributes a subparser listed in its
    `path_args` default become absolute. `cudaagent`'s main calls it before running a command,
    and each command's handler too, so a handler called on its own (tests, `python -m`) is the same."""
    if getattr(args, "paths", None) is None:
        args.paths = TypedPaths()
        args.paths.resolve_args(args, *getattr(args, "path_args", ()))
    return args.paths
