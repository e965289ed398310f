"""``--plot FILE.png|svg|pdf`` for the commands that make a report (evaluate, compare, rag,
agree): one option pair and one call; the drawing is :mod:`ragjudge.plots`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import plots
from .._lazy import optional
from ..errors import InputError
from ..io import check_output_path

__all__ = ["add_plot_options", "check_plot_path", "write_plot", "draw_panels"]

_SUFFIXES = (".png", ".svg", ".pdf")  # ragjudge.plots.PLOT_FORMATS, without importing numpy/mpl
_MAX_METRICS = 12  # panels per figure for one-panel-per-metric plots


def add_plot_options(p: argparse.ArgumentParser, kinds: Sequence[str], help_kinds: str) -> None:
    """``--plot FILE`` and ``--plot-kind`` (the first of ``kinds`` is the default)."""
    p.add_argument("--plot", metavar="FILE",
                   help="also draw a figure to FILE (.png, .svg or .pdf; needs matplotlib, the "
                        "'plot' extra)")
    p.add_argument("--plot-kind", choices=tuple(kinds), default=None,
                   help=f"what --plot draws: {help_kinds}")


def check_plot_path(args: argparse.Namespace) -> None:
    """Refuse a bad ``--plot`` path before any work."""
    if getattr(args, "plot", None) is None:
        return
    if Path(args.plot).suffix.lower() not in _SUFFIXES:
        raise InputError(f"plot file must end in {', '.join(_SUFFIXES)}", field="--plot")
    check_output_path(args.plot)


def write_plot(args: argparse.Namespace, draw: Callable[[Any], Any]) -> None:
    """Draw with ``draw(plots_module)`` (it returns the Axes) and save it to ``args.plot``."""
    if getattr(args, "plot", None) is None:
        return
    matplotlib = optional("matplotlib", extra="plot", what="--plot")
    matplotlib.use("Agg")  # files only: never open a window from the shell

    ax = draw(plots)
    plots.save_figure(ax, args.plot)
    matplotlib.pyplot.close(ax.figure)
    print(f"ragjudge: wrote {args.plot}", file=sys.stderr)


def draw_panels(plots: Any, draw: Callable[[Any, Any], Any], metrics: Sequence[str], *,
                rows: Sequence[Any] = (None,), row_name: str = "run pairs",
                panel: tuple[float, float] = (6.0, 3.5)) -> Any:
    """Every metric (and every row, e.g. pair of runs) as one figure of small multiples,
    ``draw((row, metric), ax)`` on each panel; beyond what one figure holds, the first ones are
    drawn and one stderr line says what was left out (never a silent first metric)."""
    metrics, rows = list(metrics), list(rows)
    shown_m = metrics[:_MAX_METRICS]
    shown_r = rows[:max(1, plots.MAX_PANELS // len(shown_m))]
    cut = []
    if len(shown_m) < len(metrics):
        cut.append(f"{len(shown_m)} of {len(metrics)} metrics ({shown_m[0]} to {shown_m[-1]})")
    if len(shown_r) < len(rows):
        cut.append(f"{len(shown_r)} of {len(rows)} {row_name}")
    if cut:
        print(f"ragjudge: --plot drew {' and '.join(cut)}: one figure holds {plots.MAX_PANELS} "
              "panels; pass fewer -m metrics or runs to draw the rest", file=sys.stderr)
    if rows == [None]:  # one panel per metric: a roughly square grid
        ncols = 1 if len(shown_m) <= 3 else 2 if len(shown_m) <= 8 else 3
    else:  # one row per pair of runs, one column per metric
        ncols = len(shown_m)
    return plots.plot_panels(draw, [(r, m) for r in shown_r for m in shown_m], ncols=ncols,
                             panel=panel)
