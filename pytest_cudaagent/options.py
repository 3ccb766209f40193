"""The evaluator's options, declared once (as pytest-benchmark declares its own): `cudaagent
verify` and `cudaagent bench` add them with `add_eval_options(parser.add_argument)` (`--trials`),
the pytest plugin with `add_eval_options(group.addoption, "--cudaagent-", parser.addini)`
(`--cudaagent-trials`, ini `cudaagent_trials`), and all three turn what was given into an
EvalConfig with `eval_config`. An option not given leaves its base config's value: EvalConfig's
default, bench's own (`fast_build` on) or the plugin's `--cudaagent-config`. Every value is checked
here, whatever gave it (a command line, an ini file): a bad one is a ValueError naming the flag,
each command's usage error. Nothing here imports torch (`verify` answers a usage error at once)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .core.config import (
    BACKEND_HELP,
    BACKEND_PRESETS,
    BASELINE_MODES,
    BUILD_TIMEOUT_HELP,
    CONVENTIONS,
    MEMORY_POLICIES,
    MEMORY_POLICY_HELP,
    RUN_TIMEOUT_HELP,
    TOLERANCE_PRESETS,
    EvalConfig,
)
from .rules.rules import POLICY_NAMES

# What an ini twin's getini gives when the ini file does not set it (any string would be a value).
NOT_SET = object()


@dataclass(frozen=True)
class EvalOption:
    """One option: `name` is the flag without its prefix, `field` the EvalConfig field it sets
    (dotted for a nested one). A flag (`parse` None) sets the field to `sets`; an option with a
    value sets it to `parse(text)`, which raises ValueError for a bad value."""

    name: str
    field: str
    help: str
    sets: object = None
    parse: Callable[[str], object] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None

    @property
    def is_flag(self) -> bool:
        return self.parse is None

    def dest(self, prefix: str = "--") -> str:
        """The attribute argparse (or pytest's getoption) gives it: trials, cudaagent_trials."""
        return (prefix.lstrip("-") + self.name).replace("-", "_")


def _at_least_one(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"must be a whole number, not {text!r}") from None
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError("must be a positive number of seconds")
    return seconds


def _baselines(text: str) -> tuple[str, ...]:
    modes = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(set(modes) - set(BASELINE_MODES))
    if unknown:
        raise ValueError(f"names unknown baseline(s) {unknown}; use {', '.join(BASELINE_MODES)}")
    return modes


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return text
    return parse


def _choice(name: str, field: str, choices, help_text: str) -> EvalOption:
    choices = tuple(choices)
    default = getattr(EvalConfig, field)
    return EvalOption(name, field, f"{help_text} (default {default})", parse=_one_of(choices), choices=choices)


# The evaluator's options, in the order `--help` lists them.
EVAL_OPTIONS: tuple[EvalOption, ...] = (
    _choice("device", "device", ("auto", "cuda", "cpu"), "cuda, cpu or auto (cuda when a GPU is visible)"),
    EvalOption("trials", "trials", f"correctness trials with fresh inputs (default {EvalConfig.trials})",
               parse=_at_least_one, metavar="N"),
    EvalOption("baselines", "baselines",
               f"comma-separated: {', '.join(BASELINE_MODES)}; empty for none (default {','.join(EvalConfig.baselines)})",
               parse=_baselines, metavar="LIST"),
    EvalOption("no-timing", "timing", "check correctness only", sets=False),
    _choice("policy", "policy", POLICY_NAMES,
            "strict (the paper's rules), permissive (KernelBench's) or calibration (the reference as its own candidate)"),
    _choice("tolerance", "tolerance", sorted(TOLERANCE_PRESETS),
            "default: fp32 at 1e-2 (KernelBench v0.1, the paper); kernelbench-main: fp32 at 1e-4; strict"),
    _choice("convention", "convention", CONVENTIONS,
            "kernelbench: both models as constructed, built after the same seed; cuda-agent: eval mode, strict "
            "state_dict load (README, Conventions)"),
    _choice("backend", "backend", BACKEND_PRESETS, BACKEND_HELP),
    _choice("memory-policy", "memory_policy", MEMORY_POLICIES, MEMORY_POLICY_HELP + " (README, Device memory under load)"),
    EvalOption("require-sandbox", "require_sandbox",
               "refuse to run (exit 2) unless candidates can be fully sandboxed here (namespaces, Landlock, "
               "rlimits, a process limit; README, Isolation)", sets=True),
    EvalOption("timeout", "run_timeout_s", RUN_TIMEOUT_HELP, parse=_positive_seconds, metavar="S"),
    EvalOption("build-timeout", "build_timeout_s", BUILD_TIMEOUT_HELP, parse=_positive_seconds, metavar="S"),
    EvalOption("audit-timed-calls", "timing_config.audit_timed_calls",
               "run the operator audit on every timed call too (adds ~25 us per call on an H100)", sets=True),
    EvalOption("count-launch", "timing_config.overlap_launch",
               "synchronise before each timed call, so the host's launch time is counted (default: hidden under "
               "the L2 flush when all work is on one stream)", sets=False),
    EvalOption("timing-rounds", "timing_config.timing_rounds",
               "time the candidate and the eager baseline in N alternating rounds, the speedups then the ratio of "
               "lower deciles (eager then measured per evaluation, not cached; default 1: the candidate, then the "
               "baselines; a host-bound call on the GPU gets at least 10)",
               parse=_at_least_one, metavar="N"),
    EvalOption("fast-build", "fast_build",
               "build candidates through a shared precompiled torch/extension.h, made once per compiler, torch "
               "and flags (pays over many candidates: cudaagent bench's default; README, Builds)", sets=True),
    EvalOption("no-fast-build", "fast_build",
               "build every candidate the plain way, without the shared precompiled torch/extension.h "
               "(the default of verify and the pytest plugin)", sets=False),
)
OPTION_NAMES = tuple(option.name for option in EVAL_OPTIONS)


def add_eval_options(addoption: Callable[..., object], prefix: str = "--",
                     addini: Callable[..., object] | None = None) -> None:
    """Adds every evaluator option through `addoption` (argparse's add_argument, pytest's
    addoption), named `prefix` + name, default None (not given); with `addini` (pytest's), each
    gets an ini twin named as its dest, unset: NOT_SET."""
    for option in EVAL_OPTIONS:
        if option.is_flag:
            addoption(prefix + option.name, dest=option.dest(prefix), action="store_true", default=None,
                      help=option.help)
        else:
            addoption(prefix + option.name, dest=option.dest(prefix), default=None, choices=option.choices,
                      metavar=option.metavar, help=option.help)
        if addini is not None:
            addini(option.dest(prefix), help=option.help, type="bool" if option.is_flag else None, default=NOT_SET)


def namespace_values(args: object, prefix: str = "--") -> dict[str, object]:
    """name -> value of every evaluator option in an argparse namespace (None: not given)."""
    return {option.name: getattr(args, option.dest(prefix), None) for option in EVAL_OPTIONS}


def eval_config(values: Mapping[str, object], base: EvalConfig | None = None, prefix: str = "--") -> EvalConfig:
    """`base` (EvalConfig() if None) with every option given in `values` (name -> its text, or a
    number or list; for a flag True; None, False or absent: not given) applied. A new EvalConfig:
    `base` is left as it was. ValueError naming the option (`prefix` + name) for a bad value."""
    given = {option.name: values[option.name] for option in EVAL_OPTIONS
             if not any(values.get(option.name) is unset for unset in (None, NOT_SET, False))}
    flags_by_field: dict[str, list[str]] = {}
    for option in EVAL_OPTIONS:
        if option.is_flag and option.name in given:
            flags_by_field.setdefault(option.field, []).append(prefix + option.name)
    for flags in flags_by_field.values():
        if len(flags) > 1:
            raise ValueError(f"{' and '.join(flags)} contradict each other; give one")
    data = (base or EvalConfig()).to_dict()
    for option in EVAL_OPTIONS:
        if option.name not in given:
            continue
        value = given[option.name]
        if option.is_flag:
            value = option.sets
        else:
            if not isinstance(value, str):
                value = ",".join(value) if isinstance(value, (list, tuple)) else str(value)
            try:
                value = option.parse(value)
            except ValueError as error:
                raise ValueError(f"{prefix}{option.name} {error}") from None
        *parents, last = option.field.split(".")
        target = data
        for parent in parents:
            target = target[parent]
        target[last] = list(value) if isinstance(value, tuple) else value
    return EvalConfig.from_dict(data)


def is_inline_config(text: str) -> bool:
    """A `--cudaagent-config` value that is the JSON itself, not a file's path."""
    return text.lstrip().startswith("{")


def load_config(text: str) -> EvalConfig:
    """An EvalConfig from `--cudaagent-config`'s value: its JSON (EvalConfig.to_dict, or any part
    of it), or the path of a file holding it. ValueError for JSON that is not an EvalConfig's."""
    source = text if is_inline_config(text) else Path(text).read_text()
    data = json.loads(source)
    if not isinstance(data, dict):
        raise ValueError(f"--cudaagent-config: an EvalConfig's JSON is an object, not {type(data).__name__}")
    try:
        return EvalConfig.from_dict(data)
    except TypeError as error:  # a field EvalConfig does not have
        raise ValueError(f"--cudaagent-config: {error}") from None
