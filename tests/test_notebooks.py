"""Every example notebook runs, offline and without an API key, in a real Jupyter kernel.

The notebooks are committed with their outputs (see examples/run_notebooks.py); this executes a
copy of each with nbclient (the ``python3`` kernel of this interpreter) and fails on any error.
LLM answers come from the caches in examples/cache/: the environment here has no OpenAI key and
a base URL that refuses connections, so a notebook that tried the network would fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"
NOTEBOOKS = sorted(EX.glob("*.ipynb"))


def test_the_four_notebooks_exist() -> None:
    names = {p.stem for p in NOTEBOOKS}
    assert {"quickstart", "rag", "label_free", "synthetic"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_with_outputs(path: Path) -> None:
    nb = json.loads(path.read_text("utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c.get("execution_count") for c in code), "run examples/run_notebooks.py"
    assert not [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


def _here(module: str) -> bool:
    """``module`` is part of the ragjudge this test imports (not of another installed copy)."""
    import ragjudge

    spec = importlib.util.find_spec(module)
    home = Path(ragjudge.__file__).resolve().parent
    return spec is not None and spec.origin is not None and home in Path(spec.origin).resolve().parents


@pytest.mark.slow  # executes a notebook in a kernel
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_offline(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel inherits this environment: no key, an endpoint that refuses connections.
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the inline backend, as in Jupyter
    for var in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    # The kernel imports this checkout's ragjudge, installed or not.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    # A notebook about a part of ragjudge that lives on a branch not merged yet names it here.
    absent = [m for m in nb.metadata.get("ragjudge", {}).get("requires", []) if not _here(m)]
    if absent:
        pytest.skip(f"{path.name} needs {', '.join(absent)}, not in this checkout")
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(EX)}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]


def test_committed_outputs_are_what_the_code_prints_today() -> None:
    # a comparison table in a committed output has today's columns (effect size, wins/ties/losses)
    from ragjudge.evaluate import compare

    headers = compare({"q": {"d": 1}}, {"a": {"q": {"d": 1.0}}, "b": {"q": {"d": 2.0}}},
                      ["P_1"]).table().headers
    text = json.dumps(json.loads((EX / "quickstart.ipynb").read_text("utf-8"))["cells"])
    assert "CompareReport" in text and all(h in text for h in headers)


def test_the_synthetic_notebook_needs_no_other_retrieval_toolkit() -> None:
    nb = json.loads((EX / "synthetic.ipynb").read_text("utf-8"))
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "retrieve_bm25" in code and "make_dataset" not in code and "rank_bm25" not in code


def test_the_notebooks_page_names_what_they_need() -> None:
    page = (ROOT / "docs" / "how-to" / "plots.md").read_text("utf-8")
    assert "pip install -e '.[plot,pandas]' ipykernel" in page


def test_ci_regenerates_the_notebooks_before_building_the_site() -> None:
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    assert ci.index("examples/run_notebooks.py") < ci.index("mkdocs build")


def _runner():  # type: ignore[no-untyped-def]
    """examples/run_notebooks.py as a module."""
    spec = importlib.util.spec_from_file_location("run_notebooks", EX / "run_notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_runner_gives_the_kernel_a_home_of_its_own(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # as the docs build does: matplotlib's, IPython's and the XDG caches land in a temporary home
    runner = _runner()
    monkeypatch.setenv("RAGJUDGE_KEPT", "yes")
    env = runner.kernel_env(tmp_path)
    assert env["HOME"] == str(tmp_path) and env["RAGJUDGE_KEPT"] == "yes"
    for var in ("MPLCONFIGDIR", "IPYTHONDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        assert Path(env[var]).is_relative_to(tmp_path), var
    seen: dict[str, object] = {}

    class Client:
        def __init__(self, nb, **kwargs):  # type: ignore[no-untyped-def]
            pass

        def execute(self, **kwargs):  # type: ignore[no-untyped-def]
            # the kernel's environment, and this process's while it finds the kernel
            seen["kernel"] = kwargs["env"]
            seen["here"] = {v: os.environ.get(v) for v in ("HOME", "IPYTHONDIR")}

    monkeypatch.setattr(runner, "NotebookClient", Client)
    home = os.environ.get("HOME")
    runner.execute(NOTEBOOKS[0])
    kernel = seen["kernel"]
    assert isinstance(kernel, dict) and Path(kernel["HOME"]).name.startswith("ragjudge-notebook-home-")
    assert seen["here"] == {"HOME": kernel["HOME"], "IPYTHONDIR": kernel["IPYTHONDIR"]}
    assert os.environ.get("HOME") == home and not Path(kernel["HOME"]).exists()  # put back, removed


@pytest.mark.slow  # starts a kernel
def test_running_a_notebook_writes_nothing_in_the_home_folder(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("MPLCONFIGDIR", "IPYTHONDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nprint('ok')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    done = _runner().execute(path)
    assert any("ok" in o.get("text", "") for o in done.cells[0].outputs)
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == []
