"""CLI consistency: help for every option, compare's help, install hints,
writers that create their folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from ragjudge.cli import build_parser, main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _walk(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, f"{path} {name}")
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield path, action


def test_every_option_of_every_command_has_help() -> None:
    missing = [f"{path}: {'/'.join(a.option_strings) or a.dest}"
               for path, a in _walk(build_parser(), "ragjudge")
               if a.help != argparse.SUPPRESS and not (a.help or "").strip()]
    assert not missing, "options without help text: " + "; ".join(missing)


def test_every_command_has_help_and_its_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    listed = {a.dest: a.help for a in sub._choices_actions}
    for name in sub.choices:
        assert (listed.get(name) or "").strip(), f"command {name} has no help line"
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0
        assert f"usage: ragjudge {name}" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["judge", "rag", "synth", "evaluate", "serve"])
def test_provider_flag_lists_and_checks_the_registered_providers(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.llm.providers import provider_names, provider_spec

    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    # the providers an address reaches; those calling a Python object are the library's (LLM(obj))
    urls = [n for n in provider_names() if "object" not in provider_spec(n).features]
    assert "openai" in urls and "langchain" not in urls
    assert all(name in text.rsplit("--provider NAME", 1)[1][:400] for name in urls)
    args = ["q", "r"] if command == "evaluate" else []
    with pytest.raises(SystemExit) as exc:
        main([command, *args, "--provider", "no-such-api"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--provider: invalid choice: 'no-such-api'" in err and "openai" in err


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def test_compare_lists_only_what_compare_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    cmds = _commands()
    compare, evaluate = _options(cmds["compare"]), _options(cmds["evaluate"])
    # compare is evaluate's statistics part: nothing of its own, and none of evaluate's
    # one-run or means-only options (--no-stats; the judging options of evaluate --judge).
    assert compare <= evaluate
    for evaluate_only in ("--no-stats", "--judge", "--judge-depth", "--ppi", "--human"):
        assert evaluate_only not in compare
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = capsys.readouterr().out
    assert "--no-stats" not in text and "--all-pairs" in text and "--fail-if-worse" in text
    # An evaluate-only option given to compare is a usage error of compare.
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(EXAMPLES / "qrels.txt"), "a.run", "b.run", "--no-stats"])
    assert exc.value.code == 2
    assert "ragjudge compare: error: unrecognized arguments: --no-stats" in capsys.readouterr().err


def test_every_compare_option_changes_something(capsys: pytest.CaptureFixture[str]) -> None:
    """Each value option compare shows is read: a different value gives a different output."""
    runs = sorted(str(p) for p in (EXAMPLES / "runs").glob("*.run"))
    base = ["compare", str(EXAMPLES / "qrels.txt"), *runs, "-m", "map", "--resamples", "200",
            "-f", "csv"]

    def out(*extra: str) -> str:
        assert main([*base, *extra]) == 0
        return capsys.readouterr().out

    plain = out()
    for extra in (["--baseline", "term_overlap"], ["--test", "t"], ["--seed", "3"],
                  ["--resamples", "300"], ["--alpha", "1e-9"], ["--all-pairs"], ["--rel", "2"],
                  ["-J"], ["-M", "5"], ["-q"], ["-f", "json"], ["--digits", "2", "-f", "table"]):
        assert out(*extra) != plain, extra


# ----------------------------------------------------------------------------- library edges
def test_to_dataframe_without_pandas_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragjudge.errors import InputError

    from ragjudge.data import Qrels, Run
    from ragjudge.evaluate import compare

    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    run = Run.from_dict({"q1": {"d1": 1.0}})
    qrels = Qrels.from_dict({"q1": {"d1": 1}})
    report = compare(qrels, {"a": run, "b": run}, "map", n_resamples=10)
    for obj in (run, qrels, report):
        # one InputError line, whichever value is asked (they used to differ in type and words)
        with pytest.raises(InputError, match=r"^to_dataframe\(\) needs pandas: pip install -e '\.\[pandas\]' in the ragjudge checkout$"):
            obj.to_dataframe()


def test_write_run_and_qrels_create_missing_folders(tmp_path: Path) -> None:
    from ragjudge.data import Qrels, Run
    from ragjudge.io import read_qrels, read_run, write_qrels, write_run

    run = Run.from_dict({"q1": {"d1": 2.0, "d2": 1.0}}, name="r")
    qrels = Qrels.from_dict({"q1": {"d1": 1}})
    write_run(run, tmp_path / "out" / "deeper" / "r.trec")
    write_qrels(qrels, str(tmp_path / "q" / "qrels.tsv.gz"))
    assert read_run(tmp_path / "out" / "deeper" / "r.trec").to_dict() == run.to_dict()
    assert read_qrels(tmp_path / "q" / "qrels.tsv.gz").to_dict() == qrels.to_dict()
    (tmp_path / "file").write_text("x")
    from ragjudge.errors import InputError

    with pytest.raises(InputError, match="cannot write file"):  # a file where a folder should be
        write_run(run, tmp_path / "file" / "r.trec")
