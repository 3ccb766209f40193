"""The worker's process tree as the parent's memory check walks it: every descendant (forked by
any thread), the same set as psutil's walk, and psutil's walk where the kernel has no children
files."""

import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from pytest_cudaagent.system import proc_tree

# A process whose children come from its main thread and from another thread that stays alive
# (the kernel lists a child under the thread that forked it while that thread lives), one of
# them with a child of its own; it prints READY once all are running.
TREE = textwrap.dedent("""
    import subprocess, sys, threading, time
    children = [subprocess.Popen(["sleep", "60"])]
    started, done = threading.Event(), threading.Event()
    def from_a_thread():
        children.append(subprocess.Popen(["bash", "-c", "sleep 60 & wait"]))
        started.set()
        done.wait()
    threading.Thread(target=from_a_thread, daemon=True).start()
    started.wait()
    time.sleep(0.3)
    print("READY", flush=True)
    sys.stdin.read()
""")


@pytest.fixture
def tree():
    process = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "READY"
    yield process
    for child in psutil.Process(process.pid).children(recursive=True):
        child.kill()
    process.kill()
    process.wait()


def test_every_descendant_is_found_whichever_thread_forked_it(tree):
    if not proc_tree.children_files_exist(tree.pid):
        pytest.skip("this kernel has no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)")
    pids = proc_tree.tree_pids(tree.pid)
    expected = {tree.pid, *(child.pid for child in psutil.Process(tree.pid).children(recursive=True))}
    assert pids[0] == tree.pid and set(pids) == expected and len(pids) == len(expected)
    assert len(expected) == 4  # sleep, bash, bash's sleep and the root


def test_memory_is_the_sum_over_the_tree(tree):
    pids = proc_tree.tree_pids(tree.pid)
    expected = sum(psutil.Process(pid).memory_info().rss for pid in pids)
    # pages come and go between the two reads; the same order of magnitude is what matters
    assert 0.9 * expected <= proc_tree.rss_bytes(pids) <= 1.1 * expected
    assert proc_tree.rss_bytes([pids[0], 2**22 + 12345]) > 0  # an ended pid counts nothing


def test_without_children_files_psutil_walks_the_tree(tree, monkeypatch):
    monkeypatch.setattr(proc_tree, "children_files_exist", lambda pid: False)
    walked = []
    original = psutil.Process.children

    def children(self, recursive=False):
        walked.append(self.pid)
        return original(self, recursive=recursive)

    monkeypatch.setattr(psutil.Process, "children", children)
    assert set(proc_tree.tree_pids(tree.pid)) == {tree.pid, *(c.pid for c in original(psutil.Process(tree.pid), True))}
    assert walked == [tree.pid]


def test_an_ended_root_is_no_such_process():
    process = subprocess.Popen(["true"])
    process.wait()
    time.sleep(0.05)
    with pytest.raises(psutil.NoSuchProcess):
        proc_tree.tree_pids(process.pid)


def test_stopped_stops_a_tree_for_the_block_and_continues_it_after():
    """The root and a grandchild both stopped ('T') inside the block, running again after it; a
    process that ended before the block is passed over without an error."""
    import subprocess
    import sys
    import time

    from pytest_cudaagent.system.proc_tree import stopped

    # A shell whose child sleeps: root -> sleep.
    root = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(proc_tree.tree_pids(root.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        tree = proc_tree.tree_pids(root.pid)
        assert len(tree) == 2, tree
        with stopped(root.pid) as held:
            assert set(held) == set(tree)
            assert {proc_tree._state(pid) for pid in tree} == {"T"}
        time.sleep(0.05)
        assert "T" not in {proc_tree._state(pid) for pid in tree}
        ended = subprocess.Popen([sys.executable, "-c", "pass"])
        ended.wait()
        with stopped(ended.pid) as held:
            assert held == []
    finally:
        root.kill()
        root.wait()
