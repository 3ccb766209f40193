"""Whose "correct" a verdict follows: how the reference and the candidate are built, in which
mode they run, and how the reference's weights reach the candidate.

- `kernelbench` (the default): KernelBench's own eval. Both models are used as constructed
  (training mode unless a model switches itself), each built under `torch.no_grad()` right after
  seeding the generator with the same seed, so parameters created in the same order are equal
  and buffers a candidate precomputes from them in `__init__` are right. Our one deliberate
  lenience, which may only fill what the candidate's construction left unlike the reference's,
  never undo what its `__init__` computed: a candidate built that way that fails its first trial
  is built again with the reference's entries whose name and shape match copied in, and judged
  that way only if that is right (a candidate that creates its parameters in another order);
  one that folded a constant into a parameter that keeps its name (`conv.weight.div_(d)`) is
  right as built and keeps its own values. A single-file candidate's source is exec'd, as
  KernelBench loads it (Triton, TileLang and CuTe sources are imported from their file, as there).
- `cuda-agent`: the paper's workspace (`utils/verification.py`): both models in eval mode, the
  candidate loads the reference's `state_dict` strictly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Convention:
    name: str
    eval_mode: bool  # both models switched to eval mode (inference semantics)
    strict_load: bool  # the candidate must load the reference's state_dict exactly
    # A single-file candidate's source is exec'd as KernelBench's eval does (files.exec_file),
    # not imported from its file: what reads a function's source (torch.jit.script) fails there.
    exec_source: bool = False


CONVENTIONS = {
    "kernelbench": Convention("kernelbench", eval_mode=False, strict_load=False, exec_source=True),
    "cuda-agent": Convention("cuda-agent", eval_mode=True, strict_load=True),
}


def get_convention(name: str) -> Convention:
    try:
        return CONVENTIONS[name]
    except KeyError:
        raise ValueError(f"unknown convention {name!r}; use one of {list(CONVENTIONS)}") from None


def load_reference_weights(model: torch.nn.Module, reference_state: dict, convention: Convention,
                           copy: bool = False) -> dict:
    """Bring the reference's weights into the candidate as the convention says; returns what was
    copied (`Result.weights`).

    kernelbench: nothing, unless `copy` (the second build, after the first failed its first
    trial): then the entries whose name and shape both match, never raising (a renamed parameter
    or a buffer of another shape keeps the value it was constructed with). `differing` counts
    the matching entries whose values the same-seed construction made unlike the reference's:
    none, and a copy would change nothing. cuda-agent: every entry, strictly."""
    own_state = model.state_dict()
    counts = {"reference_entries": len(reference_state), "candidate_entries": len(own_state)}
    if convention.strict_load:
        missing = sorted(set(own_state) - set(reference_state))
        unexpected = sorted(set(reference_state) - set(own_state))
        wrong_shape = sorted(name for name in set(own_state) & set(reference_state)
                             if own_state[name].shape != reference_state[name].shape)
        if missing or unexpected or wrong_shape:
            raise RuntimeError(
                "the cuda-agent convention loads Model's state_dict into ModelNew strictly, and they differ: "
                f"ModelNew's entries missing from Model's: {missing}; Model's entries ModelNew lacks: {unexpected}; "
                f"different shapes: {wrong_shape}. Name ModelNew's parameters and buffers as Model's, "
                "or evaluate with --convention kernelbench")
        model.load_state_dict(reference_state, strict=True)
        return {"copied": len(reference_state), **counts}
    matching = sorted(name for name, tensor in reference_state.items()
                      if name in own_state and own_state[name].shape == tensor.shape)
    differing = [name for name in matching if not _same_entry(own_state[name], reference_state[name])]
    if copy:
        model.load_state_dict({name: reference_state[name] for name in matching}, strict=False)
    return {"copied": len(matching) if copy else 0, **counts, "differing": len(differing)}


def _same_entry(own: torch.Tensor, reference: torch.Tensor) -> bool:
    try:
        return own.dtype == reference.dtype and bool(torch.equal(own.detach().cpu(), reference.detach().cpu()))
    except RuntimeError:  # a tensor without plain values (meta, sparse): treat as unlike
        return False


def training_mode_hint(error: BaseException) -> str:
    """What to say when the reference fails under the kernelbench convention."""
    return (f"the reference Model failed when run as constructed (training mode), as the kernelbench "
            f"convention runs it: {type(error).__name__}: {error}. If the problem is meant for inference "
            "(BatchNorm over a batch of one, say), evaluate with --convention cuda-agent")
