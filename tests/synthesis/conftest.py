"""Shared fixtures: a small crawled catalogue, tiny composer sizes and a CPU filter config with a
wide workload window, so the pipeline runs in seconds on the CI machine."""

import pytest

from synthesis.compose import ComposerConfig
from synthesis.crawl import crawl
from synthesis.filters import FilterConfig

SMALL_CRAWL = (
    r"^(nn\.(Linear|ReLU|GELU|LayerNorm|Conv2d|Softmax|Dropout|Tanh|MSELoss|Identity)"
    r"|torch\.(sum|tanh|mul|cumsum|exp|max|sort|bernoulli))$"
)


@pytest.fixture(scope="session")
def small_catalogue():
    return crawl(sources=("torch.nn", "torch"), name_filter=SMALL_CRAWL)


@pytest.fixture
def tiny_sizes():
    return ComposerConfig(batch_sizes=(2, 4), feature_sizes=(8, 16), spatial_sizes=(6, 8),
                          min_sample_numel=8, max_numel=1 << 14, max_flops=1e7)


@pytest.fixture
def cpu_filters():
    # On the CI machine times are noisy and tiny: the window only has to hold them.
    return FilterConfig(device="cpu", min_ms=1e-4, max_ms=1e5, compile=False)
