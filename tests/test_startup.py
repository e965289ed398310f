"""What start-up loads: a bare ``import ragjudge`` and ``ragjudge --help`` load no numpy, no
LLM stack and no wing; ``ragjudge evaluate`` loads the ranking core and nothing of the LLM
stack, nor a thread pool for a small file. (Times are measured by benchmarks/bench_startup.py,
never asserted here.)"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "openai", "httpx", "pydantic", "scipy", "pandas", "matplotlib", "tenacity", "bm25s")
WINGS = ("ragjudge.data", "ragjudge.evaluate", "ragjudge.llm.session", "ragjudge.llm.client",
         "ragjudge.judges.relevance", "ragjudge.rag.evaluate", "ragjudge.trust", "ragjudge.synth.generate",
         "ragjudge.server", "ragjudge.retrieve", "ragjudge.integrations.retrievers")


def _loaded(code: str) -> set[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _found(mods: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in mods or any(m.startswith(n + ".") for m in mods))


def test_a_bare_import_loads_nothing_heavy() -> None:
    mods = _loaded("import ragjudge")
    assert _found(mods, HEAVY) == []
    assert _found(mods, WINGS) == []


def test_help_loads_nothing_heavy() -> None:
    mods = _loaded("from ragjudge.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    assert _found(mods, HEAVY) == []
    assert _found(mods, WINGS) == []


def test_evaluate_loads_the_core_and_no_llm_stack() -> None:
    mods = _loaded("import contextlib, io\nfrom ragjudge.cli import main\n"
                   "with contextlib.redirect_stdout(io.StringIO()):\n"
                   "    assert main(['evaluate', 'examples/qrels.txt', 'examples/runs/bm25_raw.run', '-m', 'ndcg@10']) == 0")
    assert "numpy" in mods and "ragjudge.evaluate" in mods
    assert _found(mods, ("openai", "httpx", "pydantic", "tenacity", "ragjudge.llm.session",
                         "ragjudge.llm.client", "ragjudge.llm.endpoint", "ragjudge.llm.providers",
                         "ragjudge.trust", "ragjudge.rag")) == []
    # A one-block file is scanned on this thread: no pool, whatever the number of cores. HTML
    # escaping and long-id digests load their modules when first used.
    assert _found(mods, ("concurrent.futures", "html", "hashlib")) == []


def test_names_that_are_also_modules_stay_the_functions() -> None:
    import ragjudge
    import ragjudge.evaluate  # noqa: F401 -- importing the module must not hide the function
    import ragjudge.fuse  # noqa: F401
    from ragjudge import evaluate, fuse

    assert callable(ragjudge.evaluate) and ragjudge.evaluate is evaluate
    assert callable(ragjudge.fuse) and ragjudge.fuse is fuse
    assert evaluate.__module__ == "ragjudge.evaluate"


def test_every_top_level_name_resolves() -> None:
    import ragjudge

    for name in ragjudge.__all__:
        assert getattr(ragjudge, name) is not None, name
        assert name in dir(ragjudge)


@pytest.mark.parametrize("package", ["ragjudge.llm", "ragjudge.judges", "ragjudge.rag", "ragjudge.synth"])
def test_lazy_packages_resolve_every_name(package: str) -> None:
    mod = import_module(package)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{package}.{name}"


def test_the_command_table_is_what_the_modules_register() -> None:
    from ragjudge import cli

    for module_name in cli._SUBCOMMANDS:  # noqa: SLF001 -- the table under test
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        import_module(f"ragjudge.cli.{module_name}").register(sub)
        for name, action in sub.choices.items():
            assert cli._COMMANDS[name][0] == module_name, name  # noqa: SLF001
        helps = {a.dest: a.help for a in sub._choices_actions}  # noqa: SLF001
        for name, text in helps.items():
            assert cli._COMMANDS[name][1] == text, name  # noqa: SLF001
    registered = set(cli.build_parser().parse_args(["evaluate", "q", "r"]).subparsers)
    assert registered == set(cli._COMMANDS)  # noqa: SLF001
