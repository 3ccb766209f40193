"""The machine as the operating system shows it, knowing nothing of problems, candidates or
verdicts: processes that die with their parent (`lifetime`), a process tree read from `/proc`
(`proc_tree`), waiting on any file descriptor (`fd_wait`), the host's memory (`host_memory`), one
GPU per xdist worker (`gpu_pinning`) and what a measurement ran on (`envinfo`). The ground floor:
it imports no other part of the evaluator. Locks, sandboxes and workers, which use these, live in
`timing` and `workers`."""
