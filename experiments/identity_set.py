"""The identity set: every problem's own `Model` written out as its candidate `ModelNew`, honest by
construction, so the harness must call each one passed at 1.00x of eager (issues #38 and #40).

    python -m experiments.identity_set --kernelbench .kernelbench --level 1,2,3 --out DIR
    python -m experiments.identity_set --problems examples/problems --out DIR

Writes DIR/level_<L>_problem_<N>_sample_0_kernel.py for KernelBench's problems (the names
`cudaagent bench --candidates DIR` pairs by level and number) and DIR/<stem>.py for a flat
directory, then prints how many it wrote. Run the pairs with `--policy calibration`: the
reference runs only PyTorch's kernels, which the other policies reject as no kernel of its own.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from benchmark.kernelbench import Problem, load_flat, load_tree, select

# `Model` as a whole word: the class, `super(Model, self)`, and any other mention of the name.
_MODEL_NAME = re.compile(r"\bModel\b")
HEADER = "# The problem's own reference as its candidate (experiments/identity_set.py).\n"


def identity_source(problem_source: str) -> str:
    """The problem's source with its `Model` renamed `ModelNew`: the same computation, parameters
    drawn in the same order, the same constructor."""
    if not re.search(r"^class Model\b", problem_source, re.MULTILINE):
        raise ValueError("no top-level `class Model` to rename")
    return HEADER + _MODEL_NAME.sub("ModelNew", problem_source)


def candidate_name(problem: Problem) -> str:
    if problem.problem_id is not None and problem.level.isdigit():
        return f"level_{problem.level}_problem_{problem.problem_id}_sample_0_kernel.py"
    return problem.path.name


def write_identity_set(problems: list[Problem], out_dir: Path) -> list[Path]:
    """One candidate per problem under out_dir; a problem without a `class Model` is skipped
    with a message on stderr (it is no problem a candidate could be judged against)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for problem in problems:
        try:
            source = identity_source(problem.path.read_text())
        except ValueError as error:
            print(f"{problem.path}: skipped, {error}", file=sys.stderr)
            continue
        target = out_dir / candidate_name(problem)
        target.write_text(source)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.identity_set", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kernelbench", type=Path, help="a KernelBench clone (or its KernelBench/ directory)")
    source.add_argument("--problems", type=Path, help="a flat directory of problem files")
    parser.add_argument("--level", default="1,2,3", help="KernelBench levels (default 1,2,3; level 4 needs downloads)")
    parser.add_argument("--out", type=Path, required=True, help="directory for the candidates")
    args = parser.parse_args(argv)
    if args.kernelbench:
        problems = select(load_tree(args.kernelbench), [level.strip() for level in args.level.split(",")])
    else:
        problems = load_flat(args.problems)
    written = write_identity_set(problems, args.out)
    print(f"{len(written)} identity candidates written to {args.out} (of {len(problems)} problems)")
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
