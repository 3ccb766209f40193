"""A device's memory among the evaluations that share it: what a problem needs (`footprints`), who
may run now and a retry with the device alone (`memory_gate`), and how an out-of-memory error is
recognised and named (`out_of_memory`). The host's own memory figures are `system.host_memory`;
the timing locks are `timing.locks`."""
