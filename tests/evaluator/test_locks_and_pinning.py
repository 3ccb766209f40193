import multiprocessing
import os
import time

from pytest_cudaagent.gpu_pinning import pin_xdist_worker_to_gpu
from pytest_cudaagent.locks import device_lock


def _hold_lock(log_path: str, lock_dir: str) -> None:
    os.environ["CUDAAGENT_LOCK_LOG"] = log_path
    os.environ["CUDAAGENT_LOCK_DIR"] = lock_dir
    for _ in range(3):
        with device_lock("cpu"):
            time.sleep(0.05)


def test_device_lock_serialises_holders_across_processes(tmp_path):
    log = tmp_path / "lock.log"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_hold_lock, args=(str(log), str(tmp_path))) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    holds = sorted((int(a), int(r)) for _, _, a, r in (line.split() for line in log.read_text().splitlines()))
    assert len(holds) == 9
    for (_, released), (acquired, _) in zip(holds, holds[1:], strict=False):
        assert acquired >= released  # no two holds overlap


def test_xdist_workers_are_pinned_round_robin(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert pin_xdist_worker_to_gpu("gw1") == "5"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert pin_xdist_worker_to_gpu("gw2") == "3"


def test_no_pinning_outside_xdist_or_without_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert pin_xdist_worker_to_gpu(None) is None
    assert pin_xdist_worker_to_gpu("gw0") is None
