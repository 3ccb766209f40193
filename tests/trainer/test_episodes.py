"""Episode collection: the token record matches what the chat template renders, only the model's
tokens are marked, the sampler's log-probs match the trainer's forward pass, and scoring works
in a spawned worker pool."""

import random

import pytest
import torch

from policy.trainer.environments import ScriptedToolEnvironment, TargetTokenEnvironment
from policy.trainer.episodes import collect_rollouts
from policy.trainer.generation import Completion, InProcessGenerator
from policy.trainer.ppo import policy_logprobs
from policy.trainer.rewards import DevicePoolScorer, InlineScorer
from policy.trainer.rft import RFTConfig, rejection_reason
from policy.trainer.rollout import Rollout, pad_rollouts, resolve_scores


class ScriptedGenerator:
    """Replies with fixed texts ending the turn, so multi-turn bookkeeping is tested exactly and
    fast (an untrained model rarely ends its turn)."""

    def __init__(self, tokenizer, replies):
        self.tokenizer = tokenizer
        self.replies = iter(replies)

    def generate(self, prompts, max_new_tokens):
        completions = []
        for _ in prompts:
            ids = self.tokenizer(next(self.replies), add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            completions.append(Completion(ids, [-0.5] * len(ids), finished=True))
        return completions


def test_multi_turn_record_is_the_rendered_conversation_with_model_tokens_marked(tiny_pair):
    _, tokenizer = tiny_pair
    environment = ScriptedToolEnvironment(max_turns=3)
    tasks = environment.sample_tasks(2, random.Random(0))
    # Turn by turn for both episodes: episode 0 finds a number in its second turn, episode 1 never.
    generator = ScriptedGenerator(tokenizer, ["look left", "search the room", "found 7", "", "nothing"])
    rollouts = collect_rollouts(generator, tokenizer, environment, tasks, InlineScorer(environment),
                                max_new_tokens=50, max_total_tokens=4096)
    assert [r.assistant_turns for r in rollouts] == [["look left", "found 7"], ["search the room", "", "nothing"]]
    assert [r.resolve_reward() for r in rollouts] == [1.0, 0.0]
    assert [r.invalid_tool_calls for r in rollouts] == [0, 1]
    for task, rollout in zip(tasks, rollouts, strict=True):
        messages = list(task.messages)
        for turn, text in enumerate(rollout.assistant_turns, start=1):
            messages.append({"role": "assistant", "content": text})
            reply = environment.reply(task, rollout.assistant_turns[:turn])
            if reply is not None:
                messages.append(reply.message)
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
        # The record ends at the model's last end-of-turn; the template adds a newline after it.
        assert tokenizer.decode(rollout.token_ids) == rendered.removesuffix("\n")
        model_tokens = [t for t, m in zip(rollout.token_ids, rollout.action_mask, strict=True) if m]
        assert tokenizer.decode(model_tokens) == "".join(text + "<|im_end|>" for text in rollout.assistant_turns)
        other_tokens = [t for t, m in zip(rollout.token_ids, rollout.action_mask, strict=True) if not m]
        assert "room 1 is empty" in tokenizer.decode(other_tokens)
        assert rollout.sampler_logprobs == [-0.5 if m else 0.0 for m in rollout.action_mask]


def test_token_budget_ends_the_episode_as_truncated(tiny_pair):
    _, tokenizer = tiny_pair
    environment = ScriptedToolEnvironment(max_turns=5)
    tasks = environment.sample_tasks(1, random.Random(0))
    generator = ScriptedGenerator(tokenizer, ["look " * 20, "never asked for"])
    (rollout,) = collect_rollouts(generator, tokenizer, environment, tasks, InlineScorer(environment),
                                  max_new_tokens=50, max_total_tokens=60)
    assert rollout.truncated and len(rollout.assistant_turns) == 1


def test_sampler_logprobs_match_trainer_forward_pass(tiny_pair):
    model, tokenizer = tiny_pair
    torch.manual_seed(1)
    environment = TargetTokenEnvironment()
    # Prompts of different lengths: left padding in generation, right padding in training.
    tasks = environment.sample_tasks(8, random.Random(0))
    assert len({len(t.messages[0]["content"]) for t in tasks}) > 1
    generator = InProcessGenerator(model, tokenizer.pad_token_id, tokenizer.eos_token_id, temperature=0.8, batch_size=8)
    rollouts = collect_rollouts(generator, tokenizer, environment, tasks, InlineScorer(environment),
                                max_new_tokens=12, max_total_tokens=256)
    batch = pad_rollouts(rollouts, tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs, _ = policy_logprobs(model, batch, temperature=0.8)
    mask = batch.action_mask.bool()
    assert mask.sum() == sum(r.generated_token_count for r in rollouts) > 0
    assert torch.allclose(logprobs[mask], batch.sampler_logprobs[mask], atol=1e-4)


def test_pad_rollouts_shifts_mask_onto_predictions():
    rollouts = [
        Rollout("a", [5, 6, 7, 8], [0, 0, 1, 1], [0.0, 0.0, -1.0, -2.0], reward=1.0),
        Rollout("b", [5, 9], [0, 1], [0.0, -3.0], reward=0.0),
    ]
    batch = pad_rollouts(rollouts, pad_token_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch.action_mask.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert batch.sampler_logprobs.tolist() == [[0.0, -1.0, -2.0], [-3.0, 0.0, 0.0]]
    assert resolve_scores(rollouts).tolist() == [1.0, 0.0]


def test_model_token_columns_span_the_first_to_the_last_model_token_of_any_episode():
    rollouts = [
        Rollout("a", [5, 6, 7, 8, 9, 3], [0, 0, 0, 1, 0, 0], [0.0] * 6, reward=1.0),  # ends in tool tokens
        Rollout("b", [5, 9, 4], [0, 1, 1], [0.0] * 3, reward=0.0),
    ]
    batch = pad_rollouts(rollouts, pad_token_id=0)  # shifted mask: [[0, 0, 1, 0, 0], [1, 1, 0, 0, 0]]
    assert batch.model_token_columns() == slice(0, 3)
    assert batch.select(slice(0, 1)).model_token_columns() == slice(2, 3)
    no_model_tokens = Rollout("c", [5, 6], [0, 0], [0.0, 0.0], reward=0.0)
    assert pad_rollouts([no_model_tokens], pad_token_id=0).model_token_columns() == slice(0, 1)


def test_unscored_rollout_says_what_to_do():
    with pytest.raises(RuntimeError, match="submit it to a scorer"):
        Rollout("x", [1], [1], [0.0]).resolve_reward()


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({}, None),
        ({"reward": 0.0}, "low_reward"),
        ({"invalid_tool_calls": 1}, "invalid_tool_calls"),
        ({"assistant_turns": ["ls", "ls", " ls ", "done"]}, "repeated_turns"),
        ({"truncated": True}, "truncated"),
    ],
)
def test_rft_rejection_reasons(changes, reason):
    fields = {"task_id": "t", "token_ids": [1], "action_mask": [1], "sampler_logprobs": [0.0],
              "assistant_turns": ["ls", "ls", "done"], "reward": 2.0, **changes}
    assert rejection_reason(Rollout(**fields), RFTConfig(max_repeated_turns=2, drop_truncated=True)) == reason


def test_device_pool_scorer_scores_in_spawned_workers():
    environment = TargetTokenEnvironment()
    task = environment.sample_tasks(1, random.Random(0))[0]
    scorer = DevicePoolScorer(environment, ["cpu", "cpu"])
    try:
        futures = [scorer.submit(task, ["the answer is 7"]), scorer.submit(task, ["no digits here"])]
        assert [f.result(timeout=120) for f in futures] == [1.0, 0.0]
    finally:
        scorer.close()
