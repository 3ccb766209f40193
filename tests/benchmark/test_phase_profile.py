"""experiments/phase_profile.py's parent profile: the first repeat of each pair is never profiled
(it pays the builds), so a run of one repeat has nothing to print; it says so and the run goes on
(on the H100 the crash there took the side by side's parent profile with it)."""
import cProfile
import io

from rich.console import Console

from experiments.phase_profile import print_parent_profile


def _printed(profiler, path) -> str:
    out = io.StringIO()
    print_parent_profile(profiler, path, {}, Console(file=out, width=200))
    return out.getvalue()


def test_a_run_with_no_warm_repeat_says_so_instead_of_failing(tmp_path):
    text = _printed(cProfile.Profile(), tmp_path / "parent.prof")
    assert "no warm repeat was profiled" in text and "--repeats 2" in text
    assert not (tmp_path / "parent.prof").exists()


def test_a_profiled_repeat_is_written_and_printed(tmp_path):
    profiler = cProfile.Profile()
    profiler.enable()
    sorted(range(1000), key=lambda value: -value)
    profiler.disable()
    text = _printed(profiler, tmp_path / "parent.prof")
    assert (tmp_path / "parent.prof").stat().st_size > 0
    assert "by tottime" in text and "by cumulative" in text and "CPU seconds per thread" in text
