"""The critic: a transformer backbone (its own weights, loaded from any causal LM checkpoint) with
a scalar value head on every token's last hidden state."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModel

VALUE_HEAD_FILE = "value_head.pt"


class ValueModel(nn.Module):
    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        hidden_size = backbone.config.hidden_size
        self.value_head = nn.Linear(hidden_size, 1)
        # Small initial values so the first advantages are dominated by rewards, not head noise.
        nn.init.normal_(self.value_head.weight, std=1 / (hidden_size + 1) ** 0.5 * 0.1)
        nn.init.zeros_(self.value_head.bias)

    @property
    def config(self):
        return self.backbone.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """[batch, length] values, one per position (the value of the state after that token)."""
        # No KV cache: the trainer's passes see each sequence once.
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1)

    @classmethod
    def from_pretrained(cls, path: str | Path, **load_kwargs) -> ValueModel:
        """From a critic checkpoint (backbone + value_head.pt) or from a plain causal LM checkpoint,
        whose base model becomes the backbone and whose head starts fresh."""
        path = Path(path)
        backbone = AutoModel.from_pretrained(path, **load_kwargs)
        critic = cls(backbone)
        head_file = path / VALUE_HEAD_FILE
        if head_file.exists():
            critic.value_head.load_state_dict(torch.load(head_file, map_location="cpu", weights_only=True))
        return critic

    @classmethod
    def from_causal_lm(cls, causal_lm: nn.Module) -> ValueModel:
        """A critic whose backbone is a copy of `causal_lm`'s base model (separate weights)."""
        backbone = AutoModel.from_config(AutoConfig.for_model(**causal_lm.config.to_dict()))
        backbone.load_state_dict(causal_lm.get_decoder().state_dict())
        return cls(backbone)

    def save_pretrained(self, path: str | Path, state_dict: dict | None = None) -> None:
        """`state_dict`: the full critic state gathered by accelerate (sharded runs)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state_dict = state_dict if state_dict is not None else self.state_dict()
        backbone_state = {k.removeprefix("backbone."): v for k, v in state_dict.items() if k.startswith("backbone.")}
        head_state = {k.removeprefix("value_head."): v for k, v in state_dict.items() if k.startswith("value_head.")}
        self.backbone.save_pretrained(path, state_dict=backbone_state)
        torch.save(head_state, path / VALUE_HEAD_FILE)
