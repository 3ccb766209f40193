"""Run under `accelerate launch` with 2 processes (by test_data_parallel.py): checks the
data-parallel helpers against what one process holding the whole batch computes, and writes
this process's findings to OUT_DIR/rank-N.json."""

import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

from policy.trainer.core import explained_variance, masked_whiten
from policy.trainer.runtime import (
    mean_over_processes,
    seed_process,
    share_evenly,
    sum_over_processes,
)

accelerator = Accelerator()
rank, processes = accelerator.process_index, accelerator.num_processes
# The whole batch, the same on every process (seeded); each process holds its half of the rows.
generator = torch.Generator().manual_seed(0)
values = torch.randn(8, 5, generator=generator) * 3 + 1
mask = (torch.rand(8, 5, generator=generator) > 0.3).float()
predictions = values + torch.randn(8, 5, generator=generator)
rows = slice(4 * rank, 4 * rank + 4)
process_sum = sum_over_processes(accelerator)
whitened_half = masked_whiten(values[rows], mask[rows], sum_over_processes=process_sum)
# Different lengths on each process: 5 on rank 0, 2 on rank 1.
share, total = share_evenly(accelerator, [f"rank{rank}-{i}" for i in range(5 if rank == 0 else 2)])
seed_process(accelerator, 7)
findings = {
    "processes": processes,
    "sampling_draw": torch.rand(4).tolist(),
    "whiten_matches_whole_batch": torch.allclose(whitened_half, masked_whiten(values, mask)[rows], atol=1e-6),
    "whiten_differs_from_local_only": not torch.allclose(whitened_half, masked_whiten(values[rows], mask[rows]), atol=1e-3),
    "explained_variance": explained_variance(predictions[rows], values[rows], mask[rows], process_sum),
    "explained_variance_whole": explained_variance(predictions, values, mask),
    "mean_loss": mean_over_processes(accelerator, float(rank + 1)),
    "share": share,
    "share_total": total,
}
Path(sys.argv[1], f"rank-{rank}.json").write_text(json.dumps(findings))
# Leave together: a process that exits while the other still holds the process group can abort it.
accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
