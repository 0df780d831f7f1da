"""Root pytest configuration: shared by tests/ and by nbval over book/.

Points tiktoken (and the data loaders) at the offline copies in ../shared/data when they are
there and nothing else was set, before any notebook kernel starts (kernels inherit the environment).
"""

import os
from pathlib import Path

_data = Path(__file__).resolve().parent.parent / "shared" / "data"
if _data.is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(_data / "tiktoken-cache"))
    os.environ.setdefault("TFS_DATA_DIR", str(_data))


# ---- per-chapter time budget -------------------------------------------------------------------
# nbval runs each notebook cell as a test item; their durations add up to the chapter's run time.
# Part I chapters (01-05) must run on a CPU in under 60 s, part II in under 180 s (the issues' budgets).
import re  # noqa: E402
from collections import defaultdict  # noqa: E402

BUDGET_SECONDS = {range(1, 6): 60, range(6, 100): 180}
_notebook_seconds: dict[str, float] = defaultdict(float)


def budget(notebook: str) -> float | None:
    m = re.match(r"(\d+)_", Path(notebook).name)
    if m:
        for chapters, seconds in BUDGET_SECONDS.items():
            if int(m.group(1)) in chapters:
                return seconds
    return None


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _notebook_seconds[path] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _notebook_seconds:
        return
    terminalreporter.section("chapter run times (nbval, CPU)")
    for path, seconds in sorted(_notebook_seconds.items()):
        limit = budget(path)
        flag = "" if limit is None or seconds <= limit else f"  OVER BUDGET ({limit:.0f} s)"
        terminalreporter.write_line(f"{path:<40} {seconds:6.1f} s{flag}")


def pytest_sessionfinish(session, exitstatus):
    over = {p: s for p, s in _notebook_seconds.items() if budget(p) is not None and s > budget(p)}
    if over and session.exitstatus == 0:
        session.exitstatus = 1  # a chapter over its time budget fails the run
