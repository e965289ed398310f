"""Renderers: a table (``headers`` + ``rows``) as text, JSON, CSV, Markdown, LaTeX or HTML, and
trec_eval's ``measure<TAB>qid<TAB>value`` lines.

Every report in ragjudge (ranking, comparison, RAG, agreement, PPI, judge, synth) renders
through :func:`render_table`, so a table looks the same everywhere. This module knows nothing
of reports: it takes cells (strings, numbers, ``None``) and returns text.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import InputError
from ._lazy import optional

__all__ = [
    "ResultSurface",
    "Table",
    "FORMATS",
    "TREC_FORMAT",
    "format_value",
    "format_p",
    "plain",
    "dumps",
    "latex_escape",
    "html_note",
    "render_table",
    "render_trec",
]

#: Formats :func:`render_table` understands.
FORMATS: tuple[str, ...] = ("table", "json", "csv", "markdown", "latex", "html")
#: The extra format a ranking report supports (trec_eval's own output).
TREC_FORMAT = "trec"

_MISSING = "-"


# ----------------------------------------------------------------------------- cells
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) or _is_np_number(value)


def _is_np_number(value: Any) -> bool:
    # numpy scalars without importing numpy here at module level for every renderer call.
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return kind in ("i", "u", "f") and getattr(value, "ndim", 1) == 0


def plain(value: Any) -> Any:
    """JSON-safe Python value: numpy scalars -> Python numbers, non-finite floats -> None."""
    if _is_np_number(value):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        # Never emit NaN/Infinity: they are not JSON and ragjudge reports failures as data.
        return None
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """``value`` (already :func:`plain`) as JSON text, never NaN. Indented output goes through
    orjson, made for large documents, when it is installed (per-query values of 100,000
    queries: a 20 MB document in a fraction of a second, where the standard library's indenting
    encoder, written in Python, takes seconds); otherwise, or for a value orjson refuses (an
    integer beyond 64 bits), through the standard library."""
    if indent == 2:
        try:
            import orjson
        except ImportError:
            orjson = None
        if orjson is not None:
            try:
                return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
                                    ).decode("utf-8")
            except TypeError:  # orjson.JSONEncodeError is a TypeError
                pass
    return json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False)


def format_value(value: Any, digits: int = 4) -> str:
    """One cell as text: floats with ``digits`` decimals, integers as is, ``None`` as ``-``."""
    if value is None:
        return _MISSING
    if _is_np_number(value):
        value = value.item()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return _MISSING
        return f"{value:.{digits}f}"
    return str(value)


def format_p(value: Any, digits: int = 4) -> str:
    """A p-value as text with ``digits`` decimals; one that would round to zero is
    ``< 0.0001`` (for 4 digits), never ``0.0000``; ``None`` (no test) is ``-``."""
    if value is None:
        return _MISSING
    if _is_np_number(value):
        value = value.item()
    value = float(value)
    if not math.isfinite(value):
        return _MISSING
    if value < 0.5 * 10.0 ** -digits:
        return f"< {10.0 ** -digits:.{digits}f}"
    return f"{value:.{digits}f}"


def _numeric_columns(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[bool]:
    """A column is numeric (right-aligned) when every non-empty cell is a number."""
    out = []
    for j in range(len(headers)):
        cells = [r[j] for r in rows if j < len(r) and r[j] is not None]
        out.append(bool(cells) and all(_is_number(c) for c in cells))
    return out


def _check_shape(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    for i, r in enumerate(rows):
        if len(r) != len(headers):
            raise ValueError(f"row {i} has {len(r)} cells, expected {len(headers)}")


# ----------------------------------------------------------------------------- renderers
_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (for table cells)."""
    return "".join(_LATEX_SPECIALS.get(c, c) for c in text)


def _render_text(headers: Sequence[str], cells: list[list[str]], numeric: list[bool]) -> str:
    widths = [len(h) for h in headers]
    for r in cells:
        for j, c in enumerate(r):
            widths[j] = max(widths[j], len(c))

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(widths[j]) if numeric[j] else v.ljust(widths[j]) for j, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells)
    return "\n".join(out) + "\n"


def _render_markdown(headers: Sequence[str], cells: list[list[str]], numeric: list[bool]) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in headers) + " |"]
    out.append("|" + "|".join("---:" if n else ":---" for n in numeric) + "|")
    out.extend("| " + " | ".join(esc(c) for c in r) + " |" for r in cells)
    return "\n".join(out) + "\n"


def _render_latex(headers: Sequence[str], cells: list[list[str]], numeric: list[bool]) -> str:
    # booktabs layout: what papers use; needs \usepackage{booktabs}.
    spec = "".join("r" if n else "l" for n in numeric)
    out = [f"\\begin{{tabular}}{{{spec}}}", "\\toprule"]
    out.append(" & ".join(latex_escape(h) for h in headers) + " \\\\")
    out.append("\\midrule")
    out.extend(" & ".join(latex_escape(c) for c in r) + " \\\\" for r in cells)
    out += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(out) + "\n"


