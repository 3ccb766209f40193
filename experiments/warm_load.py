"""Where a warm `load_inline` spends its time (nothing to compile), outside the evaluator.

The H100 phase profile (README, "Where an evaluation's time goes") shows 4.7 s of `candidate.build`
for candidates whose extensions were already built. This runs each bundled candidate's import in a
fresh process twice over one extensions folder (the first builds, the second is warm), timing
`import torch`, CUDA's start and the candidate's import, and prints the warm import's profile.

    python -m experiments.warm_load [--only leaky_relu] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import cProfile, io, json, pstats, sys, time
started = time.perf_counter()
import torch
imported = time.perf_counter()
if sys.argv[2] == "cuda":
    torch.cuda.init()
    torch.zeros(1, device="cuda")
cuda_ready = time.perf_counter()
sys.path.insert(0, sys.argv[3])
from pytest_cudaagent.core.files import import_file
profile = cProfile.Profile()
profile.enable()
import_file(__import__("pathlib").Path(sys.argv[1]), "candidate")
profile.disable()
loaded = time.perf_counter()
text = io.StringIO()
pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(int(sys.argv[4]))
print(json.dumps({"import torch s": round(imported - started, 2), "cuda s": round(cuda_ready - imported, 2),
                  "candidate import s": round(loaded - cuda_ready, 2), "profile": text.getvalue()}))
"""


def probe(candidate: Path, device: str, extensions: Path, lines: int) -> dict:
    completed = subprocess.run([sys.executable, "-c", PROBE, str(candidate), device, str(ROOT), str(lines)],
                               capture_output=True, text=True, env={**__import__("os").environ,
                                                                    "TORCH_EXTENSIONS_DIR": str(extensions)})
    if completed.returncode != 0:
        return {"error": completed.stderr[-2000:]}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="candidate names (default: every bundled one)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--profile-lines", type=int, default=25)
    args = parser.parse_args()
    folder = "cuda" if args.device == "cuda" else "cpu"
    candidates = sorted((ROOT / "examples" / "candidates" / folder).glob("*.py"))
    candidates = [path for path in candidates if not args.only or path.stem in args.only]
    with tempfile.TemporaryDirectory(prefix="warm-load-") as extensions:
        for candidate in candidates:
            cold = probe(candidate, args.device, Path(extensions), args.profile_lines)
            warm = probe(candidate, args.device, Path(extensions), args.profile_lines)
            if "error" in cold or "error" in warm:
                print(f"{candidate.stem}: failed\n{cold.get('error') or warm.get('error')}")
                continue
            print(f"{candidate.stem}: cold {json.dumps({k: v for k, v in cold.items() if k != 'profile'})}")
            print(f"{candidate.stem}: warm {json.dumps({k: v for k, v in warm.items() if k != 'profile'})}")
            print(warm["profile"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
