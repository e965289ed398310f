"""The local web page for results, judgments and human labels (``ragjudge ui``, and ``/ui/`` of
``ragjudge serve --ui-file FILE``).

:mod:`.workspace` reads the files the operator gave and answers in JSON (no web framework);
:mod:`.routes` is the FastAPI router: ``/ui/api/...`` behind the service's token and limits,
and the hand-written page (``static/``: index.html, app.js, app.css; no build step, nothing
fetched from elsewhere).
"""

from __future__ import annotations

__all__ = ["PAGE_PATHS"]

#: The page's static assets: no data in them, so a browser may load them without the token
#: (the page then sends the token with every API request).
PAGE_PATHS = frozenset({"/ui", "/ui/", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg", "/favicon.ico"})
