"""The tiny offline model and tokenizer: chat rendering, determinism, save/load round trip."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from policy.tiny_model import build_tiny_model_and_tokenizer, save_model_and_tokenizer

MESSAGES = [
    {"role": "system", "content": "be fast"},
    {"role": "user", "content": "write relu"},
    {
        "role": "assistant",
        "content": "running",
        "tool_calls": [{"type": "function", "function": {"name": "run", "arguments": {"command": "ls"}}}],
    },
    {"role": "tool", "name": "run", "content": "model.py"},
]


def test_chat_template_renders_every_role_and_generation_prompt():
    _, tokenizer = build_tiny_model_and_tokenizer()
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nbe fast<|im_end|>\n"
        "<|im_start|>user\nwrite relu<|im_end|>\n"
        "<|im_start|>assistant\nrunning\n"
        '<tool_call>{"name": "run", "arguments": {"command": "ls"}}</tool_call><|im_end|>\n'
        "<|im_start|>tool name=run\nmodel.py<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_same_seed_same_weights_and_vocab_matches_model():
    model_a, tokenizer = build_tiny_model_and_tokenizer(seed=3)
    model_b, _ = build_tiny_model_and_tokenizer(seed=3)
    model_c, _ = build_tiny_model_and_tokenizer(seed=4)
    weights = [dict(m.named_parameters())["model.embed_tokens.weight"] for m in (model_a, model_b, model_c)]
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[0], weights[2])
    assert model_a.config.vocab_size == len(tokenizer)
    assert model_a.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_save_then_from_pretrained_offline(tmp_path):
    model, tokenizer = build_tiny_model_and_tokenizer(hidden_size=32, layers=1)
    save_model_and_tokenizer(model, tokenizer, tmp_path)
    loaded_model = AutoModelForCausalLM.from_pretrained(tmp_path)
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    ids = torch.tensor([tokenizer("__global__ void k()")["input_ids"]])
    assert torch.allclose(model(ids).logits, loaded_model(ids).logits)
    assert loaded_tokenizer.chat_template == tokenizer.chat_template
    assert loaded_tokenizer.padding_side == "left"
    assert loaded_tokenizer.pad_token == "<|endoftext|>"
