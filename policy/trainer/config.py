"""The training run's configuration: a TrainConfig dataclass with one StageConfig per stage, read
from YAML with every unknown key reported. Each algorithm's own settings dataclass lives next to
its loop (ppo.py, rft.py, value_pretrain.py)."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pytest_cudaagent.records.user_paths import absolute_path

from .ppo import PPOConfig
from .rewards import SCORERS
from .rft import RFTConfig
from .value_pretrain import ValuePretrainConfig

# Environment options that name files or folders (cuda_single_turn.py, agent_loop.py).
PATH_OPTIONS = ("problems", "work_dir")

# Stage name -> (the StageConfig field holding its settings, the settings class).
STAGE_SETTINGS = {
    "ppo-single-turn": ("ppo", PPOConfig),
    "ppo-multi-turn": ("ppo", PPOConfig),
    "rft": ("rft", RFTConfig),
    "value-pretrain": ("value", ValuePretrainConfig),
}


@dataclass
class RolloutConfig:
    # Per assistant turn; the CUDA tasks need thousands, the toy tasks a handful.
    max_new_tokens: int = 32
    # Whole episode (prompt, every turn and every tool output); the paper trains at 128k.
    max_total_tokens: int = 1024
    # PPO optimises the sampler's own distribution, so sampling is plain temperature sampling.
    temperature: float = 1.0
    generation_batch_size: int = 64
    # in-process: generate with the actor itself (transformers); vllm: a vLLM engine in this
    # process that gets the actor's weights pushed before every collection (one process only).
    engine: str = "in-process"
    # Keyword arguments of vllm.LLM (e.g. gpu_memory_utilization: 0.3, leaving room to train).
    vllm_options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.engine not in ("in-process", "vllm"):
            raise ValueError(f"rollout engine {self.engine!r} is unknown; use in-process or vllm")


@dataclass
class EnvironmentConfig:
    # target-token | scripted-tools | prompt-outcome (toy, CPU) | cuda-single-turn | cuda-agent
    kind: str = "target-token"
    # Keyword arguments of the environment's constructor (e.g. problems_dir for the CUDA ones).
    options: dict = field(default_factory=dict)
    # inline: score in the trainer's process (toy rewards); pool: one evaluator worker per device,
    # each episode scored the moment it ends; xdist: the whole batch through one pytest -n run of
    # the plugin. None: the stage's default (default_scorer).
    scorer: str | None = None
    # Devices of the scoring pool or xdist workers (one per entry); default every visible GPU.
    scoring_devices: list[str] | None = None

    def __post_init__(self):
        if self.scorer is not None and self.scorer not in SCORERS:
            raise ValueError(f"unknown scorer {self.scorer!r}; use one of {', '.join(SCORERS)}")


# The environments whose episodes the evaluator scores through a scorer (cuda-agent scores inside
# its own loop; the toy ones in microseconds).
EVALUATOR_SCORED = ("cuda-single-turn",)


def default_scorer(stage_name: str, environment_kind: str) -> str:
    """xdist for the batch-synchronous stages (the batch is generated, then scored, then trained
    on: one pytest-xdist run over it keeps every GPU's timing busy); pool for ppo-multi-turn, whose
    episodes end at different turns and are scored while the others still generate."""
    if environment_kind not in EVALUATOR_SCORED:
        return "inline"
    return "pool" if stage_name == "ppo-multi-turn" else "xdist"


@dataclass
class StageConfig:
    name: str
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ppo: PPOConfig | None = None
    rft: RFTConfig | None = None
    value: ValuePretrainConfig | None = None

    def __post_init__(self):
        if self.name not in STAGE_SETTINGS:
            raise ValueError(f"unknown stage {self.name!r}; stages are {', '.join(STAGE_SETTINGS)}")
        settings_field, settings_class = STAGE_SETTINGS[self.name]
        if getattr(self, settings_field) is None:
            setattr(self, settings_field, settings_class())
        if self.environment.scorer is None:
            self.environment.scorer = default_scorer(self.name, self.environment.kind)

    @property
    def settings(self):
        return getattr(self, STAGE_SETTINGS[self.name][0])


@dataclass
class TinyModelConfig:
    hidden_size: int = 64
    layers: int = 2
    seed: int = 0


@dataclass
class TrainConfig:
    output_dir: str = "runs/train"
    # A local model directory (transformers format), or "tiny" for the offline test model.
    model: str = "tiny"
    # The critic's starting weights; default: the actor's model.
    critic_model: str | None = None
    tiny_model: TinyModelConfig = field(default_factory=TinyModelConfig)
    seed: int = 0
    # no | fp16 | bf16, passed to accelerate (bf16 on H100).
    mixed_precision: str = "no"
    # Gradient checkpointing trades compute for memory on long multi-turn contexts.
    gradient_checkpointing: bool = False
    save_every: int = 10
    tensorboard: bool = True
    progress: bool = True
    stages: list[StageConfig] = field(default_factory=list)
    # Where the scorers write candidate files and run pytest, each process in <stage>/process-<N>
    # under it; a folder on this machine's own disk (several machines: README, "Two machines").
    # Default: the environment's CUDAAGENT_SCORING_DIR, else OUTPUT_DIR/<stage>/scoring.
    scoring_dir: str | None = None

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no training config at {path}; see policy/trainer/configs/ for examples")
        data = yaml.safe_load(path.read_text()) or {}
        return from_dict(cls, data, str(path))

    def resolve_paths(self, base: Path) -> None:
        """Relative paths in the config made absolute against `base` (the caller's working
        directory, like the command line's), before any stage runs elsewhere."""
        self.output_dir = absolute_path(self.output_dir, base)
        if self.model != "tiny":
            self.model = absolute_path(self.model, base)
        if self.critic_model:
            self.critic_model = absolute_path(self.critic_model, base)
        if self.scoring_dir:
            self.scoring_dir = absolute_path(self.scoring_dir, base)
        for stage in self.stages:
            options = stage.environment.options
            options.update({key: absolute_path(options[key], base) for key in PATH_OPTIONS if options.get(key)})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def from_dict(cls, data: dict, where: str):
    """Builds dataclass `cls` from `data`, recursing into nested dataclasses and lists of them."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping for {cls.__name__}, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} for {cls.__name__}; known keys: {sorted(known)}")
    values = {}
    for name, value in data.items():
        values[name] = _convert(hints[name], value, f"{where}.{name}")
    return cls(**values)


def _convert(hint, value, where):
    if value is None:
        return None
    # `X | None` unions: look at their members; a bare type is its own only candidate.
    candidates = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for candidate in candidates:
        if dataclasses.is_dataclass(candidate):
            return from_dict(candidate, value, where)
        if typing.get_origin(candidate) is list:
            (item_type,) = typing.get_args(candidate)
            if dataclasses.is_dataclass(item_type):
                return [from_dict(item_type, item, f"{where}[{i}]") for i, item in enumerate(value)]
    return value
