"""Reading and writing relevance judgments, runs, queries and corpora.

One module per format, each with ``parse_x(text)`` beside ``read_x(path)``:

* :mod:`~ragjudge.io.trec` -- TREC qrels ``qid iter docid grade``, TREC runs
  ``qid Q0 docid rank score tag`` (vectorized reader) and MS MARCO runs ``qid docid rank``;
* :mod:`~ragjudge.io.beir` -- BEIR qrels TSV and whole BEIR dataset folders (:func:`read_beir`);
* :mod:`~ragjudge.io.jsonfmt` -- the ``{qid: {docid: value}}`` JSON of pytrec_eval / ranx;
* :mod:`~ragjudge.io.texts` -- queries and corpora (BEIR JSONL or ``id<TAB>text``);
* :mod:`~ragjudge.io.dataframe`, :mod:`~ragjudge.io.peers` -- pandas, ranx and ir_measures
  objects; :mod:`~ragjudge.io.coerce` turns any of them (or a path) into Qrels / Run;
* :mod:`~ragjudge.io.sniff` -- which format an input is in, by content first;
* :mod:`~ragjudge.io.streams`, :mod:`~ragjudge.io.numbers`, :mod:`~ragjudge.io.records` --
  opening inputs once without seeking (``.gz``, pipes, ``-`` for stdin), trec_eval's reading of
  numbers, and the JSON / JSONL / CSV record readers shared with the RAG samples;
* :mod:`~ragjudge.io.writers` -- TREC / BEIR / JSON writers (scores read back identical).
"""

from __future__ import annotations

from .beir import BeirDataset, parse_beir_qrels, read_beir, read_beir_qrels
from .coerce import as_qrels, as_run
from .dataframe import qrels_from_dataframe, run_from_dataframe
from .jsonfmt import parse_json_qrels, parse_json_run, read_json_qrels, read_json_run
from .peers import qrels_from_ranx, qrels_from_records, run_from_ranx, run_from_records
from .readers import QrelsFormat, RunFormat, parse_qrels, parse_run, read_qrels, read_run
from .records import csv_dict_reader, jsonl_lines, load_json
from .sniff import QRELS_FORMATS, RUN_FORMATS, sniff_format
from .streams import check_output_path, open_input
from .texts import TextFormat, parse_corpus, parse_queries, read_corpus, read_queries
from .trec import (
    parse_msmarco_run,
    parse_trec_qrels,
    parse_trec_run,
    read_msmarco_run,
    read_trec_qrels,
    read_trec_run,
)
from .writers import format_qrels, format_run, write_qrels, write_run

__all__ = [
    "QRELS_FORMATS",
    "RUN_FORMATS",
    "QrelsFormat",
    "RunFormat",
    "TextFormat",
    "parse_qrels",
    "read_qrels",
    "format_qrels",
    "write_qrels",
    "parse_run",
    "read_run",
    "format_run",
    "write_run",
    "parse_queries",
    "read_queries",
    "parse_corpus",
    "read_corpus",
    "BeirDataset",
    "read_beir",
    "parse_beir_qrels",
    "read_beir_qrels",
    "parse_trec_qrels",
    "read_trec_qrels",
    "parse_trec_run",
    "read_trec_run",
    "parse_msmarco_run",
    "read_msmarco_run",
    "parse_json_qrels",
    "read_json_qrels",
    "parse_json_run",
    "read_json_run",
    "qrels_from_dataframe",
    "run_from_dataframe",
    "qrels_from_ranx",
    "run_from_ranx",
    "qrels_from_records",
    "run_from_records",
    "as_qrels",
    "as_run",
    "sniff_format",
    "open_input",
    "check_output_path",
    "load_json",
    "jsonl_lines",
    "csv_dict_reader",
]
