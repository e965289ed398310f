"""One progress display for every long LLM job (``judge``, ``rag``), right for where it runs.

* a terminal: a tqdm bar on stderr, redrawn in place;
* output redirected (a CI log, ``2> log``): a few plain lines -- every 10% and the end --
  instead of kilobytes of bar frames;
* a notebook: one widget bar when ipywidgets is installed, else tqdm's text bar (never the
  ``IProgress not found`` warning ``tqdm.auto`` prints without ipywidgets).
"""

from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["Progress"]

#: Plain-line mode prints at these fractions of the total (and at the end).
STEPS = 10


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()  # type: ignore[attr-defined]
    except Exception:
        return False
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


def _has_widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


class Progress:
    """``update(n, status=...)`` after each item, ``close()`` at the end; a no-op when
    disabled or empty. ``status`` is a short text shown beside the count (failures, cost)."""

    def __init__(self, total: int, desc: str, *, unit: str = "call", enabled: bool = True,
                 stream: IO[str] | None = None, leave: bool = True) -> None:
        self.total = total
        self.desc = desc
        self.unit = unit
        self.done = 0
        self.status = ""
        self._bar: Any = None
        self._lines = False
        self._next_line = 0
        self._stream = stream if stream is not None else sys.stderr
        if not enabled or not total:
            return
        if _in_notebook():
            if _has_widgets():
                from tqdm.notebook import tqdm as bar_cls
            else:
                from tqdm.std import tqdm as bar_cls
            self._bar = bar_cls(total=total, desc=desc, unit=unit, leave=leave)
        elif getattr(self._stream, "isatty", lambda: False)():
            from tqdm.std import tqdm as bar_cls

            self._bar = bar_cls(total=total, desc=desc, unit=unit, dynamic_ncols=True,
                                leave=leave, file=self._stream)
        else:
            self._lines = True

    def update(self, n: int = 1, *, status: str | None = None) -> None:
        self.done += n
        if status is not None:
            self.status = status
        if self._bar is not None:
            if status is not None:
                self._bar.set_postfix_str(status, refresh=False)
            self._bar.update(n)
        elif self._lines:
            step = self.done * STEPS // self.total
            if step >= self._next_line and self.done < self.total:
                self._next_line = step + 1
                self._line()

    def _line(self) -> None:
        pct = 100 * self.done // self.total
        extra = f" ({self.status})" if self.status else ""
        units = self.unit[:-1] + "ies" if self.unit.endswith("y") else self.unit + "s"  # queries
        print(f"{self.desc}: {self.done}/{self.total} {units}, {pct}%{extra}",
              file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._lines:
            self._lines = False
            if self.done:
                self._line()
