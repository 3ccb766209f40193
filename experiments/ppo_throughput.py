"""Measures PPO iteration time, tokens/s and peak memory, ours against TRL's (README, Measured: "Trainer").

PPO iteration time, tokens per second and peak memory of our trainer and of TRL's PPOTrainer on
the same randomly initialised Llama-style model (~100M parameters by default), batch and lengths.

One iteration = generate `--response` tokens for `--batch` prompts of `--prompt` tokens, then the
PPO update (no-grad passes of actor, reference and critic, `--epochs` epochs of minibatches of
`--minibatch` episodes in micro-batches of `--micro`; ours runs its no-grad passes in chunks of
`--inference-batch`, default the whole batch). Each implementation runs in its own
process (fresh accelerate state and CUDA peak-memory counter). TRL is skipped with a message when
`trl.experimental.ppo` is not importable (trl==0.29.0 and datasets; see the trainer's README).

Held equal: the model (same seed, same weights), prompts, lengths, epochs, minibatch and
micro-batch sizes, KL to a reference, AdamW (plain `torch.optim.AdamW`; neither turns gradient
checkpointing on), bf16 autocast around every forward pass, and the whole batch generated at
once. For the autocast, TRL's own Accelerator is told bf16 through ACCELERATE_MIXED_PRECISION
(transformers 5 no longer passes its `bf16` flag on), and its no-grad passes of the reference,
value and reward models are put under autocast as ours are. For the generation,
`local_rollout_forward_batch_size` = `--batch`, which in TRL also sizes those no-grad passes
(ours: `--inference-batch`, by default also `--batch`).

What differs is each trainer's own design: TRL scores with a reward model (a one-layer one
here), ours takes the episodes' rewards as given (random ones here: the evaluator's cost is in
neither row); TRL takes the old log-probs from the sampler's logits, ours recomputes them with a
forward pass of the actor; TRL steps its optimizer once accelerate has accumulated
`--batch / --micro` micro-batches, ours once per minibatch, and clips gradients; TRL always
generates `--response` tokens, ours stops a sequence at end-of-turn (token 1, which a random
model almost never emits).

    python -m experiments.ppo_throughput                       # H100: both, printed table
    python -m experiments.ppo_throughput --json ppo.json
    python -m experiments.ppo_throughput --hidden 64 --layers 2 --vocab 512 --batch 8 --prompt 16 \\
        --response 8 --minibatch 4 --micro 2 --iterations 2 --no-bf16   # a CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

IMPLEMENTATIONS = ("cuda-agent", "trl")


def model_config(args):
    from policy.tiny_model import tiny_model_config

    config = tiny_model_config(vocab_size=args.vocab, hidden_size=args.hidden, layers=args.layers,
                               max_positions=args.prompt + args.response + 8)
    # The tiny-model config ties head_dim to 16; a ~100M model uses 64-wide heads.
    config.head_dim = min(64, args.hidden)
    config.num_attention_heads = max(1, args.hidden // config.head_dim)
    config.num_key_value_heads = config.num_attention_heads
    config.pad_token_id = 0
    config.eos_token_id = 1
    return config


def random_policy(args):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(args.seed)
    return LlamaForCausalLM(model_config(args))


def random_prompts(args) -> list[list[int]]:
    import torch

    generator = torch.Generator().manual_seed(args.seed)
    # Ids from 2 up: 0 is padding and 1 end-of-turn.
    return torch.randint(2, args.vocab, (args.batch, args.prompt), generator=generator).tolist()


def peak_memory_gib() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / 2**30


def run_ours(args) -> dict:
    import copy
    import random
    from types import SimpleNamespace

    from accelerate import Accelerator

    from policy.trainer.config import RolloutConfig
    from policy.trainer.generation import InProcessGenerator
    from policy.trainer.ppo import PPOConfig, PPOTrainer
    from policy.trainer.rollout import Rollout
    from policy.trainer.value_model import ValueModel

    actor = random_policy(args)
    critic = ValueModel.from_causal_lm(actor)
    reference = copy.deepcopy(actor)
    config = PPOConfig(steps=args.iterations, tasks_per_step=args.batch, minibatch_size=args.minibatch,
                       micro_batch_size=args.micro, inference_batch_size=args.inference_batch,
                       ppo_epochs=args.epochs, kl_coef=0.05)
    accelerator = Accelerator(mixed_precision="bf16" if args.bf16 else "no",
                              gradient_accumulation_steps=config.accumulation_steps)
    runtime = SimpleNamespace(accelerator=accelerator, rollout_config=RolloutConfig(temperature=1.0),
                              tokenizer=SimpleNamespace(pad_token_id=0))
    trainer = PPOTrainer(config, runtime, actor, critic, reference)
    generator = InProcessGenerator(accelerator.unwrap_model(trainer.actor), pad_token_id=0, eos_token_id=1,
                                   batch_size=args.batch)
    prompts = random_prompts(args)
    rng = random.Random(args.seed)
    iteration_seconds, generation_seconds, sequence_tokens = [], [], []
    for _ in range(args.iterations + args.warmup):
        start = time.perf_counter()
        with accelerator.autocast():
            completions = generator.generate(prompts, args.response)
        generated = time.perf_counter()
        rollouts = [Rollout("bench", p + c.token_ids, [0] * len(p) + [1] * len(c.token_ids),
                            [0.0] * len(p) + c.logprobs, reward=rng.choice((-1.0, 1.0, 2.0, 3.0)))
                    for p, c in zip(prompts, completions, strict=True)]
        trainer.step(rollouts)
        _synchronize()
        iteration_seconds.append(time.perf_counter() - start)
        generation_seconds.append(generated - start)
        sequence_tokens.append(sum(len(r.token_ids) for r in rollouts))
    return _summary("cuda-agent", args, iteration_seconds, generation_seconds, sequence_tokens,
                    accelerator.mixed_precision)


def run_trl(args) -> dict:
    try:
        from datasets import Dataset
        from transformers import LlamaForSequenceClassification, TrainerCallback
        from trl.experimental.ppo import PPOConfig, PPOTrainer
    except ImportError as error:
        return {"implementation": "trl", "skipped": f"TRL's PPOTrainer is not importable ({error}); "
                "install trl==0.29.0 and datasets (see the trainer's README) to compare"}
    import copy

    import torch

    # TRL's PPOTrainer builds its own Accelerator, which takes the precision from this variable
    # (transformers 5's TrainingArguments no longer exports its `bf16` flag there). This worker
    # is its own process, so the setting stays here.
    os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16" if args.bf16 else "no"
    policy = random_policy(args)
    reference = copy.deepcopy(policy)
    torch.manual_seed(args.seed)
    value_model = LlamaForSequenceClassification(model_config(args))
    value_model.config.num_labels = 1
    value_model.score = torch.nn.Linear(args.hidden, 1, bias=False)
    # TRL scores with a reward model; a one-layer one keeps its share of the time small.
    reward_config = model_config(args)
    reward_config.num_hidden_layers = 1
    reward_model = LlamaForSequenceClassification(reward_config)
    reward_model.score = torch.nn.Linear(args.hidden, 1, bias=False)
    tokenizer = _trl_tokenizer(args)
    total = args.batch * (args.iterations + args.warmup)
    dataset = Dataset.from_dict({"input_ids": (random_prompts(args) * (args.warmup + args.iterations))[:total]})
    step_ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, *_args, **_kwargs):
            _synchronize()
            step_ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as output_dir:
        ppo_args = PPOConfig(
            output_dir=output_dir, per_device_train_batch_size=args.micro,
            gradient_accumulation_steps=args.batch // args.micro, num_mini_batches=args.batch // args.minibatch,
            num_ppo_epochs=args.epochs, response_length=args.response, total_episodes=total,
            # The whole batch generated at once, as ours does.
            local_rollout_forward_batch_size=args.batch, stop_token=None, temperature=1.0,
            missing_eos_penalty=None, kl_coef=0.05, learning_rate=1e-6, bf16=args.bf16, report_to=[],
            # Ours uses torch.optim.AdamW as it comes, not the fused one.
            optim="adamw_torch",
            save_strategy="no", num_sample_generations=0, disable_tqdm=True, logging_steps=1,
            use_cpu=not torch.cuda.is_available(), seed=args.seed,
        )
        trainer = PPOTrainer(args=ppo_args, processing_class=tokenizer, model=policy, ref_model=reference,
                             reward_model=reward_model, train_dataset=dataset, value_model=value_model,
                             callbacks=[StepClock()])
        # TRL autocasts only the model it prepared (policy and value model, when training); its
        # no-grad passes of the reference, value and reward models (it calls their backbones and
        # score heads directly) would run in fp32 where ours run in bf16.
        for module in (reference, value_model.model, value_model.score, reward_model.model, reward_model.score):
            _autocast_each_call(module, trainer.accelerator)
        start = time.perf_counter()
        trainer.train()
        mixed_precision = trainer.accelerator.mixed_precision
    bounds = [start] + step_ends
    iteration_seconds = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
    tokens = [args.batch * (args.prompt + args.response)] * len(iteration_seconds)
    return _summary("trl", args, iteration_seconds, None, tokens, mixed_precision)


def _autocast_each_call(module, accelerator) -> None:
    # Per call, as accelerate wraps a prepared model: autocast's cache of bf16 weight copies is
    # dropped when the outermost autocast exits, so no call sees weights from before an update.
    forward = module.forward

    def autocast_forward(*args, **kwargs):
        with accelerator.autocast():
            return forward(*args, **kwargs)

    module.forward = autocast_forward


def _trl_tokenizer(args):
    from policy.tiny_model import build_tiny_tokenizer

    # TRL needs a tokenizer only for padding and decoding samples; ids beyond its vocabulary are
    # never decoded (num_sample_generations=0).
    tokenizer = build_tiny_tokenizer()
    tokenizer.padding_side = "left"
    return tokenizer


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _summary(name, args, iteration_seconds, generation_seconds, sequence_tokens, mixed_precision) -> dict:
    measured = slice(args.warmup, None)
    seconds = iteration_seconds[measured] or iteration_seconds
    tokens = sequence_tokens[measured] or sequence_tokens
    mean_seconds = sum(seconds) / len(seconds)
    record = {
        "implementation": name,
        # What the trainer's Accelerator actually ran with (a check that both ran alike).
        "precision": mixed_precision,
        "iterations": len(seconds),
        "iteration_s": mean_seconds,
        "tokens_per_s": sum(tokens) / sum(seconds),
        "mean_sequence_tokens": sum(tokens) / len(tokens) / args.batch,
        "peak_memory_gib": peak_memory_gib(),
    }
    if generation_seconds:
        generation = generation_seconds[measured] or generation_seconds
        record["generation_s"] = sum(generation) / len(generation)
        record["update_s"] = mean_seconds - record["generation_s"]
    return record


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", choices=(*IMPLEMENTATIONS, "both"), default="both",
                        help="which trainer to time (default both, each in its own process)")
    parser.add_argument("--hidden", type=int, default=768,
                        help="hidden size (default 768; with the default layers and vocabulary ~100M parameters)")
    parser.add_argument("--layers", type=int, default=8, help="transformer layers (default 8)")
    parser.add_argument("--vocab", type=int, default=32000, help="vocabulary size (default 32000)")
    parser.add_argument("--batch", type=int, default=64, help="episodes per iteration (default 64)")
    parser.add_argument("--minibatch", type=int, default=16, help="episodes per optimizer step (default 16)")
    parser.add_argument("--micro", type=int, default=8, help="episodes per forward/backward (default 8)")
    parser.add_argument("--inference-batch", type=int,
                        help="episodes per no-grad pass of ours (old log-probs, reference, values); default "
                        "--batch, the chunk TRL's local_rollout_forward_batch_size gives its own")
    parser.add_argument("--epochs", type=int, default=1, help="PPO epochs per iteration (default 1)")
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens (default 256)")
    parser.add_argument("--response", type=int, default=256, help="generated tokens (default 256)")
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed first iterations (default 1)")
    parser.add_argument("--no-bf16", dest="bf16", action="store_false", help="fp32 (CPU runs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the records to this JSON file")
    parser.add_argument("--worker-output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inference_batch is None:
        args.inference_batch = args.batch
    return args


def run_in_subprocess(impl: str, argv: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "record.json"
        command = [sys.executable, "-m", "experiments.ppo_throughput", *argv, "--impl", impl,
                   "--worker-output", str(output)]
        completed = subprocess.run(command, cwd=Path(__file__).resolve().parents[1], env=os.environ.copy())
        if completed.returncode != 0 or not output.exists():
            return {"implementation": impl, "skipped": f"the {impl} run failed (exit {completed.returncode}); "
                    "its traceback is above"}
        return json.loads(output.read_text())


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.batch % args.minibatch or args.minibatch % args.micro:
        print("--batch must be a multiple of --minibatch, and --minibatch of --micro", file=sys.stderr)
        return 2
    if args.inference_batch < 1:
        print("--inference-batch must be at least 1", file=sys.stderr)
        return 2
    if args.worker_output:
        record = run_ours(args) if args.impl == "cuda-agent" else run_trl(args)
        args.worker_output.write_text(json.dumps(record))
        return 0
    parent_argv = _without(argv, ("--impl", "--json"))
    implementations = IMPLEMENTATIONS if args.impl == "both" else (args.impl,)
    records = [run_in_subprocess(impl, parent_argv) for impl in implementations]
    parameters = sum(p.numel() for p in random_policy(args).parameters())
    print(f"\nPPO iteration, {parameters / 1e6:.1f}M-parameter Llama-style model, batch {args.batch}, "
          f"prompt {args.prompt} + response {args.response} tokens, {args.epochs} epoch(s), "
          f"minibatch {args.minibatch}, micro-batch {args.micro}, no-grad chunk {args.inference_batch} (ours), "
          f"{'bf16' if args.bf16 else 'fp32'}")
    table = pd.DataFrame([r for r in records if "skipped" not in r])
    if not table.empty:
        print(table.to_string(index=False, float_format=lambda value: f"{value:.3f}"))
    for record in records:
        if "skipped" in record:
            print(f"{record['implementation']}: skipped: {record['skipped']}")
    comparison = compare(records)
    if comparison:
        print(f"cuda-agent vs trl: {comparison['speedup_vs_trl']:.2f}x TRL's speed (TRL's iteration time / ours; "
              f"above 1: ours is faster), tokens/s ratio {comparison['tokens_per_s_ratio']:.2f}"
              + (f", peak memory ratio {comparison['peak_memory_ratio']:.2f}" if "peak_memory_ratio" in comparison else ""))
    if args.json:
        args.json.write_text(json.dumps({"parameters": parameters, "settings": vars(args) | {"json": str(args.json)},
                                         "records": records, "comparison": comparison}, indent=2, default=str))
    return 0


def compare(records: list[dict]) -> dict:
    """Ours relative to TRL, when both ran: speed as TRL's iteration time over ours."""
    ran = {r["implementation"]: r for r in records if "skipped" not in r}
    if set(ran) != set(IMPLEMENTATIONS):
        return {}
    ours, trl = ran["cuda-agent"], ran["trl"]
    comparison = {"speedup_vs_trl": trl["iteration_s"] / ours["iteration_s"],
                  "tokens_per_s_ratio": ours["tokens_per_s"] / trl["tokens_per_s"]}
    if ours["peak_memory_gib"] and trl["peak_memory_gib"]:
        comparison["peak_memory_ratio"] = ours["peak_memory_gib"] / trl["peak_memory_gib"]
    return comparison


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """argv minus the given options and their values."""
    kept, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item in options:
            skip = True
            continue
        if not any(item.startswith(option + "=") for option in options):
            kept.append(item)
    return kept


if __name__ == "__main__":
    sys.exit(main())
