"""The stage names a training config may list, apart from their settings classes
(config.STAGE_SETTINGS) so that `cudaagent train --help` needs no training stack."""

STAGE_NAMES = ("ppo-single-turn", "ppo-multi-turn", "rft", "value-pretrain")
