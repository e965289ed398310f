"""The documented GitHub Actions workflow (examples/ci/github-actions.yml): its commands run as
written (the install and the actions are GitHub's), the job summary gets the comparison table and
the JUnit report holds one test case per gate."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"


@pytest.mark.slow  # subprocesses
def test_workflow_commands_run_as_written(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["evaluate"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    assert runs[0].startswith("python -m venv .venv")  # the install: GitHub's machine, not ours
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "ragjudge").symlink_to(Path(sys.executable).parent / "ragjudge")
    summary = tmp_path / "summary.md"
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary)}
    for command in runs[1:]:
        proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, (command, proc.stderr)
    table = summary.read_text()
    assert table.startswith("| run | metric | mean |") and "bm25_stemmed" in table
    junitparser = pytest.importorskip("junitparser")
    (suite,) = list(junitparser.JUnitXml.fromfile(str(tmp_path / "ragjudge-junit.xml")))
    names = [case.name for case in suite]
    assert suite.failures == 0 and len(names) == 4  # 2 floors (one per run) + 2 not-worse checks
    assert "run bm25_stemmed: ndcg@10 >= 0.5" in names
    assert shlex.split(runs[1])[1] == "compare"
