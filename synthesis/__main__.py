"""`python -m synthesis synth run ...`: the synth commands without the cudaagent entry point."""

import sys

from .cli import main

sys.exit(main())
