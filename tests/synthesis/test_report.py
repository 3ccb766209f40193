"""The run's numbers from its records alone: sessions (a killed one included) and their rate,
time per filter with the lock waits, and the tasks a stopped run left in flight."""

import json

import pandas as pd

from synthesis.manifest import Manifest, TaskRecord
from synthesis.report import LOCK_WAIT_ROW, filter_time_table, session_table, throughput
from synthesis.stage_log import in_flight, read_stage_log, stage_line


def record(task_id: str, kept: bool, finished_at: float, seconds: dict, lock_wait: float = 0.0) -> TaskRecord:
    return TaskRecord(id=task_id, origin="compose", source_hash="0", operators=[], families=[],
                      input_shapes=[], dtype="float32", kept=kept, reasons=[] if kept else ["workload_too_fast"],
                      checks={name: "pass" for name in seconds}, filter_seconds=seconds,
                      lock_wait_seconds=lock_wait, finished_at=finished_at)


def test_sessions_and_rate_over_a_killed_session_and_a_clean_one(tmp_path):
    manifest = Manifest(tmp_path)
    manifest._append_session({"session": 0, "started_at": 1000.0, "workers": 14})  # killed: no end
    manifest.append(record("a", True, 1010.0, {"eager": 1.0, "workload": 2.0}, lock_wait=0.5))
    manifest.append(record("b", False, 1030.0, {"eager": 1.0}))
    manifest._append_session({"session": 1, "started_at": 5000.0, "workers": 14})
    manifest.append(record("c", True, 5020.0, {"eager": 3.0, "workload": 2.0}))
    manifest._append_session({"session": 1, "ended_at": 5060.0})

    again = Manifest(tmp_path)  # read back from the files, as a summary after a kill would
    frame, sessions = again.frame(), again.sessions()
    table = session_table(frame, sessions)
    assert table["wall s"].tolist() == [30.0, 60.0]  # to the last record, then to the clean end
    assert table["end"].tolist() == ["killed", "clean"] and table["candidates"].tolist() == [2, 1]
    numbers = throughput(frame, sessions)
    assert numbers["candidates"] == 3 and numbers["kept"] == 2 and numbers["runtime_filtered"] == 3
    assert numbers["candidates_per_hour"] == 3 / 90 * 3600

    split = filter_time_table(frame).set_index("filter")
    assert split.loc["eager", "seconds"] == 5.0 and split.loc["workload", "tasks"] == 2
    assert split.loc[LOCK_WAIT_ROW, "seconds"] == 0.5


def test_in_flight_names_the_stage_a_stopped_run_left_each_task_in(tmp_path):
    path = tmp_path / "stages.log"
    lines = [stage_line(11, "t1", "eager"), stage_line(11, "t1", "done", "kept"),
             stage_line(12, "t2", "eager"), stage_line(12, "t2", "workload", "batch 8: 0.1 ms"),
             stage_line(12, "t2", "workload", "batch 800: 1.5 ms"), stage_line(13, "t3", "compile"),
             "a warning that is not a stage line\n", stage_line(14, "t4", "eager")]
    path.write_text("".join(lines))
    stages = read_stage_log(path)
    assert len(stages) == 7
    stages["time"] = [90.0, 95.0, 100.0, 110.0, 150.0, 120.0, 200.0]  # in the order written
    flight = in_flight(stages, finished={"t4"})
    assert flight["task"].tolist() == ["t2", "t3"]  # t1 done, t4 in the manifest
    assert flight["seconds in stage"].tolist() == [90.0, 80.0]  # workload since 110, compile since 120
    assert flight.loc[0, "detail"] == "batch 800: 1.5 ms"
    assert json.loads(pd.Series(flight.to_dict("records")).to_json())  # serialisable for --json
