"""Which format a qrels or run input is in, from its first bytes.

The content decides, the file name only breaks ties (an input with no data line):

* ``{`` or ``[`` first -> JSON;
* qrels: a first data line of 4 whitespace-separated columns ending in an integer is TREC
  (MS MARCO's ``qrels.dev.tsv`` and ``q1 0<TAB>d1<TAB>1`` alike); otherwise 3 tab-separated
  columns are BEIR (with or without its header row); anything else is read as TREC, whose
  reader names the bad line;
* runs: 6 or more columns are TREC; 3 columns ending in an integer are an MS MARCO run
  (``qid docid rank``); anything else is read as TREC.
"""

from __future__ import annotations

from .numbers import is_int
from .streams import BOM, WS_BYTES

__all__ = ["QRELS_FORMATS", "RUN_FORMATS", "sniff_format", "first_data_line"]

QRELS_FORMATS = ("trec", "beir", "json")
RUN_FORMATS = ("trec", "msmarco", "json")


def first_data_line(head: bytes) -> bytes | None:
    """The first line that is neither blank nor a ``#`` comment (without its line end)."""
    if head.startswith(BOM):
        head = head[len(BOM) :]
    for raw in head.split(b"\n"):
        stripped = raw.strip(WS_BYTES)
        if stripped and not stripped.startswith(b"#"):
            return raw.rstrip(b"\r")
    return None


def _by_name(name: str | None, allowed: tuple[str, ...]) -> str:
    lower = (name or "").lower().removesuffix(".gz")
    if lower.endswith(".json") and "json" in allowed:
        return "json"
    return "trec"


def sniff_format(head: bytes, name: str | None, allowed: tuple[str, ...]) -> str:
    """The format of an input starting with ``head`` (see the module docstring); ``allowed`` is
    :data:`QRELS_FORMATS` or :data:`RUN_FORMATS`."""
    if head.startswith(BOM):
        head = head[len(BOM) :]
    if head.lstrip(WS_BYTES)[:1] in (b"{", b"[") and "json" in allowed:
        return "json"
    line = first_data_line(head)
    if line is None:
        return _by_name(name, allowed)
    tokens = line.split()
    last = tokens[-1].decode("utf-8", "replace")
    if "beir" in allowed:
        if len(tokens) == 4 and is_int(last):
            return "trec"
        if len(line.split(b"\t")) == 3:
            return "beir"
    if "msmarco" in allowed and len(tokens) == 3 and is_int(last):
        return "msmarco"
    return "trec"
