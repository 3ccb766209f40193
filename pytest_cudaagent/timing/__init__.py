"""How a time is taken and kept: the synchronised timer (`timer`), one timing at a time per device
and no untimed work of ours beside it (`locks`, with `waits` saying who holds what), cores reserved
for the timed process (`host_quiet`), the backend settings the candidate and the baselines are
timed under (`backend_settings`), and the baselines' cache and spread (`baseline_cache`,
`baseline_spread`). Checks that a candidate's time is honest are rules (`rules.outside_view`,
`rules.l2_persistence`); the evaluation decides what the times mean."""
