"""The worker processes and the parent's side of them: what runs inside the reference's and the
candidate's workers (`worker`), the pipe, deadlines and memory cap (`channel`), the zygote they are
forked from (`zygote`), the candidate's confinement (`sandbox`), the allow-list that unpickles
their replies (`replies`), one reference kept for a batch (`reference_batch`), the next candidate's
worker started ahead (`start_ahead`) and whether a worker was killed from outside (`outside_kill`).
The evaluation that drives two workers and compares their outputs is `pytest_cudaagent.evaluation`;
the checks that run inside the candidate's worker are `rules`."""
