"""The GitHub Actions workflows: valid (linted against GitHub's schema) and doing what the README says."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .test_book import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
README = (ROOT / "README.md").read_text()


def load(name: str) -> dict:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as True
    return workflow


def steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def uses(workflow: dict) -> list[str]:
    return [step["uses"].split("@")[0] for step in steps(workflow) if "uses" in step]


def runs(workflow: dict) -> str:
    return "\n".join(step.get("run", "") for step in steps(workflow))


@pytest.mark.slow
def test_workflows_lint_clean():
    linter = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which("check-jsonschema")
    if linter is None:
        pytest.skip("check-jsonschema is not installed (pip install -r requirements.txt)")
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"test.yml", "deploy.yml"}
    done = subprocess.run([linter, "--builtin-schema", "vendor.github-workflows", *map(str, files)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_tests_run_on_pushes_and_pull_requests_with_the_readme_commands():
    workflow = load("test.yml")
    assert {"push", "pull_request"} <= set(workflow["on"])
    quick_start = re.search(r"## Quick start.*?```bash\n(.*?)```", README, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in quick_start.splitlines() if line.split("#")[0].strip()]
    assert commands and all(c in runs(workflow) for c in commands), f"run the README's {commands}"
    assert "scripts/install-browser.sh" in runs(workflow), "the browser test needs Chromium"
    assert "actions/cache" in uses(workflow) or "actions/setup-python" in uses(workflow), "cache pip"


def test_deploy_builds_from_main_keeps_the_execution_cache_and_publishes_to_pages():
    workflow = load("deploy.yml")
    assert workflow["on"]["push"]["branches"] == ["main"]
    assert {"pages": "write", "id-token": "write"}.items() <= workflow["permissions"].items()
    cached = [path for s in steps(workflow) if s.get("uses", "").startswith("actions/cache")
              for path in s["with"]["path"].split()]
    assert "_build/.jupyter_cache" in cached
    # a cached notebook is not re-executed, so it does not export its live panel's model again
    assert "_build/browser_models" in cached, "the live panels' models must be cached with the notebooks"
    assert "bash scripts/setup.sh" in runs(workflow), "build the book as the README does"
    upload = [s for s in steps(workflow) if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert upload and upload[0]["with"]["path"] == "_build/html"
    assert "actions/deploy-pages" in uses(workflow)
    assert workflow["concurrency"]["cancel-in-progress"] is False, "never cancel a deployment half-way"
