"""Inputs as trees: tensors nested in lists, tuples and dicts (`get_inputs()` may return
`[x, [h0, c0]]` or `[x, {"mask": m}]`), walked the same way wherever the evaluator copies,
refills, snapshots or checks inputs. A check that looked only at the top level missed what a
candidate wrote into a nested tensor, and a refill that did so reran the warm-up's nested values
on every timed call."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch

# The containers walked into; anything else (a number, a string, None, a tensor) is a leaf. Only
# these: every one crosses a pipe as builtins (replies.py allows OrderedDict by name), and a
# namedtuple's class would have to be imported where it is unpickled.
CONTAINERS = (list, tuple, dict, OrderedDict)


def _is_container(value: object) -> bool:
    return type(value) in CONTAINERS


def map_tensors(fn: Callable[[torch.Tensor], object], tree: object) -> object:
    """`tree` rebuilt with `fn(tensor)` in place of every tensor (exactly torch.Tensor or a
    subclass alike), every other leaf as is, each container of its own type."""
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if type(tree) in (list, tuple):
        return type(tree)(map_tensors(fn, item) for item in tree)
    if type(tree) in (dict, OrderedDict):
        return type(tree)((key, map_tensors(fn, item)) for key, item in tree.items())
    return tree


def tensors(tree: object) -> list[torch.Tensor]:
    """Every tensor in `tree`, depth first, in the order map_tensors visits them."""
    found: list[torch.Tensor] = []
    map_tensors(found.append, tree)
    return found


def same_structure(first: object, second: object) -> bool:
    """The same containers, keys and lengths, with a tensor wherever the other has one (the
    tensors' contents are not compared)."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)
    if _is_container(first) or _is_container(second):
        if type(first) is not type(second) or len(first) != len(second):
            return False
        if isinstance(first, dict):
            return list(first) == list(second) and all(same_structure(first[key], second[key]) for key in first)
        return all(same_structure(a, b) for a, b in zip(first, second, strict=True))
    return True


def nbytes(tree: object) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors(tree))


def refill(buffer: object, content: object) -> object:
    """`content` with `buffer`'s tensors in place of its own, each first given the values of the
    one it replaces (in map_tensors' order): a timed call's input buffer refilled with the next
    set. ValueError if the two do not hold tensors of the same count."""
    targets = iter(tensors(buffer))

    def into_buffer(tensor: torch.Tensor) -> torch.Tensor:
        target = next(targets, None)
        if target is None:
            raise ValueError("an input buffer holds fewer tensors than the content loaded into it (forward changed "
                             "the structure of its inputs)")
        return target.copy_(tensor)

    refilled = map_tensors(into_buffer, content)
    if next(targets, None) is not None:
        raise ValueError("an input buffer holds more tensors than the content loaded into it (forward changed the "
                         "structure of its inputs)")
    return refilled
