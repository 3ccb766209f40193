"""Inputs as trees (tensor_trees.py): tensors nested in lists, tuples and dicts are copied,
refilled, snapshotted and checked like top-level ones, everywhere the evaluator handles inputs."""

import pytest
import torch

from pytest_cudaagent.core import tensor_trees as trees
from pytest_cudaagent.core.shared_tensors import SharedBufferPool, shared_copy
from pytest_cudaagent.evaluation import _same_input
from pytest_cudaagent.rules.outputs import device_snapshot, inspect_outputs, unchanged
from pytest_cudaagent.timing.timer import input_buffers, load_content


def nested() -> list:
    return [torch.randn(4, 3), [torch.randn(3), {"shift": torch.randn(3), "name": "bias"}], 7, (torch.ones(2),)]


def test_every_nested_tensor_is_visited_in_one_order_and_the_containers_are_rebuilt():
    tree = nested()
    found = trees.tensors(tree)
    assert [tuple(t.shape) for t in found] == [(4, 3), (3,), (3,), (2,)]
    doubled = trees.map_tensors(lambda t: t * 2, tree)
    assert type(doubled[1]) is list and type(doubled[1][1]) is dict and type(doubled[3]) is tuple
    assert doubled[1][1]["name"] == "bias" and doubled[2] == 7
    assert all(torch.equal(a * 2, b) for a, b in zip(found, trees.tensors(doubled), strict=True))
    assert trees.nbytes(tree) == sum(t.nbytes for t in found)


def test_same_structure_compares_containers_keys_and_where_the_tensors_are():
    tree = nested()
    assert trees.same_structure(tree, trees.map_tensors(torch.clone, tree))
    appended = trees.map_tensors(lambda t: t, tree)
    appended[1].append(torch.zeros(1))
    assert not trees.same_structure(tree, appended)
    renamed = trees.map_tensors(lambda t: t, tree)
    renamed[1][1]["offset"] = renamed[1][1].pop("shift")
    assert not trees.same_structure(tree, renamed)
    assert not trees.same_structure([torch.ones(1)], [1.0])


def test_refill_gives_the_buffers_tensors_the_new_values_in_the_contents_structure():
    buffer, content = nested(), nested()
    kept = trees.tensors(buffer)
    refilled = trees.refill(buffer, content)
    assert all(a is b for a, b in zip(trees.tensors(refilled), kept, strict=True))  # the buffer's own memory
    assert all(torch.equal(a, b) for a, b in zip(trees.tensors(refilled), trees.tensors(content), strict=True))
    with pytest.raises(ValueError, match="structure of its inputs"):
        trees.refill([torch.ones(1)], [torch.ones(1), [torch.ones(1)]])


def test_the_timers_buffers_are_private_and_refilled_through_every_level():
    """Before #44 load_content refilled only top-level tensors: every timed call of a nested-input
    problem ran on the warm-up set's nested values."""
    first, second = nested(), nested()
    buffers = input_buffers([first])
    assert not any(a is b for a, b in zip(trees.tensors(buffers[0]), trees.tensors(first), strict=True))
    load_content(buffers[0], second)
    assert all(torch.equal(a, b) for a, b in zip(trees.tensors(buffers[0]), trees.tensors(second), strict=True))


def test_copies_sent_to_a_worker_share_no_memory_with_the_originals():
    """A nested tensor pickled as is would have its storage moved into shared memory and shared
    with whoever receives it: what the candidate wrote reached the batch's kept reference."""
    tree = nested()
    copy = shared_copy(tree)
    pointers = {t.untyped_storage().data_ptr() for t in trees.tensors(tree)}
    assert all(t.is_shared() and t.untyped_storage().data_ptr() not in pointers for t in trees.tensors(copy))
    pool = SharedBufferPool()
    lent = [pool.copy_of(value) for value in tree]
    assert all(t.is_shared() for t in trees.tensors(lent)) and lent[2] == 7
    pool.give_back(lent)
    assert len(pool._free) == 3  # one list per (shape, dtype): (4, 3), (3,) twice, (2,)


def test_a_change_to_a_nested_input_is_seen_by_the_worker_and_by_the_evaluator():
    tree = nested()
    before = device_snapshot(tree)
    assert all(unchanged(was, now) for was, now in zip(before, tree, strict=True) if was is not None)
    assert before[2] is None  # no tensor in it: it travels back, as before
    tree[1][1]["shift"].zero_()
    assert not unchanged(before[1], tree[1])
    appended = nested()
    snapshot = device_snapshot(appended)
    appended[1].append(appended[0].clone())
    assert not unchanged(snapshot[1], appended[1])
    original = nested()
    assert _same_input(original[1], shared_copy(original[1]))
    changed = shared_copy(original[1])
    changed[0].add_(1)
    assert not _same_input(original[1], changed)


def test_an_output_that_is_a_view_of_a_nested_input_is_an_alias():
    tree = nested()
    report = inspect_outputs(tree[1][0][:2], tree, "cpu")
    assert [v.rule for v in report["violations"]] == ["output_alias"]
