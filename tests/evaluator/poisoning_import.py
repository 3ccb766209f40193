"""Imported by a test's zygote (tests/evaluator/test_zygote.py): does to torch what an import that
asks the CUDA runtime for the device count does, so that its forked children could not use CUDA."""

import torch

torch.cuda._is_in_bad_fork = lambda: True
