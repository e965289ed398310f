"""``--plot FILE.png|svg|pdf`` for the commands that make a report (evaluate, compare, rag,
agree): one option pair and one call; the drawing is :mod:`ragjudge.plots`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import check_output_path

__all__ = ["add_plot_options", "check_plot_path", "write_plot"]

_SUFFIXES = (".png", ".svg", ".pdf")  # ragjudge.plots.PLOT_FORMATS, without importing numpy/mpl


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
    try:
        import matplotlib
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install -e '.[plot]' (from the ragjudge "
                         "checkout)", field="--plot") from None
    matplotlib.use("Agg")  # files only: never open a window from the shell
    from .. import plots

    ax = draw(plots)
    plots.save_figure(ax, args.plot)
    matplotlib.pyplot.close(ax.figure)
    print(f"ragjudge: wrote {args.plot}", file=sys.stderr)
