"""A trainer run killed while saving a checkpoint: resume loads the last whole one, never the
half, and the next save clears what the kill left."""

import torch
from accelerate import Accelerator

from policy.trainer.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint


def _prepared(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model


def test_a_save_killed_midway_is_never_loaded(tmp_path):
    accelerator, model = _prepared(seed=0)
    saved = save_checkpoint(accelerator, tmp_path, step=1)
    weights_at_1 = model.weight.detach().clone()
    # Killed while saving step 2: part of the state under the temporary name.
    half = tmp_path / "checkpoints" / "step-000002.tmp"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\x00" * 10)
    (half / "trainer_state.json").write_text('{"step": 2}')  # even its step marker
    assert latest_checkpoint(tmp_path) == saved

    resumed, resumed_model = _prepared(seed=1)
    assert not torch.equal(resumed_model.weight, weights_at_1)
    assert load_checkpoint(resumed, latest_checkpoint(tmp_path)) == 1
    assert torch.equal(resumed_model.weight.detach(), weights_at_1)

    again = save_checkpoint(resumed, tmp_path, step=2)
    assert latest_checkpoint(tmp_path) == again and not half.exists()
    assert sorted(path.name for path in (tmp_path / "checkpoints").iterdir()) == ["step-000001", "step-000002"]
