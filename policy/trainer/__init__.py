"""The trainer: PPO (single- and multi-turn), rejection fine-tuning and value pretraining on
accelerate, run as a pipeline of stages from a YAML config (`cudaagent train`)."""
