"""Names a package loads on first use (PEP 562), so importing it costs next to nothing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["lazy_exports"]


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
