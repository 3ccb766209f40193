"""The anti-hacking checks: where a rule's detection lives. The policies (`rules`: which operators
and library kernels a candidate may use), the run-time guards around `forward` (`guards`), the
static scans of the sources (`static_scan`), where the kernels that ran came from (`provenance`),
poisoned free memory (`memory`), the outputs' type, aliasing and input changes (`outputs`),
output memory read as it is (`output_memory`), the worker's timing held against what is seen from
outside it (`outside_view`) and persisting-L2 lines (`l2_persistence`). Each finding is a
`Violation` whose rule name is the one the README's rule table and the adversarial tests use.
Not here: the sandbox that confines the candidate's process (`workers.sandbox`), the reply
unpickler (`workers.replies`) and the timer that the L2 guard serves (`timing.timer`)."""
