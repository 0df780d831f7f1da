"""The chapters' structure: what CONTRIBUTING.md asks of every notebook, checked on the sources."""

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

import transformer_lib

ROOT = Path(__file__).resolve().parents[1]
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
SETUP_CELL = (ROOT / "book" / "_setup_cell.py").read_text().strip()


def _code_columns() -> int:
    """The page design's code width (book/_ext/page_style.py), read without importing Sphinx."""
    text = (ROOT / "book" / "_ext" / "page_style.py").read_text()
    return int(re.search(r"^CODE_COLUMNS = (\d+)", text, flags=re.M).group(1))


CODE_COLUMNS = _code_columns()


def toc_files(node) -> list[str]:
    found = []
    if isinstance(node, dict):
        if "file" in node:
            found.append(node["file"])
        for value in node.values():
            found += toc_files(value)
    elif isinstance(node, list):
        for item in node:
            found += toc_files(item)
    return found


CHAPTERS = [ROOT / f"{f}.ipynb" for f in toc_files(TOC) if (ROOT / f"{f}.ipynb").exists()]


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def code_cells(nb):
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_toc_and_notebooks_agree():
    listed = {ROOT / f"{f}.ipynb" for f in toc_files(TOC) if not f.endswith("intro")}
    on_disk = set((ROOT / "book").glob("*.ipynb"))
    assert listed == on_disk, f"in _toc.yml but missing: {listed - on_disk}; on disk but not in _toc.yml: {on_disk - listed}"


def test_setup_cell_installs_this_version_from_the_configured_repository():
    pin = re.search(r"git\+(\S+?)@v([\w.]+)\"", SETUP_CELL)
    assert pin, "the set-up cell must pin the library to a tag"
    assert pin.group(1) == CONFIG["repository"]["url"]
    assert pin.group(2) == transformer_lib.__version__


def test_colab_preinstalled_versions_satisfy_our_floors():
    """Colab ships plotly 5.24 and ipywidgets 7.7: installing the book must not upgrade them (what pip
    then does beside them, with every dependency: tests/test_colab_install.py)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = pyproject["dependencies"] + pyproject["optional-dependencies"]["book"]
    reqs += [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    colab = {"plotly": "5.24.1", "ipywidgets": "7.7.1", "torch": "2.8.0", "numpy": "2.0.2", "einops": "0.8.1",
             "protobuf": "5.29.5", "ipykernel": "6.17.1", "transformers": "4.57.1", "tqdm": "4.67.1"}
    for line in reqs:
        req = Requirement(line)
        if req.name in colab:
            assert req.specifier.contains(colab[req.name]), f"{line} would reinstall Colab's {req.name} {colab[req.name]}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
class TestChapter:
    def test_committed_without_outputs(self, path):
        for cell in code_cells(load(path)):
            assert not cell.get("outputs") and cell.get("execution_count") is None, "strip outputs before committing"

    def test_code_fits_the_page(self, path):
        """The page shows CODE_COLUMNS characters of code whole at 1280 px (the browser test measures it)."""
        long = [(i, len(line)) for i, cell in enumerate(load(path)["cells"]) if cell["cell_type"] == "code"
                for line in source(cell).splitlines() if len(line) > CODE_COLUMNS]
        assert not long, f"(cell, length) of code lines over {CODE_COLUMNS} characters: {long}"

    def test_bookkeeping_is_hidden(self, path):
        """The reader sees neither the Colab set-up cell nor the cells that only record measurements."""
        cells = code_cells(load(path))
        assert "remove-cell" in cells[0].get("metadata", {}).get("tags", []), "tag the set-up cell remove-cell"
        for cell in cells:
            if source(cell).lstrip().startswith("tl.measurements.record("):
                assert {"hide-input", "remove-input", "remove-cell"} & set(cell.get("metadata", {}).get("tags", []))

    def test_first_code_cell_is_the_setup_cell(self, path):
        assert source(code_cells(load(path))[0]).strip() == SETUP_CELL

    def test_sections(self, path):
        nb = load(path)
        markdown = "\n".join(source(c) for c in nb["cells"] if c["cell_type"] == "markdown")
        titles = re.findall(r"^# .+", markdown, flags=re.M)
        assert len(titles) == 1 and source(nb["cells"][0]).startswith("# "), "exactly one # title, in the first cell"
        for section in ("Learning goals", "Exercises", "Summary", "References"):
            assert re.search(rf"^##+ .*{section}", markdown, flags=re.M | re.I), f"missing section: {section}"

    def test_uses_the_library_and_shows_its_source(self, path):
        code = "\n".join(source(c) for c in code_cells(load(path)))
        assert "import transformer_lib as tl" in code
        assert "viz.show_source(" in code
        assert "torch.manual_seed(" in code

    def test_exercises_have_checks_and_hidden_solutions(self, path):
        cells = code_cells(load(path))
        chapter = path.stem[:2]
        assert any(f"exercises import ch{chapter}" in source(c) for c in cells)
        solutions = [c for c in cells if "hide-cell" in c.get("metadata", {}).get("tags", [])]
        assert solutions and all("ex.check_" in source(c) for c in solutions)

    def test_has_an_interactive_figure(self, path):
        code = "\n".join(source(c) for c in code_cells(load(path)))
        assert re.search(r"updatemenus|sliders|_explorer\(", code), "needs a figure with sliders or dropdowns"

    def test_widget_cells_are_removed_from_the_static_book(self, path):
        for cell in code_cells(load(path)):
            if re.search(r"\bwidgets\.|\binteract\(", source(cell)):
                tags = cell.get("metadata", {}).get("tags", [])
                assert {"remove-output", "skip-execution"} <= set(tags), source(cell)[:80]
