"""The chapters' time budgets (conftest.py) measure the chapter's own CPU time, not the machine's load."""

import importlib.util
import subprocess
import sys
import time

import pytest

from .test_book import ROOT

spec = importlib.util.spec_from_file_location("book_budgets", ROOT / "conftest.py")
budgets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(budgets)

linux = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
# a child that waits 1 s, burns `work` loops of Python, then waits to be read and killed
CHILD = "import sys, time; time.sleep({sleep}); x = 0\nfor i in range({work}): x += i\nprint('done', flush=True); sys.stdin.read()"


def cpu_of_child(work: int, sleep: float = 0.0) -> tuple[float, float]:
    """(CPU seconds, wall seconds) a child process took for ``work`` loops after sleeping ``sleep`` s."""
    start = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(sleep=sleep, work=work)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        wall = time.monotonic() - start
        return budgets.process_cpu_seconds(child.pid), wall
    finally:
        child.kill()
        child.wait()


def spin(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"])


@pytest.mark.slow
@linux
def test_cpu_seconds_count_work_not_waiting():
    cpu, wall = cpu_of_child(work=3_000_000, sleep=1.0)
    assert wall > 1.0 and cpu < wall - 0.7, f"{cpu:.2f} CPU s of {wall:.2f} wall s: the sleep was counted"


@pytest.mark.slow
@linux
def test_load_stretches_the_wall_clock_but_not_the_cpu_time():
    quiet, _ = cpu_of_child(work=20_000_000)
    spinners = [spin(quiet * 6 + 5) for _ in range(3)]  # three busy processes on the machine's cores
    try:
        loaded, wall = cpu_of_child(work=20_000_000)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    assert wall > 1.2 * quiet, "the spinners did not load the machine"
    # within the budget's margin (2x), which a chapter more than 2x slower exceeds (test below). Not 1:
    # where two virtual CPUs share a physical core, a busy neighbour slows each instruction (1.57x seen
    # here with three spinners on 2 vCPUs), which is why the budgets leave a factor of 2
    assert loaded < 1.8 * quiet, f"{loaded:.2f} CPU s under load vs {quiet:.2f} quiet"


def test_every_chapter_has_a_measured_budget_of_at_most_twice_its_cpu_time():
    chapters = sorted(ROOT.glob("book/[0-9]*.ipynb"))
    assert chapters
    for path in chapters:
        number = budgets.chapter(path.name)
        assert number in budgets.CPU_SECONDS, f"{path.name} has no measured CPU_SECONDS in conftest.py"
        limit = budgets.budget(f"book/{path.name}")
        assert budgets.CPU_SECONDS[number] < limit <= 2 * budgets.CPU_SECONDS[number] + 5, path.name
    assert budgets.budget("tests/stand_in.ipynb") is None  # not a chapter: no budget
