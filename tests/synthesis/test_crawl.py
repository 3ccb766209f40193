import pandas as pd

from synthesis.catalogue import Catalogue
from synthesis.crawl import crawl


def reasons(catalogue):
    return {record.name: record.reason for record in catalogue.log}


def test_crawl_keeps_operators_with_recipes_ranks_and_shape_rules(small_catalogue):
    ops = small_catalogue.by_name()
    linear = ops["nn.Linear"]
    assert linear.ctor["in_features"] == {"from_dim": -1}
    assert "choice" in linear.ctor["out_features"]
    assert linear.shape_rule == "last_dim" and linear.has_weights
    assert ops["nn.Conv2d"].ranks == [4]
    assert ops["nn.Conv2d"].ctor["in_channels"] == {"from_dim": 1}
    assert ops["nn.ReLU"].ranks == [1, 2, 3, 4, 5] and ops["nn.ReLU"].shape_rule == "same"
    assert ops["nn.LayerNorm"].ctor["normalized_shape"] == {"from_dim_tuple": -1}
    assert "float32" in ops["nn.GELU"].dtypes
    # torch.max(x) is a scalar; with dim=-1 it is (values, indices): the crawl takes values.
    assert ops["torch.max"].call_kwargs == {"dim": {"value": -1}}
    assert ops["torch.max"].output_index == 0
    assert ops["torch.sort"].output_index == 0
    assert ops["torch.sum"].shape_rule == "reduce"
    assert ops["torch.sort"].category == "layout"


def test_crawl_drops_with_named_reasons(small_catalogue):
    why = reasons(small_catalogue)
    assert why["nn.Dropout"] == "stochastic"
    assert why["torch.bernoulli"] == "stochastic"
    assert why["nn.MSELoss"] == "loss: needs a target tensor"
    assert why["nn.Identity"] == "identity (computes nothing)"
    kept = {op.name for op in small_catalogue.operators}
    assert not kept & {"nn.Dropout", "torch.bernoulli", "nn.MSELoss", "nn.Identity"}


def test_crawl_is_by_introspection_not_a_list():
    catalogue = crawl(sources=("torch.nn.functional",))
    assert len(catalogue.operators) > 40
    assert len(catalogue.log) > len(catalogue.operators)


def test_transformers_crawl_finds_norms_mlps_and_dedupes_copies():
    catalogue = crawl(sources=("transformers",), transformers_models=["llama", "mistral"])
    ops = catalogue.by_name()
    assert "hf.LlamaRMSNorm" in ops and ops["hf.LlamaRMSNorm"].family == "rmsnorm"
    assert "config" in ops["hf.LlamaMLP"].ctor  # built from a LlamaConfig
    assert any(name.endswith("Activation") for name in ops)
    why = reasons(catalogue)
    assert why["hf.MistralRMSNorm"] == "duplicate source"
    assert why["hf.LlamaRotaryEmbedding"].startswith("fails on a single tensor input")


def test_catalogue_round_trip_and_log(small_catalogue, tmp_path):
    small_catalogue.save(tmp_path / "catalogue.json")
    small_catalogue.save_log(tmp_path / "crawl_log.csv")
    loaded = Catalogue.load(tmp_path / "catalogue.json")
    assert loaded.operators == small_catalogue.operators
    log = pd.read_csv(tmp_path / "crawl_log.csv")
    assert set(log.columns) >= {"name", "kept", "reason"}
    assert len(log) == len(small_catalogue.log)
