import random

import pytest
import torch

from synthesis.compose import Composer
from synthesis.filters import with_batch_size
from synthesis.recipes import bind, propagate
from synthesis.render import render_task


def run_source(source: str):
    namespace: dict = {}
    exec(compile(source, "task.py", "exec"), namespace)
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]()).eval()
    with torch.no_grad():
        return model(*namespace["get_inputs"]())


def test_same_seed_and_index_give_the_same_task(small_catalogue, tiny_sizes):
    a = Composer(small_catalogue, tiny_sizes, seed=7)
    b = Composer(small_catalogue, tiny_sizes, seed=7)
    assert [a.propose(i).source for i in range(5)] == [b.propose(i).source for i in range(5)]
    other = Composer(small_catalogue, tiny_sizes, seed=8)
    assert [a.propose(i).source for i in range(5)] != [other.propose(i).source for i in range(5)]
    assert a.task_id(3) == "synth_7_000003"


def test_compositions_are_valid_by_construction(small_catalogue, tiny_sizes):
    composer = Composer(small_catalogue, tiny_sizes, seed=1)
    lengths = set()
    for index in range(30):
        task = composer.propose(index)
        lengths.add(len(task.operators))
        assert 1 <= len(task.operators) <= 5
        output = run_source(task.source)
        output = output if isinstance(output, torch.Tensor) else output[0]
        assert output.shape[0] == task.input_shapes[0][0]
        # The batch is a free knob: constructor arguments never depend on it.
        assert run_source(with_batch_size(task.source, 3)).shape[0] == 3
    assert len(lengths) > 2


def test_rendered_source_matches_meta_propagation(small_catalogue):
    ops = small_catalogue.by_name()
    rng = random.Random(0)
    chain, shape = [], (4, 3, 10, 10)
    for name in ("nn.Conv2d", "nn.GELU", "torch.sum", "torch.mul"):
        bound = bind(ops[name], shape, rng)
        shape = propagate(bound)
        chain.append(bound)
    source = render_task(chain, (4, 3, 10, 10))
    assert tuple(run_source(source).shape) == shape
    assert "x = torch.mul(x, 2)" in source  # the recipe the crawl found for its second operand
    assert "batch_size = 4" in source


def test_empty_catalogue_is_an_error_that_says_what_to_do(small_catalogue):
    from synthesis.catalogue import Catalogue

    with pytest.raises(ValueError, match="crawl"):
        Composer(Catalogue([], []))
