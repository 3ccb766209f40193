"""What of a failed build goes into `Result.error`: the compiler's first error lines, not the
command lines ninja prints before them.

torch's build error is "Error building extension 'X': " and ninja's output, in which every
finished step prints its (long) command line: two of them fill the first 2,000 characters
before the compiler says anything, and which step ninja reports first depends on which compile
ended first. So the first line that is a compiler's error (gcc's and nvcc's `error:`, `fatal
error:`, ptxas's `error   :`) and what follows it come right after the message's head."""

from __future__ import annotations

import re

ERROR_LIMIT = 2000
HEAD_LIMIT = 200
ERROR_LINE = re.compile(r"\berror\b\s*(#\w+(-D)?\s*)?:")


def build_error_text(message: str, limit: int = ERROR_LIMIT) -> str:
    text = message.strip()
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    first_error = next((index for index, line in enumerate(lines) if index and ERROR_LINE.search(line)), None)
    if first_error is None:
        return text[:limit]
    head = lines[0].split(" [1/", 1)[0][:HEAD_LIMIT]  # "build failed: ... Error building extension 'X':"
    return f"{head}\n...\n" + "\n".join(lines[first_error:])[:limit - len(head) - 5]
