"""What a run leaves on disk and reads back: Results as JSON lines that survive kills and let a run
resume (`results_file`, on `state_files`), problems paired with candidates by name (`pairing`), and
paths as the user typed them (`user_paths`). The Result record itself is `core.result`; the baseline
and footprint caches belong to `timing` and `resources`."""
