"""Whether a failed evaluation was cut short by a kill from outside, which says nothing of the
candidate: its process or one of its compilers ended by SIGKILL or SIGTERM (a user's kill, a
neighbour's OOM kill, a shutting-down machine). Such an evaluation is run once more (`evaluate`),
so an interrupted run resumes to the verdicts an uninterrupted one gives (issue #17,
`experiments.fault_injection`). A candidate that kills itself that way is killed again
in the second evaluation and keeps its verdict; one that does it only sometimes gets one more
fully checked evaluation, and the Result says so (`evaluated_again`).
"""

from __future__ import annotations

import re

RULE = "evaluated_again"

# What the candidate's process's death reads as (channel.Worker._death_reason).
_KILLED_WORKER = re.compile(r"\bworker killed by SIG(KILL|TERM)\b")
# What a compiler killed by a signal leaves in the build's output: g++/c++ ("Killed signal
# terminated program cc1plus"), nvcc ("'cicc' died due to signal 9 (Kill signal)"), ninja stopped
# by a signal, and Python's subprocess error for a build tool that died by one.
_KILLED_COMPILER = re.compile(
    r"(Killed|Terminated) signal terminated program"
    r"|died due to signal (9|15)\b"
    r"|died with <Signals\.SIG(KILL|TERM)"
    r"|build stopped: interrupted by (user|signal)"
)


def killed_from_outside(status: str, error: str | None) -> bool:
    """True for a `crashed` Result whose process a SIGKILL or SIGTERM ended, and for a
    `build_error` whose compiler one did."""
    if status == "crashed":
        return bool(_KILLED_WORKER.search(error or ""))
    if status == "build_error":
        return bool(_KILLED_COMPILER.search(error or ""))
    return False


def first_outcome(status: str, error: str | None) -> str:
    """The warning's detail: what the first evaluation ended with."""
    last_line = (error or "").strip().splitlines()[-1:] or [""]
    return (f"the first evaluation ended {status} ({last_line[0][:300]}), killed from outside the candidate "
            "as far as can be told; this Result is the second, whole evaluation")
