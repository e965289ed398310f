"""The API reference pages, made from the packages' ``__all__`` at build time: every public
name gets an entry (``::: module.Name``, rendered by mkdocstrings from its docstring) on the
page of the first package that exports it; later packages link to it. Also used by
``tests/test_docs_site.py`` to check that every public name has an entry and a docstring."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

#: The reference pages, in order: (page, package). A name is documented on the first page
#: whose package exports it.
PAGES: list[tuple[str, str]] = [
    ("ragjudge", "ragjudge"),
    ("io", "ragjudge.io"),
    ("evaluation", "ragjudge.evaluate"),
    ("data", "ragjudge.data"),
    ("measures", "ragjudge.measures"),
    ("fuse", "ragjudge.fuse"),
    ("stats", "ragjudge.stats"),
    ("report", "ragjudge.report"),
    ("render", "ragjudge.render"),
    ("plots", "ragjudge.plots"),
    ("llm", "ragjudge.llm"),
    ("providers", "ragjudge.llm.providers"),
    ("judges", "ragjudge.judges"),
    ("rag", "ragjudge.rag"),
    ("trust", "ragjudge.trust"),
    ("synth", "ragjudge.synth"),
    ("nuggets", "ragjudge.nuggets"),
    ("retrieve", "ragjudge.retrieve"),
    ("integrations", "ragjudge.integrations"),
    ("ray", "ragjudge.ray"),
    ("testing", "ragjudge.testing"),
    ("options", "ragjudge.options"),
    ("errors", "ragjudge.errors"),
    ("server", "ragjudge.server"),
]

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):`~?([^`]+)`")
_ASSIGNED = re.compile(r"^(?:{name})\s*(?::[^=\n]*)?=", re.M)


def defining_path(package: str, name: str) -> str:
    """The dotted path of the module-level definition of ``package.name``."""
    obj = getattr(importlib.import_module(package), name)
    module = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None)
    if (inspect.isclass(obj) or inspect.isfunction(obj)) and module and module.startswith("ragjudge") \
            and qual and "<" not in qual:
        return f"{module}.{qual}"
    # a constant: the module that assigns it at top level
    pattern = re.compile(_ASSIGNED.pattern.format(name=re.escape(name)), re.M)
    for mod_name, mod in sorted(sys.modules.items()):
        if not mod_name.startswith("ragjudge") or getattr(mod, name, object()) is not obj:
            continue
        src = getattr(mod, "__file__", None)
        if src and pattern.search(Path(src).read_text(encoding="utf-8")):
            return f"{mod_name}.{name}"
    raise LookupError(f"cannot find where {package}.{name} is defined")


def entries() -> dict[str, list[tuple[str, str, str | None]]]:
    """``{page: [(name, dotted path, page it is documented on if elsewhere)]}``."""
    seen: dict[str, str] = {}
    out: dict[str, list[tuple[str, str, str | None]]] = {}
    for page, package in PAGES:
        mod = importlib.import_module(package)
        rows = []
        for name in mod.__all__:
            path = defining_path(package, name)
            rows.append((name, path, seen.get(path)))
            seen.setdefault(path, page)
        out[page] = rows
    return out


def page_text(page: str, package: str, rows: list[tuple[str, str, str | None]]) -> str:
    """The Markdown of one reference page."""
    mod = importlib.import_module(package)
    doc = _ROLE.sub(lambda m: f"`{m.group(1)}`", inspect.getdoc(mod) or "")
    lines = [f"# `{package}`", "", doc.split("\n\n")[0], ""]
    again = [(n, p, other) for n, p, other in rows if other is not None]
    for name, path, other in rows:
        if other is None:
            lines += [f"::: {path}", "    options:", "      heading_level: 2",
                      "      show_root_full_path: false", ""]
    if again:
        lines += ["## Also exported here", ""]
        lines += [f"- [`{n}`]({o}.md#{p})" for n, p, o in again]
        lines.append("")
    return "\n".join(lines)
