"""What a measurement was taken on: GPU, clocks, driver, torch and CUDA versions (nvidia-ml-py)."""

from __future__ import annotations

import os
import platform
from functools import cache


def _visible_nvml_handle(pynvml):
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith("GPU-"):
        return pynvml.nvmlDeviceGetHandleByUUID(visible)
    return pynvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)


@cache
def _nvml():
    """pynvml, initialised once per process (0.2 s of the evaluating process per evaluation on the
    H100 machine when each evaluation initialised and shut it down); raises where it cannot be."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def gpu_info() -> dict:
    try:
        pynvml = _nvml()
    except Exception as error:  # no driver, no library: say so rather than fail
        return {"nvml_error": str(error)}
    try:
        handle = _visible_nvml_handle(pynvml)
        name = pynvml.nvmlDeviceGetName(handle)
        return {
            "gpu_name": name.decode() if isinstance(name, bytes) else name,
            "gpu_uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        }
    except Exception as error:
        return {"nvml_error": str(error)}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@cache
def _static_info() -> dict:
    import torch

    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "host": platform.node(),
    }


def collect_env(device: str) -> dict:
    info = {"device": device, **_static_info()}
    if device == "cuda":
        info.update(gpu_info())
    return info


def device_name(device: str) -> str:
    if device == "cuda":
        return gpu_info().get("gpu_name", "unknown-gpu")
    return f"cpu-{_static_info()['cpu']}"
