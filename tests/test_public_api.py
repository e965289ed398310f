"""Pins the public API: adding or removing a top-level name must be a deliberate change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ragjudge

EXPECTED = {
    "__version__",
    "Qrels", "Run",
    "parse_qrels", "read_qrels", "format_qrels", "write_qrels",
    "parse_run", "read_run", "format_run", "write_run",
    "read_queries", "read_corpus", "read_beir",
    "Measure", "parse_measure", "known_measures",
    "evaluate", "compare", "evaluate_lists", "fuse", "Report", "CompareReport",
    "LLM", "Prompt", "load_prompt", "LLMRelevanceJudge", "Judgment", "JudgeResult",
    "evaluate_with_judge", "evaluate_with_judge_sync",
    "evaluate_samples", "evaluate_samples_sync", "RagReport", "Sample", "read_traces", "span_scores",
    "synthesize", "synthesize_sync", "SynthResult",
    "create_nuggets", "create_nuggets_sync", "assign_nuggets", "assign_nuggets_sync", "score_assignments",
    "label_agreement", "ranking_agreement", "AgreementReport",
    "ppi_evaluate", "ppi_mean", "plan_labels", "PPIReport", "soft_evaluate", "judge_panel", "judge_panel_sync",
    "run_retriever", "run_retriever_sync", "RetrievedRun", "RetrievalError",
    "collect_samples", "collect_samples_sync", "log_mlflow", "load_mlflow",
    "RagjudgeError", "InputError", "MetricError", "LLMError",
}

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_pinned() -> None:
    assert set(ragjudge.__all__) == EXPECTED
    assert len(ragjudge.__all__) == len(set(ragjudge.__all__))


def test_every_public_name_resolves() -> None:
    for name in ragjudge.__all__:
        assert getattr(ragjudge, name) is not None, name


def test_unknown_attribute_raises() -> None:
    try:
        ragjudge.no_such_thing  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


@pytest.mark.slow  # subprocess
def test_core_import_does_not_load_openai() -> None:
    # The ranking core must stay cheap to import: the LLM stack loads on first use only.
    code = "import sys, ragjudge; ragjudge.evaluate; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_py_typed_marker_ships() -> None:
    assert (ROOT / "ragjudge" / "py.typed").exists()


@pytest.mark.slow  # subprocess
def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "ragjudge", "--version"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert ragjudge.__version__ in out.stdout
