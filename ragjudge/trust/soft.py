"""Soft labels: a metric's expected value under the judge's per-grade probabilities.

When the judge returns a distribution over grades for each (query, document) pair, the
honest per-query value of a metric f is E[f(g)] over the joint distribution of the grades
(pairs independent), never f(E[g]): nDCG of expected grades is not expected nDCG, and a 50/50
"0 or 3" document is not a grade-1.5 document.

Per query the expectation is exact -- every combination of the uncertain grades, weighted by
its probability -- when there are at most ``samples`` combinations; otherwise it is a seeded
Monte-Carlo mean over ``samples`` joint draws (standard error reported per query as
``<metric>:mc_se`` in ``meta["soft"]``). Either way every "world" is scored by the ordinary
engine, so soft values use exactly the definitions of hard ones.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..data import Qrels, Run
from ..errors import InputError
from ..evaluate import evaluate
from ..io.streams import decode_text, open_input
from ..llm.prompts import list_prompts, load_prompt
from ..report import Report

__all__ = ["soft_evaluate", "read_judgments", "grade_distributions"]

_SEP = "\x1f"  # joins a query id and a world index; cannot occur in TREC ids (whitespace-free)


def read_judgments(path: str) -> list[Any]:
    """The :class:`ragjudge.judges.Judgment` records of a ``ragjudge judge --judgments`` file.

    A grade (or a probability's grade) outside the scale of the prompt the record names, a
    grade its own distribution rules out, and a pair given twice with different labels are
    errors naming the line: each would move the expected values without a word."""
    # Deferred: the judges bring the LLM stack (session, client, tenacity); only reading a
    # judgments file needs their record type.
    from ..judges import Judgment

    out = []
    seen: dict[tuple[str, str], tuple[int, Any]] = {}
    scales: dict[tuple[str, str], set[int] | None] = {}
    with open_input(path) as stream:  # .gz by its magic bytes; unreadable: one line
        text = decode_text(stream.read(), stream.source)  # a BOM is dropped, bad UTF-8 names its line
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not a judgment record ({exc})", source=path, line=i) from None
        field, why = _bad_record(rec)
        if why:
            raise InputError(why, source=path, line=i, field=field)
        try:
            j = Judgment.from_dict(rec)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"not a judgment record ({exc})", source=path, line=i) from None
        field, why = _off_scale(j, scales)
        if why:
            raise InputError(why, source=path, line=i, field=field)
        key = (j.qid, j.docid)
        label = (j.grade, j.probs, j.error is None)
        if key in seen:
            first, before = seen[key]
            if before != label:
                raise InputError(f"query {j.qid!r}, document {j.docid!r} is judged on line "
                                 f"{first} already, with another label", source=path,
                                 line=i, field="docid")
            continue  # the same label again (a file appended to twice): counted once
        seen[key] = (i, label)
        out.append(j)
    if not out:
        raise InputError("no judgments in the file", source=path)
    return out


def _bad_record(rec: Any) -> tuple[str, str | None]:
    """(field, why) when ``rec`` is no judgment record: not an object, a query or document id
    missing or not an id (a null would become a query named "None"), or probabilities that
    are no distribution; (``""``, ``None``) when it is fine."""
    if not isinstance(rec, dict):
        return "", f"expected a JSON object (a judgment record), got {type(rec).__name__}"
    for name in ("qid", "docid"):
        value = rec.get(name)
        if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
            return name, f"expected a non-empty id, got {json.dumps(value)}"
    why = _bad_probs(rec.get("probs"))
    return ("probs", why) if why else ("", None)


def _off_scale(j: Any, scales: dict[tuple[str, str], set[int] | None]) -> tuple[str, str | None]:
    """(field, why) when ``j``'s grade or probabilities leave its prompt's scale, or its grade
    has no probability in its own distribution; (``""``, ``None``) when it is fine."""
    if j.error is not None:
        return "", None
    prov = j.provenance
    key = (prov.prompt_id, str(prov.prompt_version))
    if key not in scales:
        scales[key] = _prompt_scale(*key)
    scale = scales[key]
    if j.grade is not None and (isinstance(j.grade, bool) or not isinstance(j.grade, int)):
        return "grade", f"grade {j.grade!r} is not an integer"
    if scale is not None:
        if j.grade is not None and j.grade not in scale:
            return "grade", f"grade {j.grade} is outside the scale {sorted(scale)} of prompt {prov.prompt_id!r}"
        off = sorted(int(g) for g in (j.probs or {}) if int(g) not in scale)
        if off:
            return "probs", f"grade {off[0]} is outside the scale {sorted(scale)} of prompt {prov.prompt_id!r}"
    if j.grade is not None and j.probs and float(j.probs.get(str(j.grade), j.probs.get(j.grade, 0.0))) <= 0.0:
        return "grade", f"grade {j.grade} has no probability in the record's own probs"
    return "", None


def _prompt_scale(prompt_id: str, version: str) -> set[int] | None:
    """The integer labels of a shipped prompt (``None`` when it is not one, or has none)."""
    if not prompt_id:
        return None

    name = f"{prompt_id}.v{version}" if version else prompt_id
    if name not in list_prompts():
        return None
    values = load_prompt(name).label_values
    ints = {v for v in values if isinstance(v, int) and not isinstance(v, bool)}
    return ints or None


#: How far a grade distribution may sum from 1 (the judge writes them normalised; rounding
#: in a file written by another tool is fine, a missing grade's mass is not).
PROB_TOLERANCE = 1e-3


def _bad_probs(probs: Any) -> str | None:
    """Why ``probs`` (grade -> probability) is not a probability distribution, or ``None``."""
    if not probs:
        return None
    if not isinstance(probs, Mapping):
        return f"probabilities must be an object of grade: probability, got {type(probs).__name__}"
    total = 0.0
    for grade, p in probs.items():
        try:
            int(grade)
        except (TypeError, ValueError):
            return f"grade {grade!r} is not an integer"
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p):
            return f"probability of grade {grade} is not a number: {p!r}"
        if not 0.0 <= p <= 1.0:
            return f"probability of grade {grade} is outside [0, 1]: {p!r}"
        total += p
    if abs(total - 1.0) > PROB_TOLERANCE:
        return f"probabilities sum to {total:.6g}, not 1"
    return None


def grade_distributions(
    judgments: Iterable[Any], *, human: Qrels | None = None, source: str | None = None
) -> dict[str, dict[str, dict[int, float]]]:
    """``{qid: {docid: {grade: probability}}}`` from judgments (their ``probs``, or the hard
    grade with probability 1 when they have none; failed judgments are left out) and certain
    human labels, which win."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for j in judgments:
        if j.error is not None or (j.grade is None and not j.probs):
            continue  # a failed judgment carries no label
        if j.probs:
            why = _bad_probs(j.probs)
            probs = {} if why else {int(g): float(p) for g, p in j.probs.items() if float(p) > 0}
            total = sum(probs.values())
            if why or not probs:
                raise InputError(f"bad probabilities for query {j.qid!r}, document {j.docid!r}: "
                                 f"{why or 'all zero'}", source=source, field="probs")
            dist = {g: p / total for g, p in probs.items()}
        else:
            dist = {int(j.grade): 1.0}
        out.setdefault(j.qid, {})[j.docid] = dist
    if human is not None:
        for q, d, g in human.rows():
            out.setdefault(q, {})[d] = {int(g): 1.0}
    if not out:
        raise InputError("no usable judgment (every one failed)", source=source)
    return out


def _worlds(docs: Mapping[str, Mapping[int, float]], samples: int,
            rng: np.random.Generator) -> tuple[list[str], np.ndarray, np.ndarray, bool]:
    """(docids, grades (W, D), weights (W,), exact?) for one query."""
    ids = list(docs)
    supports = [sorted(docs[d]) for d in ids]
    combos = math.prod(len(s) for s in supports)
    if combos <= samples:
        grades = np.array(list(itertools.product(*supports)), dtype=np.int64).reshape(combos, len(ids))
        weights = np.ones(combos)
        for k, d in enumerate(ids):
            weights *= np.array([docs[d][g] for g in grades[:, k]])
        return ids, grades, weights, True
    grades = np.empty((samples, len(ids)), dtype=np.int64)
    for k, d in enumerate(ids):
        gs = np.array(supports[k])
        ps = np.array([docs[d][g] for g in supports[k]])
        grades[:, k] = gs[rng.choice(len(gs), size=samples, p=ps / ps.sum())]
    return ids, grades, np.full(samples, 1.0 / samples), False


def soft_evaluate(
    judgments: Iterable[Any] | Mapping[str, Mapping[str, Mapping[int, float]]],
    run: Run,
    metrics: Sequence[str],
    *,
    human: Qrels | None = None,
    samples: int = 256,
    seed: int | None = 0,
    rel: int | None = None,
) -> Report:
    """Evaluate ``run`` with each metric's expected per-query value under per-grade
    probabilities; a :class:`Report` (means over queries, as :func:`ragjudge.evaluate`).

    ``judgments``: :class:`ragjudge.judges.Judgment` records (``probs`` per grade) or
    ``{qid: {docid: {grade: p}}}``; ``human``: certain labels that win. ``samples``: exact
    enumeration up to this many grade combinations per query, else this many Monte-Carlo draws
    (seeded). ``meta["soft"]`` says which queries were exact and the Monte-Carlo standard
    errors.
    """

    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise InputError(f"samples must be a positive integer, got {samples!r}", field="samples")
    if isinstance(judgments, Mapping):
        dists = {q: dict(docs) for q, docs in judgments.items()}
        for q, d, g in (human.rows() if human is not None else ()):
            dists.setdefault(q, {})[d] = {int(g): 1.0}
    else:
        dists = grade_distributions(judgments, human=human)
    rng = np.random.default_rng(seed)
    order = sorted(dists, key=lambda s: s.encode("utf-8"))
    worlds = [_worlds(dists[q], samples, rng) for q in order]
    qids, offsets, docids, scores = run.arrays
    where = {qb.decode("utf-8"): i for i, qb in enumerate(qids.tolist())}
    run_only = [q for q in where if q not in dists]
    # Per world, the metric values; worlds are scored in chunks of queries so that the
    # replicated run stays small (about _CHUNK_ROWS rows at a time).
    values_of: dict[str, list[np.ndarray]] = {}
    keys: list[str] = []
    start = 0
    while start < len(order):
        stop, rows = start, 0
        while stop < len(order) and (stop == start or rows < _CHUNK_ROWS):
            i = where.get(order[stop])
            rows += len(worlds[stop][2]) * (0 if i is None else int(offsets[i + 1] - offsets[i]) + 1)
            stop += 1
        rep, chunk_values = _score_chunk(evaluate, order[start:stop], worlds[start:stop], run,
                                         where, metrics, rel)
        keys, summed, base_meta = rep.metrics, rep.summed, rep.meta
        for m in keys:
            values_of.setdefault(m, []).append(chunk_values[m])
        start = stop
    world_q = np.repeat(np.arange(len(order)), [len(w[2]) for w in worlds])
    weight = np.concatenate([w[2] for w in worlds])
    exact = np.array([w[3] for w in worlds], dtype=bool)
    values: dict[str, np.ndarray] = {}
    mc_se: dict[str, dict[str, float]] = {}
    for m in keys:
        x = np.concatenate(values_of[m])
        ok = np.isfinite(x)
        wq, w, xv = world_q[ok], weight[ok], x[ok]
        den = np.bincount(wq, weights=w, minlength=len(order))
        mean = np.bincount(wq, weights=w * xv, minlength=len(order)) / np.where(den > 0, den, 1.0)
        values[m] = np.where(den > 0, mean, np.nan)
        # Monte-Carlo standard error of each sampled query's mean (equal weights there).
        n = np.bincount(wq, minlength=len(order)).astype(np.float64)
        sq = np.bincount(wq, weights=xv * xv, minlength=len(order))
        with np.errstate(invalid="ignore", divide="ignore"):
            var = (sq - n * mean * mean) / (n - 1)
        for qi in np.flatnonzero(~exact & (n > 1)):
            mc_se.setdefault(m, {})[order[qi]] = float(math.sqrt(max(var[qi], 0.0) / n[qi]))
    missing = [q for q in order if q not in where]
    meta = {
        **{k: v for k, v in base_meta.items() if k not in ("missing_queries", "ignored_queries")},
        "num_q": len(order), "num_q_qrels": len(order), "num_q_run": run.num_queries,
        "missing_queries": missing, "num_missing": len(missing),
        "ignored_queries": run_only, "num_ignored": len(run_only),
        "soft": {"rule": "E[f(g)] over independent per-pair grade distributions",
                 "exact_queries": int(exact.sum()), "monte_carlo_queries": int((~exact).sum()),
                 "samples": samples, "seed": seed, "mc_se": mc_se},
    }
    return Report(run.name, order, values, meta, summed=summed)


_CHUNK_ROWS = 2_000_000


def _score_chunk(evaluate: Any, order: list[str], worlds: list[Any], run: Run,
                 where: Mapping[str, int], metrics: Any, rel: int | None) -> tuple[Any, dict[str, np.ndarray]]:
    """Evaluate the run on every world of the queries ``order``: one expanded query id
    ``qid<US>w`` per world, the run replicated under each. Returns the report and its values
    in world order."""
    qids, offsets, docids, scores = run.arrays
    qq: list[str] = []
    qd: list[str] = []
    qg: list[np.ndarray] = []
    rq, rd, rs = [], [], []
    keys = []
    for q, (ids, grades, weights, _) in zip(order, worlds):
        i = where.get(q)
        for w in range(len(weights)):
            key = f"{q}{_SEP}{w}"
            keys.append(key)
            qq.extend([key] * len(ids))
            qd.extend(ids)
            qg.append(grades[w])
            if i is not None:
                s, e = int(offsets[i]), int(offsets[i + 1])
                rq.append(np.full(e - s, key.encode("utf-8")))
                rd.append(docids[s:e])
                rs.append(scores[s:e])
    qrels = Qrels.from_arrays(qq, qd, np.concatenate(qg).astype(np.int64))
    if rq:
        expanded = Run.from_arrays(np.concatenate(rq), np.concatenate(rd), np.concatenate(rs),
                                   name=run.name)
    else:
        expanded = Run.from_arrays([], [], np.zeros(0), name=run.name)
    rep = evaluate(qrels, expanded, metrics, rel=rel)
    position = {k: j for j, k in enumerate(rep.qids)}
    index = np.array([position[k] for k in keys], dtype=np.int64)
    return rep, {m: rep.values[m][index] for m in rep.metrics}
