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
from ..report import Report

__all__ = ["soft_evaluate", "read_judgments", "grade_distributions"]

_SEP = "\x1f"  # joins a query id and a world index; cannot occur in TREC ids (whitespace-free)


def read_judgments(path: str) -> list[Any]:
    """The :class:`ragjudge.judges.Judgment` records of a ``ragjudge judge --judgments`` file."""
    from ..judges import Judgment

    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    out.append(Judgment.from_dict(json.loads(line)))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
                    raise InputError(f"not a judgment record ({exc})", source=path, line=i) from None
    except OSError as exc:
        raise InputError(exc.strerror or "cannot read", source=path) from None
    if not out:
        raise InputError("no judgments in the file", source=path)
    return out


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
            probs = {int(g): float(p) for g, p in j.probs.items() if float(p) > 0}
            total = sum(probs.values())
            if not probs or not all(math.isfinite(p) for p in probs.values()):
                raise InputError(f"bad probabilities for query {j.qid!r}, document {j.docid!r}",
                                 source=source, field="probs")
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
    from ..evaluate import evaluate  # soft scoring sits above evaluation

    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise InputError(f"samples must be a positive integer, got {samples!r}", field="samples")
    dists = (judgments if isinstance(judgments, Mapping)
             else grade_distributions(judgments, human=human))
    rng = np.random.default_rng(seed)
    order = sorted(dists, key=lambda s: s.encode("utf-8"))
    qrows: tuple[list[str], list[str], list[int]] = ([], [], [])
    world_q: list[int] = []  # per world: index of its query in ``order``
    world_w: list[float] = []  # per world: its probability weight
    n_worlds: list[int] = []
    exact_q: list[bool] = []
    for qi, q in enumerate(order):
        ids, grades, weights, is_exact = _worlds(dists[q], samples, rng)
        exact_q.append(is_exact)
        n_worlds.append(len(weights))
        for w in range(len(weights)):
            qrows[0].extend([f"{q}{_SEP}{w}"] * len(ids))
            qrows[1].extend(ids)
            qrows[2].extend(grades[w].tolist())
        world_q.extend([qi] * len(weights))
        world_w.extend(weights.tolist())
    expanded_qrels = Qrels.from_arrays(qrows[0], qrows[1], np.array(qrows[2], dtype=np.int64))
    world_keys = [f"{order[qi]}{_SEP}{w}" for qi, n in enumerate(n_worlds) for w in range(n)]
    # The run, replicated once per world of each judged query (other queries are ignored, as
    # evaluate ignores run-only queries).
    qids, offsets, docids, scores = run.arrays
    position = {q: i for i, q in enumerate(order)}
    rq, rd, rs = [], [], []
    run_only = []
    for i, qb in enumerate(qids.tolist()):
        q = qb.decode("utf-8")
        if q not in position:
            run_only.append(q)
            continue
        s, e = int(offsets[i]), int(offsets[i + 1])
        for w in range(n_worlds[position[q]]):
            rq.append(np.full(e - s, f"{q}{_SEP}{w}".encode("utf-8")))
            rd.append(docids[s:e])
            rs.append(scores[s:e])
    if rq:
        expanded_run = Run.from_arrays(np.concatenate(rq), np.concatenate(rd), np.concatenate(rs),
                                       name=run.name)
    else:
        expanded_run = Run.from_arrays([], [], np.zeros(0), name=run.name)
    rep = evaluate(expanded_qrels, expanded_run, list(metrics), rel=rel)
    index = {wq: i for i, wq in enumerate(rep.qids)}
    rows = np.array([index[k] for k in world_keys], dtype=np.int64)
    wq_arr = np.array(world_q, dtype=np.int64)
    w_arr = np.array(world_w, dtype=np.float64)
    values: dict[str, np.ndarray] = {}
    mc_se: dict[str, dict[str, float]] = {}
    for m in rep.metrics:
        x = rep.values[m][rows]
        ok = np.isfinite(x)
        num = np.bincount(wq_arr[ok], weights=w_arr[ok] * x[ok], minlength=len(order))
        den = np.bincount(wq_arr[ok], weights=w_arr[ok], minlength=len(order))
        with np.errstate(invalid="ignore", divide="ignore"):
            values[m] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        for qi, q in enumerate(order):
            if not exact_q[qi]:
                xs = x[(wq_arr == qi) & ok]
                if len(xs) > 1:
                    mc_se.setdefault(m, {})[q] = float(xs.std(ddof=1) / math.sqrt(len(xs)))
    in_run = set(run.query_ids)
    missing = [q for q in order if q not in in_run]
    meta = {
        **{k: v for k, v in rep.meta.items() if k not in ("missing_queries", "ignored_queries")},
        "num_q": len(order), "num_q_qrels": len(order), "num_q_run": run.num_queries,
        "missing_queries": missing, "num_missing": len(missing),
        "ignored_queries": run_only, "num_ignored": len(run_only),
        "soft": {"rule": "E[f(g)] over independent per-pair grade distributions",
                 "exact_queries": int(sum(exact_q)), "monte_carlo_queries": int(len(order) - sum(exact_q)),
                 "samples": samples, "seed": seed, "mc_se": mc_se},
    }
    return Report(run.name, order, values, meta, summed=rep.summed)
