"""Every shell and Python block of the guides runs as written, or says why not.

A block in a tutorial, a how-to, a concept page or the getting-started page is one of

* a markdown-exec block (``exec="on"``): the build runs it and shows what it printed;
* a block right after ``<!-- run -->``: the build runs it as written, in the page's working
  folder (``examples/`` linked in, the venv's ``bin`` first on ``PATH``: what a reader who
  activated the venv has), and fails when it fails; ``<!-- run llm -->`` also sets
  ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` to the bundled simulator, as the page "Try the LLM
  features offline" tells a reader to; the Python blocks of a page run in order in one
  process (a later block sees the names of an earlier one);
* a block right after ``<!-- not run: REASON -->``: shown only, for a reason a reader can
  check (it needs a GPU server, a database host, a paid batch...).

Anything else fails the build (``check``) and ``tests/docs/test_docs_blocks.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import shell

ROOT = shell.ROOT
DOCS = ROOT / "docs"
#: The pages whose blocks a reader types: every tutorial, how-to and concept page, and the
#: first steps.
GUIDES = ("getting-started.md", "tutorials", "how-to", "concepts")
SHELL = {"sh", "bash", "console", "shell"}
PYTHON = {"python", "py", "pycon"}

_FENCE = re.compile(r"^(?P<fence>```+)(?P<info>[^\n`]*)$")
_MARK = re.compile(r"^<!--\s*(?P<kind>run|not run)(?P<rest>[^>]*)-->\s*$")


@dataclass
class Block:
    page: str  # relative to docs/
    line: int  # 1-based line of the opening fence
    lang: str
    info: str
    body: str
    kind: str  # "exec" | "run" | "not run" | "" (unmarked) | "other" (not shell or Python)
    note: str  # the reason of "not run", the options of "run" ("llm")


def guide_pages() -> list[Path]:
    out: list[Path] = []
    for name in GUIDES:
        path = DOCS / name
        out.extend(sorted(path.glob("*.md")) if path.is_dir() else [path])
    return out


def blocks(path: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of a page, each with how it is run."""
    path = path.resolve()
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info").strip()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), len(lines))
        lang = info.split()[0] if info else ""
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.match(before.strip())
        if lang not in SHELL | PYTHON and not (lang == "" and mark):
            kind, note = "other", ""
        elif 'exec="on"' in info or "exec='on'" in info:
            kind, note = "exec", ""
        elif mark:
            kind = mark.group("kind")
            note = mark.group("rest").strip().lstrip(":").strip()
        else:
            kind, note = "", ""
        rel = path.relative_to(DOCS).as_posix() if path.is_relative_to(DOCS) else path.name
        out.append(Block(rel, i + 1, lang, info, "\n".join(lines[i + 1:end]), kind, note))
        i = end + 1
    return out


def problems(path: Path, text: str | None = None) -> list[str]:
    """Why a page's blocks do not all run as written (empty when they do)."""
    out = []
    for b in blocks(path, text):
        where = f"docs/{b.page}:{b.line}"
        if b.kind == "":
            out.append(f"{where}: a {b.lang} block that is neither run (<!-- run -->, exec=\"on\") "
                       "nor marked <!-- not run: REASON -->")
        elif b.kind == "not run" and len(b.note) < 10:
            out.append(f"{where}: <!-- not run --> needs a reason a reader can check")
        elif b.kind == "run" and b.lang not in SHELL | PYTHON:
            out.append(f"{where}: <!-- run --> on a block that is neither shell nor Python")
    return out


def _shell_script(body: str) -> str:
    """A console block's commands (``$ `` prompts stripped, output lines dropped)."""
    if not any(line.startswith("$ ") for line in body.splitlines()):
        return body
    keep, more = [], False
    for line in body.splitlines():
        if line.startswith("$ ") or more:
            keep.append(line[2:] if line.startswith("$ ") else line)
            more = line.rstrip().endswith("\\")
    return "\n".join(keep)


def run_page(path: Path) -> list[str]:
    """Run the page's ``<!-- run -->`` blocks in order; what each did (one line each). A block
    that fails raises with its page, line and output."""
    path = path.resolve()
    page = path.relative_to(DOCS).as_posix()
    session = "page-" + re.sub(r"\W+", "-", page.removesuffix(".md"))
    folder = shell.workdir(session)
    done: list[str] = []
    python: list[str] = []
    for b in blocks(path):
        if b.kind != "run":
            continue
        env = shell.env()
        if "llm" in b.note.split():
            env.update(OPENAI_BASE_URL=shell.simulator(8765), OPENAI_API_KEY="sk-simulator")
        if b.lang in PYTHON:
            python.append(f"# docs/{page}:{b.line}\n{b.body}\n")
            cmd = [sys.executable, "-c", "\n".join(python)]
        else:
            cmd = ["bash", "-e", "-o", "pipefail", "-c", _shell_script(b.body)]
        proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"docs/{page}:{b.line}: the {b.lang} block failed "
                               f"({proc.returncode}):\n{b.body}\n--- stderr:\n{proc.stderr[-3000:]}")
        done.append(f"docs/{page}:{b.line}: ok")
    return done
