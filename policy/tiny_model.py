"""A tiny Qwen/Llama-style causal LM with random weights and a tokenizer trained in-process, for
CPU tests and examples: nothing is downloaded, everything is built from a config and a corpus."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

# Qwen-style chat markers; the end-of-turn marker doubles as end-of-sequence so generation stops
# at the end of an assistant turn.
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"
PAD = "<|endoftext|>"
SPECIAL_TOKENS = [PAD, TURN_START, TURN_END]

# Renders system/user/assistant/tool messages; an assistant message may carry `tool_calls`
# (OpenAI style, rendered as JSON inside <tool_call> tags) and a tool message may carry `name`.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] }}"
    "{% if message['role'] == 'tool' and message.get('name') %}{{ ' name=' + message['name'] }}{% endif %}"
    "{{ '\n' + (message['content'] or '') }}"
    "{% if message.get('tool_calls') %}"
    "{% for call in message['tool_calls'] %}"
    "{{ '\n<tool_call>' + (call['function'] if 'function' in call else call) | tojson + '</tool_call>' }}"
    "{% endfor %}"
    "{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Enough text for the byte-level BPE to learn merges on the words an agent session uses; any other
# text still encodes (byte-level fallback), only less compactly.
DEFAULT_CORPUS = [
    "system user assistant tool You are a CUDA kernel engineer. Write fast and correct kernels.",
    "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):",
    "__global__ void kernel(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }",
    "#include <cuda_runtime.h>\n#include <torch/types.h>\nREGISTER_BINDING(relu, register_relu)",
    "<tool_call>{\"name\": \"write_file\", \"arguments\": {\"path\": \"kernels/relu.cu\"}}</tool_call>",
    "<tool_call>{\"name\": \"run\", \"arguments\": {\"command\": \"python verify.py\"}}</tool_call>",
    "passed incorrect build_error runtime_error timeout speedup eager compile reward",
    "The answer is 0 1 2 3 4 5 6 7 8 9 yes no true false done finish",
    "def get_inputs(): return [torch.randn(1024, 1024)]\ndef get_init_inputs(): return []",
    "shared memory warp shuffle reduction softmax matmul relu tanh mean sum row column tile",
]


def build_tiny_tokenizer(
    vocab_corpus: Iterable[str] | None = None, vocab_size: int = 512
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `vocab_corpus` (default: a built-in agent corpus),
    with the chat markers as special tokens and the chat template set."""
    corpus = list(vocab_corpus) if vocab_corpus is not None else DEFAULT_CORPUS
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=TURN_END,
        pad_token=PAD,
        unk_token=None,
        bos_token=None,
        # Left padding: batched generation appends after the prompt, so prompts line up on the
        # right. Passed at construction so that it is saved with the tokenizer.
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_model_config(
    vocab_size: int,
    hidden_size: int = 64,
    layers: int = 2,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    max_positions: int = 4096,
) -> LlamaConfig:
    """A Llama/Qwen-shaped config: grouped-query attention, SwiGLU MLP, RoPE, tied embeddings."""
    head_dim = 16 if hidden_size >= 16 else hidden_size
    attention_heads = max(1, hidden_size // head_dim)
    key_value_heads = max(1, attention_heads // 2) if attention_heads % 2 == 0 else attention_heads
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 4,
        num_hidden_layers=layers,
        num_attention_heads=attention_heads,
        num_key_value_heads=key_value_heads,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        bos_token_id=None,
    )


def build_tiny_model_and_tokenizer(
    vocab_corpus: Iterable[str] | None = None,
    hidden_size: int = 64,
    layers: int = 2,
    seed: int = 0,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """(model, tokenizer): a randomly initialised tiny causal LM (the same weights for the same
    seed) whose vocabulary is the tokenizer's, with generation stopping at the end of a turn."""
    tokenizer = build_tiny_tokenizer(vocab_corpus)
    config = tiny_model_config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        layers=layers,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    torch.random.set_rng_state(generator_state)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model, tokenizer


def save_model_and_tokenizer(model, tokenizer, directory: str | Path) -> Path:
    """Write both so that `AutoModelForCausalLM.from_pretrained(directory)` and
    `AutoTokenizer.from_pretrained(directory)` load them offline."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_and_save_tiny_model(directory: str | Path, **build_kwargs) -> Path:
    """Build a tiny model and tokenizer and save them to `directory` (a model path for CLIs)."""
    model, tokenizer = build_tiny_model_and_tokenizer(**build_kwargs)
    return save_model_and_tokenizer(model, tokenizer, directory)
