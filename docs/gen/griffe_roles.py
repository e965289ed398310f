"""A griffe extension for the API reference: the docstrings' Sphinx roles (``:func:`x```,
``:class:`~a.b.C```) become code spans, which mkdocstrings renders (it does not read roles)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrite ``:role:`target``` as ```target``` in every docstring griffe loads."""

    def on_object(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(lambda m: f"``{m.group(1)}``", obj.docstring.value)
