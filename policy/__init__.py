"""The agent side of cuda-agent: workspaces, tools, the ReAct loop, rollout engines and training."""
