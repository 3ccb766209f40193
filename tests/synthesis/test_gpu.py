"""On a CUDA GPU: the filters with real timing and torch.compile, and a small pipeline run."""

import pytest

from synthesis.filters import FilterConfig, check_task
from synthesis.pipeline import SynthConfig, run_synthesis
from synthesis.pool import PoolConfig

from .test_filters import HONEST, task


@pytest.mark.gpu
def test_filters_on_the_gpu_scale_into_the_paper_window():
    config = FilterConfig(device="cuda")  # 1-100 ms, compile on
    outcome = check_task(HONEST, config)
    assert outcome.kept, outcome.details
    assert 1.0 <= outcome.eager_ms <= 100.0 and outcome.compile_ms > 0
    assert outcome.batch_size > 8  # scaled up from the tiny starting batch
    assert check_task(task("return x - x"), config).reasons == ["constant_output"]


@pytest.mark.gpu
def test_small_pipeline_run_on_the_gpu(tmp_path, small_catalogue):
    small_catalogue.save(tmp_path / "catalogue.json")
    config = SynthConfig(count=8, out_dir=tmp_path / "run", catalogue=tmp_path / "catalogue.json",
                         filters=FilterConfig(device="cuda"), pool=PoolConfig(workers=2))
    frame = run_synthesis(config)
    assert len(frame) == 8
    kept = frame[frame["kept"]]
    assert ((kept["eager_ms"] >= 1.0) & (kept["eager_ms"] <= 100.0)).all()
    assert kept["compile_ms"].notna().all()
