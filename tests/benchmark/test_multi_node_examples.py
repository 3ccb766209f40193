"""docs/examples/multi-node/: the Slurm array job and the Kubernetes Indexed Job run as far as
this machine can: each script's own command, with the index variable the scheduler would set
given by hand, on the CPU and a tiny KernelBench-shaped set; then their merge step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .bench_helpers import TREE, make_kernelbench_tree, write_candidate

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples" / "multi-node"
BENCH_ARGS = "--device cpu --no-timing --policy permissive --trials 2 --workers 1"
SHARDS = 2


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    root = make_kernelbench_tree(tmp_path_factory.mktemp("multi-node"))
    for level, name, expression in TREE:
        number = name.split("_")[0]
        write_candidate(root / "candidates" / f"level_{level}_problem_{number}_sample_0_kernel.py", expression)
    write_candidate(root / "candidates" / "level_1_problem_1_sample_1_kernel.py", "x + 1.0")  # wrong
    return root


def environment(**values) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOB_COMPLETION"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # cudaagent of this venv
    return env | {key: str(value) for key, value in values.items()}


def run(command: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def statuses(out: Path) -> dict[str, str]:
    found = {}
    for path in sorted(out.glob("shard-*/results.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            found[Path(row["candidate"]).name] = row["status"]
    return found


EXPECTED = {"level_1_problem_1_sample_0_kernel.py": "passed", "level_1_problem_2_sample_0_kernel.py": "passed",
            "level_2_problem_1_sample_0_kernel.py": "passed", "level_1_problem_1_sample_1_kernel.py": "incorrect"}


@pytest.mark.slow
def test_the_slurm_array_job_and_its_merge(tiny_set, tmp_path):
    out = tmp_path / "sweep"
    common = {"KERNELBENCH": tiny_set, "CANDIDATES": tiny_set / "candidates", "OUT": out, "BENCH_ARGS": BENCH_ARGS}
    for index in range(SHARDS):  # what `sbatch --array=0-1` runs on two nodes
        done = run(["bash", str(EXAMPLES / "slurm-bench.sh")],
                   environment(**common, SLURM_ARRAY_TASK_ID=index, SLURM_ARRAY_TASK_COUNT=SHARDS), tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"shard {index}/{SHARDS}" in done.stdout
    assert statuses(out) == EXPECTED
    merged = run(["bash", str(EXAMPLES / "slurm-merge.sh")], environment(OUT=out), tmp_path)
    assert merged.returncode == 0, merged.stdout[-3000:] + merged.stderr[-3000:]
    summary = (out / "merged" / "leaderboard.csv").read_text().splitlines()
    assert summary[1].startswith("sweep,level1,2,3,") and summary[2].startswith("sweep,level2,1,1,")
    # A task that never ran: the merge names its shard and exits 1.
    (out / "shard-1" / "results.jsonl").rename(out / "shard-1" / "lost.jsonl")
    partial = run(["bash", str(EXAMPLES / "slurm-merge.sh")], environment(OUT=out), tmp_path)
    assert partial.returncode == 1 and "shard 1/2 not given" in partial.stderr
    # Without the array's variables the script says how to submit it instead of running anything.
    bare = run(["bash", str(EXAMPLES / "slurm-bench.sh")], environment(**common), tmp_path)
    assert bare.returncode != 0 and "sbatch --array" in bare.stderr


def test_slurm_submit_makes_the_array_and_a_merge_after_it(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text('#!/bin/bash\necho "$@" >> "$SBATCH_LOG"\necho "4242;cluster"\n')
    (fake / "sbatch").chmod(0o755)
    env = environment(SHARDS=3, SBATCH_LOG=tmp_path / "calls")
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    done = run(["bash", str(EXAMPLES / "slurm-submit.sh")], env, tmp_path)
    assert done.returncode == 0, done.stderr
    first, second = (tmp_path / "calls").read_text().splitlines()
    assert "--array=0-2" in first and first.endswith("slurm-bench.sh")
    assert "--dependency=afterany:4242" in second and second.endswith("slurm-merge.sh")


def container(manifest: Path) -> tuple[dict, dict]:
    job = yaml.safe_load(manifest.read_text())
    (spec,) = job["spec"]["template"]["spec"]["containers"]
    return job, spec


def local_env(spec: dict, mounts: dict[str, Path]) -> dict:
    """The container's environment with its mount points moved under this test's folders."""
    values = {}
    for item in spec["env"]:
        value = item["value"]
        for mount, local in mounts.items():
            value = value.replace(mount, str(local))
        values[item["name"]] = value
    return values


@pytest.mark.slow
def test_the_kubernetes_indexed_job_and_its_merge(tiny_set, tmp_path):
    job, spec = container(EXAMPLES / "k8s-bench.yaml")
    assert job["spec"]["completionMode"] == "Indexed"
    values = {item["name"]: item["value"] for item in spec["env"]}
    assert int(values["SHARDS"]) == job["spec"]["completions"]  # one index per shard
    assert spec["resources"]["limits"]["nvidia.com/gpu"] >= 1
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "KernelBench").symlink_to(tiny_set / "KernelBench")
    (tmp_path / "data" / "candidates").symlink_to(tiny_set / "candidates")
    mounts = {"/data": tmp_path / "data", "/results": tmp_path / "results"}
    env = local_env(spec, mounts) | {"SHARDS": str(SHARDS), "BENCH_ARGS": BENCH_ARGS}
    for index in range(SHARDS):  # what the Job's pods run, JOB_COMPLETION_INDEX set by Kubernetes
        done = run([*spec["command"], *spec["args"]], environment(**env, JOB_COMPLETION_INDEX=index), tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "results" / "sweep"
    assert statuses(out) == EXPECTED
    _, merge = container(EXAMPLES / "k8s-merge.yaml")
    merged = run([*merge["command"], *merge["args"]], environment(**local_env(merge, mounts)), tmp_path)
    assert merged.returncode == 0, merged.stdout[-3000:] + merged.stderr[-3000:]
    assert (out / "merged" / "leaderboard.csv").read_text().splitlines()[1].startswith("sweep,level1,2,3,")
