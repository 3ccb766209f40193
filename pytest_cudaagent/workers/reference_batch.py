"""One reference per problem for a batch of candidates (EvalConfig.reference_batch).

An evaluation's reference worker imports the problem, builds its Model after a fresh seed and
draws the correctness trials' inputs with their expected outputs (`prepare`). Candidates of one
batch that meet the same problem in one evaluating process (an xdist worker of `cudaagent
bench`, a process of the RL reward's pool) can share that work: the worker is kept after an
evaluation, with what it prepared, and handed to the next evaluation of the same problem under
the same settings and batch id. That one skips the worker's start and the preparation; its
timed calls still get inputs drawn for it alone (`fresh_sets`), and nothing the candidate can
write is shared (the weights and init inputs it is sent are copies per evaluation).

Sharing is safe only among candidates written before any of them was evaluated: one written
after reading another's Result or log could know the batch's trial inputs. So a batch id is given
by whoever knows that (`cudaagent bench`: a fresh id per run); evaluations without one never share.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.files import file_hash
from ..core.per_process import PerProcess

if TYPE_CHECKING:  # channel imports torch; the plugin closes kept references without it
    from .channel import Worker

# References kept per process at a time (the least recently used one is closed first): a batch
# usually interleaves a few problems per worker, and each kept one holds a CUDA context.
KEEP_AT_MOST = 2
# A reference whose prepared sets take more host memory than this is not kept: its shared memory
# would stay allocated between evaluations (a 16M-element problem's eight sets take 1 GiB).
KEEP_SET_BYTES = 1 << 30


@dataclass
class KeptReference:
    worker: Worker
    prepared: dict  # the worker's reply to "prepare": seed, weights, init inputs, trial sets
    evaluations: int  # how many evaluations have used it so far


def batch_key(batch: str, problem: Path, device: str, config: dict) -> str:
    """What must be equal for two evaluations to share a reference: the batch, the problem's
    path and contents, the device, and every setting (a different trial count, convention or
    backend draws other sets)."""
    settings = json.dumps(config, sort_keys=True, default=str)
    identity = json.dumps([batch, str(problem.resolve()), file_hash(problem), device, settings])
    return hashlib.sha256(identity.encode()).hexdigest()


class ReferenceStore:
    """The references kept in this process, by batch_key. Used by one thread at a time (the
    evaluating one: a Worker is closed by the thread that opened it)."""

    def __init__(self, keep_at_most: int = KEEP_AT_MOST):
        self.keep_at_most = keep_at_most
        self._kept: OrderedDict[str, KeptReference] = OrderedDict()
        self._owner = threading.get_ident()

    def take(self, key: str) -> KeptReference | None:
        """The kept reference for `key`, removed from the store (given back with `keep`); None if
        there is none, or it is no longer alive."""
        if threading.get_ident() != self._owner:
            return None  # another thread's workers are not this one's to use
        kept = self._kept.pop(key, None)
        if kept is not None and not kept.worker.process.is_alive():
            kept.worker.close()
            return None
        return kept

    def keep(self, key: str, kept: KeptReference) -> None:
        if threading.get_ident() != self._owner:
            kept.worker.close()
            return
        self._kept[key] = kept
        self._kept.move_to_end(key)
        while len(self._kept) > self.keep_at_most:
            _, oldest = self._kept.popitem(last=False)
            oldest.worker.close()

    def close_all(self) -> None:
        while self._kept:
            _, kept = self._kept.popitem()
            kept.worker.close()

    def __len__(self) -> int:
        return len(self._kept)


_store = PerProcess(ReferenceStore, ReferenceStore.close_all)


def store() -> ReferenceStore:
    """This process's store, made on first use (by the thread that evaluates) and emptied at exit."""
    return _store.get()


def close_kept() -> None:
    """Ends every kept reference worker (the end of a batch: pytest's session, a reward pool)."""
    _store.empty()
