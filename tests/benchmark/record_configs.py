"""A pytest plugin for bench tests: no pair is evaluated; each writes the EvalConfig its
evaluation would have got, with its process and how many times that process read the run's
config (--cudaagent-config), as a line of $RECORD_CONFIGS."""

import json
import os

from pytest_cudaagent import plugin
from pytest_cudaagent.core.result import Result

_loads = []
_load_config = plugin.load_config


def _counted_load(text):
    _loads.append(text)
    return _load_config(text)


def _record(problem, candidate, config):
    line = json.dumps({"pid": os.getpid(), "loads": len(_loads), "config": config.to_dict()}) + "\n"
    descriptor = os.open(os.environ["RECORD_CONFIGS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)
    return Result(problem=str(problem), candidate=str(candidate), status="incorrect")


plugin.load_config = _counted_load
plugin.evaluate_to_result = _record
plugin.require_sandbox = lambda: None  # the run may ask for a sandbox this machine lacks