def html_note(text: str) -> str:
    """``text`` as an HTML small-print paragraph (escaped, quotes included): a report's footer
    or note under its tables."""
    return f"<p><small>{_html_escape()(text)}</small></p>"


def _html_escape() -> Callable[[str], str]:
    """``html.escape``, quotes included."""
    # deferred: most runs render no HTML, and an evaluation's start-up loads no html module
    # (tests/test_startup.py)
    from html import escape

    return escape


def _render_html(
    headers: Sequence[str], cells: list[list[str]], numeric: list[bool], title: str | None
) -> str:
    escape = _html_escape()  # once per table, not per cell

    def td(tag: str, text: str, j: int) -> str:
        style = ' style="text-align:right"' if numeric[j] else ' style="text-align:left"'
        return f"<{tag}{style}>{escape(text)}</{tag}>"

    out = ['<table class="ragjudge">']
    if title:
        out.append(f"<caption>{escape(title)}</caption>")
    out.append("<thead><tr>" + "".join(td("th", h, j) for j, h in enumerate(headers)) + "</tr></thead>")
    out.append("<tbody>")
    out.extend("<tr>" + "".join(td("td", c, j) for j, c in enumerate(r)) + "</tr>" for r in cells)
    out.append("</tbody></table>")
    return "\n".join(out) + "\n"


def _render_csv(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    minimal = csv.writer(buf, lineterminator="\n")
    # QUOTE_MINIMAL does not quote a lone "\r" when the line terminator is "\n"; such rows are
    # written fully quoted so every reader splits them correctly.
    quoted = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def write(cells: list[Any]) -> None:
        w = quoted if any(isinstance(c, str) and "\r" in c for c in cells) else minimal
        w.writerow(cells)

    write(list(headers))
    for r in rows:
        # Full precision (repr) for machines; empty cell for a missing value.
        write(["" if (v := plain(c)) is None else v for c in r])
    return buf.getvalue()


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    fmt: str = "table",
    *,
    digits: int = 4,
    title: str | None = None,
    p_values: Sequence[str] = (),
) -> str:
    """Render a table in ``fmt`` (one of :data:`FORMATS`); the result ends with a newline.

    Cells may be strings, numbers or ``None`` (shown as ``-``, ``null`` in JSON, empty in CSV).
    Human formats (table, markdown, latex, html) round floats to ``digits`` decimals and
    right-align numeric columns; json and csv keep full precision. ``json`` is a list of
    ``{header: value}`` objects. ``title`` becomes the HTML caption / a first line of the text
    table; the machine formats ignore it. The columns named in ``p_values`` hold p-values:
    human formats show one too small for ``digits`` as ``< 0.0001`` (:func:`format_p`).
    """
    headers = [str(h) for h in headers]
    _check_shape(headers, rows)
    if fmt == "json":
        data = [{h: plain(c) for h, c in zip(headers, r)} for r in rows]
        return dumps(data) + "\n"
    if fmt == "csv":
        return _render_csv(headers, rows)
    numeric = _numeric_columns(headers, rows)
    is_p = [h in p_values for h in headers]
    cells = [[format_p(c, digits) if p and fmt != "latex" else format_value(c, digits)
              for c, p in zip(r, is_p)] for r in rows]
    if fmt == "table":
        text = _render_text(headers, cells, numeric)
        return f"{title}\n{text}" if title else text
    if fmt == "markdown":
        return _render_markdown(headers, cells, numeric)
    if fmt == "latex":
        return _render_latex(headers, cells, numeric)
    if fmt == "html":
        return _render_html(headers, cells, numeric, title)
    raise InputError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}", field="format")


def render_trec(
    mean: Mapping[str, Any],
    per_query: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    runid: str | None = None,
    num_q: int | None = None,
    integer: Sequence[str] = (),
) -> str:
    """trec_eval's output: ``measure<TAB>qid<TAB>value`` with the measure padded to 22 columns.

    Per-query lines (when ``per_query`` is given) come first, grouped by query in the given
    order, then the ``all`` lines with the means, led by ``runid`` and ``num_q`` like trec_eval.
    Floats print as ``%.4f``, integers (and the metrics named in ``integer``, e.g. counts) as
    integers, a missing value as ``-``.
    """
    as_int = set(integer)

    def cell(v: Any, name: str = "") -> str:
        if _is_np_number(v):
            v = v.item()
        if isinstance(v, float) and name in as_int and math.isfinite(v) and v == int(v):
            return str(int(v))
        if isinstance(v, float):
            return f"{v:.4f}" if math.isfinite(v) else _MISSING
        return _MISSING if v is None else str(v)

    lines: list[str] = []
    if per_query:
        for qid, values in per_query.items():
            for name, v in values.items():
                lines.append(f"{name:<22}\t{qid}\t{cell(v, name)}")
    if runid is not None and "runid" not in mean:
        lines.append(f"{'runid':<22}\tall\t{runid}")
    if num_q is not None and "num_q" not in mean:
        lines.append(f"{'num_q':<22}\tall\t{num_q}")
    for name, v in mean.items():
        lines.append(f"{name:<22}\tall\t{cell(v, name)}")
    return "\n".join(lines) + "\n" if lines else ""


