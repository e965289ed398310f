"""Loading on first use: names a package loads when first asked for (PEP 562), and the heavy
optional libraries, imported by :func:`optional` in the one module that uses each.

The rule (docs/development.md): a heavy or optional third-party library is imported in one
module of ragjudge only, through :func:`optional` when it is an extra, at the point of first
use; ragjudge's own modules are imported at the top of a module, a function-level import being
kept for a module that would load such a library (or the LLM stack) on a path that does not
need it. ``tests/test_startup.py`` pins what a start loads and ``tests/test_architecture.py``
where each heavy library may be imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from types import ModuleType
from typing import Any

from .errors import InputError

__all__ = ["lazy_exports", "optional"]


def optional(module: str, *, extra: str, what: str) -> ModuleType:
    """``module`` imported, or one :class:`~ragjudge.errors.InputError` line naming what needs
    it and the extra to install from the checkout (``ragjudge`` on the package index is an
    unrelated project, so the advice is never ``pip install ragjudge[...]``)."""
    if module.split(".")[0] == "ragjudge":  # ours are imported by name, where the layer check sees them
        raise ValueError(f"optional() is for third-party libraries, not {module}")
    try:
        return import_module(module)
    except ImportError:
        raise InputError(f"{what} needs {module.split('.')[0]}: pip install -e '.[{extra}]' in the "
                         "ragjudge checkout") from None


def lazy_exports(namespace: dict[str, Any], names: Mapping[str, str],
                 load: Callable[[str], ModuleType]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose ``names`` (``{name: submodule}``)
    load on first access. ``namespace`` is the package's ``globals()`` (a loaded name is kept
    there, so the next access is a plain lookup); ``load(submodule)`` imports one of the
    package's own modules (``lambda m: import_module(f".{m}", __name__)``), so the import stays
    the package's own and the layer check sees it."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(load(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