# ----------------------------------------------------------------------------- helpers


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``{"a": {"b": 1}, "c": [1, 2]}`` -> ``[("a.b", 1), ("c", "[1, 2]")]``: scalars kept,
    lists of scalars shown whole, lists of objects numbered."""
    if isinstance(value, Mapping):
        out: list[tuple[str, Any]] = []
        for k, v in value.items():
            out.extend(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, (list, tuple)) and any(isinstance(v, (Mapping, list, tuple)) for v in value):
        out = []
        for i, v in enumerate(value):
            out.extend(_flatten(v, f"{prefix}[{i}]"))
        return out
    if isinstance(value, (list, tuple)):
        return [(prefix, json.dumps([plain(v) for v in value], ensure_ascii=False))]
    return [(prefix, value)]


class ResultSurface:
    """The one result surface every result type offers, whatever it holds: ``to_dict``,
    ``to_json``, ``render(fmt)`` in every format of :data:`FORMATS`, ``str`` (the table),
    ``_repr_html_`` (notebooks) and ``to_dataframe`` (``ragjudge.log_mlflow(result)`` logs any
    of them to MLflow, from the integrations layer: nothing here imports upward).

    A result type defines ``to_dict()`` and, where it is a table, ``table()`` -> (headers,
    rows); the methods here fill in whatever it does not define itself (its own win). Without
    ``table()`` the rows are its ``to_dict()`` flattened to (field, value) pairs.
    """

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - every result defines it
        raise NotImplementedError

    def to_json(self, *, indent: int | None = 2) -> str:
        """``to_dict()`` as JSON (NaN refused: a value that is not a number is ``null``)."""
        return dumps(plain(self.to_dict()), indent=indent)

    def _surface_table(self) -> tuple[list[str], list[list[Any]]]:
        table = getattr(self, "table", None)
        if callable(table):
            headers, rows = table()
            return list(headers), [list(r) for r in rows]
        return ["field", "value"], [[k, v] for k, v in _flatten(self.to_dict())]

    def render(self, fmt: str = "table", *, digits: int = 4) -> str:
        """The result in ``fmt`` (:data:`FORMATS`); ends with a newline."""
        if fmt == "json":
            return self.to_json() + "\n"
        if fmt == "table" and type(self).__str__ is not ResultSurface.__str__:
            text = str(self)
            return text if text.endswith("\n") else text + "\n"
        if fmt == "html" and type(self)._repr_html_ is not ResultSurface._repr_html_:
            return self._repr_html_()
        if fmt == "latex" and callable(getattr(self, "to_latex", None)):
            return self.to_latex()  # type: ignore[attr-defined, no-any-return]
        headers, rows = self._surface_table()
        return render_table(headers, rows, fmt, digits=digits, title=type(self).__name__)

    def __str__(self) -> str:
        describe = getattr(self, "describe", None)
        if callable(describe):
            return str(describe())
        headers, rows = self._surface_table()
        return render_table(headers, rows, "table").rstrip("\n")

    def _repr_html_(self) -> str:
        headers, rows = self._surface_table()
        return render_table(headers, rows, "html", title=type(self).__name__)

    def to_dataframe(self) -> Any:
        """The table as a pandas DataFrame (needs the ``pandas`` extra)."""
        pd = optional("pandas", extra="pandas", what="to_dataframe()")
        headers, rows = self._surface_table()
        return pd.DataFrame([[plain(c) for c in r] for r in rows], columns=headers)


class Table(ResultSurface):
    """A table as a value: ``headers`` (column names) and ``rows`` (lists of cells: strings,
    numbers or ``None``). It renders like every result (``str``, ``render(fmt)``, HTML in a
    notebook), gives ``records()`` (one ``{header: cell}`` per row) and ``to_dataframe()``, and
    still unpacks as ``headers, rows = table``."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.headers: list[str] = [str(h) for h in headers]
        self.rows: list[list[Any]] = [list(r) for r in rows]
        _check_shape(self.headers, self.rows)

    def table(self) -> tuple[list[str], list[list[Any]]]:
        return self.headers, self.rows

    def records(self) -> list[dict[str, Any]]:
        """One ``{header: cell}`` per row."""
        return [dict(zip(self.headers, r)) for r in self.rows]

    def to_dict(self) -> dict[str, Any]:
        return {"headers": list(self.headers), "rows": plain(self.rows)}

    def __iter__(self) -> Any:
        return iter((self.headers, self.rows))

    def __getitem__(self, index: int) -> Any:  # table[0] / table[1], as the pair it replaced
        return (self.headers, self.rows)[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Table):
            return (self.headers, self.rows) == (other.headers, other.rows)
        if isinstance(other, tuple) and len(other) == 2:
            return (self.headers, self.rows) == (list(other[0]), [list(r) for r in other[1]])
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Table {len(self.rows)} rows x {len(self.headers)} columns>\n{self}"
