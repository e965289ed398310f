"""``ragjudge plan-labels`` / ``ppi-samples`` / ``simulate-judge``, and the work behind the
LLM-label modes other commands declare themselves.

``evaluate`` declares --human/--ppi, --soft and --judge (``cli/evaluate.py``) and calls
:func:`evaluate_ppi`, :func:`evaluate_soft` or :func:`evaluate_judged`; ``judge`` declares its
panel options (``cli/judge.py``) and calls :func:`run_panel`. Only argument handling here; the
work is :mod:`ragjudge.trust` and :mod:`ragjudge.judges`.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import TYPE_CHECKING, Any

from ..errors import InputError, LLMError
from ..evaluate import EvaluationWarning
from ..io import read_corpus, read_qrels, read_queries, read_run, write_qrels
from ..measures import parse_measure, split_metric_list
from ..nuggets.data import read_answers, read_assignments
from ..nuggets.score import METRICS
from ..render import render_table
from ..report import render_reports
from ._inputs import check_writable, write_output
from ._llm import llm_from_args

# Deferred imports: ragjudge.trust, ragjudge.judges, ragjudge._sync, ragjudge.llm.prompts,
# ragjudge.nuggets.labelling. `evaluate` imports this module for its options and must load no
# trust wing, LLM stack, asyncio or hashlib: each function imports the wing it runs.

if TYPE_CHECKING:
    from ..judges.options import JudgeOptions

__all__ = ["register", "parse_scale", "add_ppi_options", "evaluate_ppi", "evaluate_soft",
           "evaluate_judged", "run_panel"]


def parse_scale(text: str | None) -> tuple[int, int] | None:
    """``"0-3"`` -> (0, 3); ``None`` stays None. A bad value is a one-line InputError."""
    if text is None:
        return None
    lo, sep, hi = text.partition("-")
    try:
        if not sep:
            raise ValueError
        scale = (int(lo), int(hi))
    except ValueError:
        raise InputError(f"expected LOW-HIGH such as 0-3, got {text!r}", field="--scale") from None
    if scale[0] > scale[1]:
        raise InputError(f"low end above high end in {text!r}", field="--scale")
    return scale


def add_ppi_options(p: argparse.ArgumentParser | Any) -> None:
    """The PPI options shared by ``evaluate --ppi``, ``plan-labels`` and ``ppi-samples``."""
    p.add_argument("--ppi-classic", action="store_true",
                   help="classic PPI (lambda = 1) instead of PPI++ power tuning")
    p.add_argument("--estimand", choices=("collection", "population"), default=None,
                   help="what the interval is for: the mean over this collection's queries "
                        "(collection, default) or over the population they were drawn from")
    p.add_argument("--population", choices=("finite", "infinite"), default=None,
                   help="older spelling of --estimand (finite = collection, infinite = population)")
    p.add_argument("--confidence", type=float, default=0.95,
                   help="interval confidence level (default 0.95)")


def _population(args: argparse.Namespace) -> str:
    """The ``population`` setting from ``--estimand`` (or its older spelling ``--population``)."""
    from ..trust.ppi import POPULATION_OF

    if args.estimand and args.population and POPULATION_OF[args.estimand] != args.population:
        raise InputError(f"--estimand {args.estimand} and --population {args.population} disagree",
                         field="--estimand")
    if args.estimand:
        return POPULATION_OF[args.estimand]
    return args.population or "finite"


def _method(args: argparse.Namespace) -> str:
    if not 0.0 < args.confidence < 1.0:
        raise InputError(f"must be in (0, 1), got {args.confidence}", field="--confidence")
    return "ppi" if args.ppi_classic else "ppi++"


# ----------------------------------------------------------------------------- evaluate modes
def _human_or_none(args: argparse.Namespace) -> Any:
    return None if args.qrels.lower() == "none" else read_qrels(args.qrels, dedup=args.dedup)


def evaluate_ppi(args: argparse.Namespace, metrics: Any, runs: dict[str, Any]) -> int:
    """``evaluate --human QRELS --ppi``: QRELS are LLM labels, --human those of a subset."""
    from ..trust.ppi import ppi_evaluate

    if not args.human:
        raise InputError("--ppi needs the human labels of some queries (--human QRELS)",
                         field="--ppi")
    method = _method(args)
    llm = read_qrels(args.qrels, dedup=args.dedup)
    human = read_qrels(args.human, dedup=args.dedup)
    report = ppi_evaluate(llm, runs, metrics, human, method=method,  # type: ignore[arg-type]
                          confidence=args.confidence, population=_population(args),
                          baseline=args.baseline, rel=args.rel, scale=parse_scale(args.scale))
    from ..trust.labelling import shown_in_qrels

    shown = shown_in_qrels(args.human)
    if shown:
        report.notes.append(f"{shown} of the human labels were given with the LLM's grade in view "
                            "(the labelling page recorded it): PPI assumes human labels independent "
                            "of the LLM's, so the intervals may be too narrow")
    text = report.render(args.format, digits=args.digits)
    if args.format == "table":
        text += report.footer()
    write_output(text, args.output)
    return 0


def _render_reports(reports: list[Any], args: argparse.Namespace, extra: str = "") -> None:
    text = render_reports(reports, args.format, per_query=args.per_query, digits=args.digits)
    if args.format == "table":
        text += extra
    write_output(text, args.output)


def evaluate_soft(args: argparse.Namespace, metrics: Any, runs: dict[str, Any]) -> int:
    """``evaluate --soft JUDGMENTS``: expected values under per-grade probabilities."""
    from ..trust.soft import read_judgments, soft_evaluate

    if args.samples < 1:
        raise InputError(f"must be positive, got {args.samples}", field="--samples")
    human = _human_or_none(args)
    judgments = read_judgments(args.soft)
    reports = [soft_evaluate(judgments, r, metrics, human=human, samples=args.samples,
                             seed=args.seed, rel=args.rel) for r in runs.values()]
    s = reports[0].meta["soft"]
    _render_reports(reports, args, (
        f"soft labels: expected values E[f(g)] under per-grade probabilities; "
        f"{s['exact_queries']} queries exact, {s['monte_carlo_queries']} by {s['samples']} "
        f"Monte-Carlo draws (seed {s['seed']})\n"))
    return 0


def _llm(args: argparse.Namespace, model: str) -> Any:
    """The LLM session ``ragjudge judge`` would build from the same options (``evaluate``
    declares them with the shared definition; its ``--seed`` is the bootstrap's, so the
    model's sampling seed keeps its default)."""
    ns = argparse.Namespace(**{**vars(args), "model": model, "seed": 0})
    return llm_from_args(ns)


def evaluate_judged(args: argparse.Namespace, metrics: Any, runs: dict[str, Any]) -> int:
    """``evaluate --judge MODEL``: :func:`ragjudge.judges.evaluate_with_judge` (judge the
    unjudged top documents, then evaluate). ``metrics`` ``None`` is label-free without -m: the
    pool-free defaults of the prompt's scale."""
    from .._sync import run_sync
    from ..judges import LLMRelevanceJudge
    from ..judges.ondemand import Pool, default_depth, evaluate_with_judge, label_free_metrics, scale_top

    if not args.queries or not args.corpus:
        raise InputError("--judge needs the texts: --queries FILE --corpus FILE", field="--judge")
    if args.judge_depth is not None and args.judge_depth < 1:
        raise InputError(f"must be a positive integer, got {args.judge_depth}", field="--judge-depth")
    human = _human_or_none(args)
    if args.all_queries and human is None:
        raise InputError("--all-queries only makes sense with human QRELS", field="--all-queries")
    query_set = _query_set(getattr(args, "query_set", None))
    if not args.dry_run:
        check_writable([args.judgments, args.save_qrels, args.output, args.pool])
    pool = Pool.load(args.pool) if args.pool else None
    llm = _llm(args, args.judge)
    judge = LLMRelevanceJudge(llm=llm, prompt=args.prompt, progress=not args.no_progress)
    if metrics is None:
        metrics = label_free_metrics(scale_top(judge))
    depth = args.judge_depth or default_depth(metrics, args.rel)
    run_list = list(runs.values())
    if args.dry_run:
        queries, corpus = read_queries(args.queries), read_corpus(args.corpus)
        known = human
        if pool is not None and len(pool):  # the pool's labels are not paid for again
            labels = pool.qrels() if human is None or args.all_queries else pool.qrels().filter(human.query_ids)
            known = labels if human is None else human.merge(labels)
        plan = judge.estimate(queries, corpus, run_list, depth, qrels=known,
                              all_queries=human is None or args.all_queries)
        print(f"judging on demand at depth {depth}: " + plan.describe())
        return 0

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    def warn(line: str) -> None:
        print(f"ragjudge: warning: {line}", file=sys.stderr)

    stats = None if len(run_list) < 2 or args.no_stats else {
        "baseline": args.baseline, "test": args.test, "n_resamples": args.resamples,
        "seed": args.seed, "alpha": args.alpha}

    async def main() -> Any:
        try:
            return await evaluate_with_judge(
                judge, runs, metrics, qrels=human, queries=args.queries, corpus=args.corpus,
                judge_depth=depth, all_queries=args.all_queries, pool=pool, rel=args.rel,
                skip_missing=args.skip_missing, query_set=query_set, compare=stats,
                run_paths=list(args.runs), judgments=args.judgments, save_qrels=args.save_qrels,
                log=say, warn=warn)
        finally:
            await llm.aclose()

    try:
        # The library evaluates several times (judged@k before and after, the kept pool, the
        # scores): the final reports' warnings are printed once each below, not every time.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EvaluationWarning)
            result = run_sync(main())
    except LLMError as exc:
        partial = exc.partial
        if partial is not None and getattr(partial, "judgments", None) and (args.judgments or args.save_qrels):
            ok = sum(1 for j in partial.judgments if j.ok)
            print(f"the run stopped; wrote the {ok} judgments made before it to "
                  + " and ".join(p for p in (args.judgments, args.save_qrels) if p)
                  + ("; a rerun resumes from the cache without paying for them again"
                     if llm.cache.path is not None else "; --no-cache was given: a rerun pays again"),
                  file=sys.stderr)
        raise
    if stats is not None:
        reports = list(result.reports.values())
        write_output(str(result) if args.format == "table" else
                     result.render(args.format, per_query=args.per_query, digits=args.digits), args.output)
    else:
        reports = result if isinstance(result, list) else [result]
        info = reports[0].meta["judging"]
        # judged@depth before -> after is on stderr already: not again here
        _render_reports(reports, args, "".join(
            f"{r.run}: {r.footer()}; {info['llm_labels']} LLM labels, "
            f"{info['human_labels']} human\n" for r in reports))
    for text in dict.fromkeys(t for r in reports for t in r.meta.get("warnings", ())):
        warn(text)
    info = reports[0].meta["judging"]
    # A run cut short by the budget, or that mostly failed, is not a result: say so in the
    # exit status.
    pairs = info["pairs"] or 0
    if info["skipped_budget"]:
        print(f"ragjudge: error: stopped by --max-cost {args.max_cost:g}: {info['skipped_budget']} of "
              f"{pairs} pairs not judged, the scores above count them as unjudged; rerun with a "
              "higher budget to finish (exit status 4)", file=sys.stderr)
        return 4
    if pairs and (info["failed"] + info["skipped_budget"]) * 2 > pairs:
        print(f"ragjudge: most judgments failed or were skipped ({info['failed']} failed, "
              f"{info['skipped_budget']} over budget of {pairs}); rerun to retry", file=sys.stderr)
        return 3
    return 0


def _query_set(path: str | None) -> list[str] | None:
    """Query ids from ``--query-set FILE``: a queries file (BEIR JSONL or TSV), or one id a line."""
    if path is None:
        return None

    try:
        return list(read_queries(path))
    except InputError:
        try:
            with open(path, encoding="utf-8") as f:
                ids = [line.split()[0] for line in f if line.strip()]
        except OSError as exc:
            raise InputError(exc.strerror or "cannot read", source=path, field="--query-set") from None
        if not ids:
            raise InputError("no query ids", source=path, field="--query-set") from None
        return ids


# ----------------------------------------------------------------------------- judge panels
def run_panel(args: argparse.Namespace, options: JudgeOptions) -> int:
    """``ragjudge judge --model A --model B ...``: every model grades the same pairs; write the
    combined qrels, each model's judgments, and print their agreement."""
    from .._sync import run_sync
    from ..judges import LLMRelevanceJudge
    from ..trust.panel import judge_panel

    if not args.output and not args.dry_run:
        raise InputError("no output file (pass -o OUT.qrels, or --dry-run)", field="-o")
    if args.batch:
        raise InputError("--batch does not support judge panels yet", field="--batch")
    if len(set(args.models)) != len(args.models):
        raise InputError("the same model is given twice", field="--model")
    queries, corpus = read_queries(args.queries), read_corpus(args.corpus)
    runs = [read_run(path) for path in args.runs]
    human = read_qrels(args.fill) if args.fill else None
    judges = []
    for model in args.models:
        ns = argparse.Namespace(**vars(args))
        ns.model = model
        if args.max_cost is not None:
            # One cap for the whole panel: each model may spend an equal share of it.
            ns.max_cost = args.max_cost / len(args.models)
        judges.append(LLMRelevanceJudge(llm=llm_from_args(ns), prompt=options.prompt,
                                        progress=not args.no_progress))
    if args.dry_run:
        for j in judges:
            print(j.estimate(queries, corpus, runs, options.depth, qrels=human,
                             all_queries=options.all_queries).describe())
        return 0

    async def main() -> Any:
        try:
            return await judge_panel(judges, queries, corpus, runs, options.depth,
                                     rule=options.combine, human=human,
                                     all_queries=options.all_queries)
        finally:
            for j in judges:
                await j.llm.aclose()

    panel = run_sync(main())
    write_qrels(panel.qrels, args.output, format="trec")
    if args.judgments:
        with open(args.judgments, "w", encoding="utf-8") as f:
            for r in panel.results.values():
                for jd in r.judgments:
                    f.write(json.dumps(jd.to_dict(), ensure_ascii=False) + "\n")
    for name, r in panel.results.items():
        s = r.summary()
        print(f"{name}: judged {s['judged']}/{s['pairs']} pairs ({s['cached']} from cache, "
              f"{s['failed']} failed)", file=sys.stderr)
    sys.stdout.write(str(panel))
    print(f"wrote {args.output} ({len(panel.qrels)} labels, {len(panel.human_pairs)} human)",
          file=sys.stderr)
    bad = [n for n, r in panel.results.items()
           if r.judgments and (len(r.failed) + len(r.skipped)) * 2 > len(r.judgments)]
    if bad:
        print(f"ragjudge: most judgments of {', '.join(bad)} failed or were skipped; rerun to retry",
              file=sys.stderr)
        return 3
    return 0


# ----------------------------------------------------------------------------- commands
def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan-labels",
        help="how many human-labelled queries a target interval width needs (from a pilot)",
        description="From LLM qrels on all queries and a pilot of human qrels on a few, the number "
                    "of human-labelled queries that gives a PPI (and a human-only) interval of "
                    "the target full width, per run and metric.",
    )
    p.add_argument("qrels", metavar="LLM_QRELS", help="LLM qrels covering all queries (with "
                   "--nuggets: LLM nugget assignments, as `ragjudge nuggets assign` writes them)")
    p.add_argument("runs", metavar="RUN", nargs="*", help="run file(s) (none with --nuggets)")
    p.add_argument("--human", metavar="QRELS", help="pilot human qrels (needed without --sample)")
    p.add_argument("-m", "--metric", dest="metrics", action="append", metavar="METRIC",
                   help="metric spec or comma list (default ndcg@10)")
    p.add_argument("--width", type=float,
                   help="target full interval width (high - low), e.g. 0.05 (needed without --sample)")
    p.add_argument("--rel", type=int, metavar="N", help="relevance threshold of binary metrics")
    smp = p.add_argument_group("drawing the sample to label (--sample N -o to_label.jsonl; "
                               "label it with: ragjudge ui to_label.jsonl LLM_QRELS RUN...)")
    smp.add_argument("--sample", type=int, metavar="N",
                     help="draw N queries at random (seeded) and write their pooled pairs to -o")
    smp.add_argument("--depth", type=int, default=10, metavar="K", help="pool depth (default 10)")
    smp.add_argument("--seed", type=int, default=0, help="random seed of the sample (default 0)")
    smp.add_argument("--queries", metavar="FILE", help="query texts (needed with --sample)")
    smp.add_argument("--corpus", metavar="FILE", help="passage texts (needed with --sample)")
    smp.add_argument("--prompt", default="relevance.v1",
                     help="prompt whose grading scale the assessor sees (default relevance.v1)")
    smp.add_argument("--nuggets", action="store_true",
                     help="LLM_QRELS is LLM nugget assignments: draw --sample N queries and write "
                          "every run's answer to each, with its nuggets, to assign by hand (label "
                          "with: ragjudge ui to_label.jsonl LLM_ASSIGNMENTS); or, with --human "
                          "PILOT_ASSIGNMENTS --width W, how many queries to assign. The metric: "
                          "a nugget score (default all)")
    smp.add_argument("--answers", metavar="FILE", nargs="+",
                     help="with --nuggets: answer files, for assignments that lack the answer text")
    _add_output_and_ppi_options(p)
    p.set_defaults(func=_plan)

    sim = sub.add_parser(
        "simulate-judge",
        help="labels of a simulated judge (known confusion matrix) from true qrels",
        description="Relabel every judged pair of QRELS (the truth, grades 0-3) through the "
                    "confusion matrix of a simulated judge -- lenient, strict, noisy or perfect "
                    "(ragjudge.trust.simulate.JUDGES) -- to see what such a judge would do to "
                    "your conclusions, or to test a pipeline without a model.",
    )
    sim.add_argument("qrels", metavar="QRELS", help="true labels")
    sim.add_argument("--judge", default="lenient", help="lenient (default), strict, noisy, perfect")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sim.add_argument("-o", "--output", required=True, metavar="OUT.qrels",
                     help="where to write the simulated LLM qrels")
    sim.set_defaults(func=_simulate)

    s = sub.add_parser(
        "ppi-samples",
        help="prediction-powered estimates of RAG sample metrics from a human-scored subset",
        description="LLM scores of every sample (the JSON of `ragjudge rag -f json`, JSONL or "
                    "CSV with an id column) and human scores of a random subset (same formats): "
                    "each metric's PPI mean with its interval, beside LLM-only and human-only.",
    )
    s.add_argument("scores", metavar="LLM_SCORES", help="per-sample LLM scores")
    s.add_argument("--human", required=True, metavar="FILE", help="per-sample human scores")
    s.add_argument("-m", "--metric", dest="metrics", action="append", metavar="METRIC",
                   help="metric(s) to estimate (default: every metric in both files)")
    _add_output_and_ppi_options(s)
    s.set_defaults(func=_samples)


def _simulate(args: argparse.Namespace) -> int:
    from ..trust.simulate import JUDGES, simulate_qrels

    if args.judge not in JUDGES:
        raise InputError(f"unknown judge {args.judge!r}; known: {', '.join(JUDGES)}", field="--judge")
    truth = read_qrels(args.qrels)
    scale = (0, len(JUDGES[args.judge]) - 1)
    for q, d, g in truth.rows():
        if g > scale[1]:
            raise InputError(f"grade {g} of query {q!r}, document {d!r} is outside the scale "
                             f"{scale[0]}-{scale[1]}", source=truth.source, field="grade")
    write_qrels(simulate_qrels(truth, args.judge, seed=args.seed), args.output, format="trec")
    print(f"wrote {args.output}: {len(truth)} labels from a simulated {args.judge} judge "
          f"(seed {args.seed})", file=sys.stderr)
    return 0


def _add_output_and_ppi_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--format", choices=("table", "json", "csv", "markdown", "html"),
                   default="table", help="output format (default table)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    add_ppi_options(p)


def _sample(args: argparse.Namespace, metrics: list[str]) -> int:
    """``plan-labels --sample N -o to_label.jsonl``: the seeded sample of pairs to label."""
    from ..llm.prompts import load_prompt
    from ..trust.labelling import sample_to_label

    if not args.output:
        raise InputError("--sample writes a to-label file: pass -o to_label.jsonl", field="-o")
    if not args.queries or not args.corpus:
        raise InputError("--sample needs the texts: --queries FILE --corpus FILE", field="--sample")
    check_writable([args.output])
    prompt = load_prompt(args.prompt)
    llm = read_qrels(args.qrels)
    todo = sample_to_label(
        [read_run(path) for path in args.runs], read_queries(args.queries), read_corpus(args.corpus),
        args.sample, depth=args.depth, seed=args.seed, llm_qrels=llm, labels=prompt.labels,
        extra={"metric": metrics[0], "llm_qrels": args.qrels, "run_files": list(args.runs),
               "prompt": f"{prompt.id}.v{prompt.version}", "estimand": args.estimand or "collection",
               "rel": args.rel})
    write_output(todo.to_jsonl(), args.output)
    print(f"wrote {args.output}: {todo.meta['pairs']} pairs of {todo.meta['sample']} queries drawn "
          f"at random (seed {args.seed}) from {todo.meta['frame']}; label them with: ragjudge ui "
          f"{args.output} {args.qrels} {' '.join(args.runs)}", file=sys.stderr)
    return 0


def _nuggets(args: argparse.Namespace) -> int:
    """``plan-labels LLM_ASSIGNMENTS --nuggets``: the seeded sample of answers whose nuggets a
    person assigns (``--sample N -o FILE``), or how many queries a target width needs (from a
    pilot of human assignments: ``--human FILE --width W``)."""
    from ..nuggets.labelling import plan_nugget_labels, sample_nuggets_to_label

    if args.runs:
        raise InputError("--nuggets takes the LLM assignments file only, no runs", field="RUN")
    metric = (args.metrics or ["all"])[0]
    if metric not in METRICS:
        raise InputError(f"unknown nugget score {metric!r}; expected {', '.join(METRICS)}",
                         field="--metric")
    if args.sample is None:
        if not args.human or args.width is None:
            raise InputError("--nuggets needs --sample N -o to_label.jsonl (answers to assign), or "
                             "--human PILOT --width W (how many to assign)", field="--sample")
        method = _method(args)
        plans = plan_nugget_labels(read_assignments(args.qrels), read_assignments(args.human),
                                   args.width, metric=metric, method=method,
                                   confidence=args.confidence, population=_population(args))
        return _write_plans(args, plans, ["run", "score", "pilot answers", "corr(human, LLM)", "lambda",
                                          "pilot width", f"queries for width {args.width:g} ({method})",
                                          "queries human only"],
                            f"{int(100 * args.confidence)}% intervals; a query to assign is every run's "
                            "answer to it; the pilot's variances are estimates, so add a margin\n")
    if not args.output:
        raise InputError("--sample writes a to-label file: pass -o to_label.jsonl", field="-o")
    check_writable([args.output])
    todo = sample_nuggets_to_label(read_assignments(args.qrels), args.sample, seed=args.seed,
                                   metric=metric, extra={"llm_assignments": args.qrels},
                                   answers=[a for f in args.answers or () for a in read_answers(f)])
    write_output(todo.to_jsonl(), args.output)
    print(f"wrote {args.output}: {todo.meta['items']} nugget assignments of {todo.meta['answers']} "
          f"answers to {todo.meta['sample']} queries drawn at random (seed {args.seed}) from "
          f"{todo.meta['frame']}; label them with: ragjudge ui {args.output} {args.qrels}",
          file=sys.stderr)
    return 0


def _plan(args: argparse.Namespace) -> int:
    from ..trust.ppi import plan_evaluation

    if args.nuggets:
        return _nuggets(args)
    if not args.runs:
        raise InputError("needs at least one RUN (or --nuggets with LLM nugget assignments)",
                         field="RUN")
    method = _method(args)
    metrics = [m for v in (args.metrics or ["ndcg@10"]) for m in split_metric_list(v)]
    for m in metrics:
        parse_measure(m, rel=args.rel)
    if args.sample is not None:
        return _sample(args, metrics)
    if not args.human or args.width is None:
        raise InputError("needs --human QRELS and --width W (or --sample N to draw queries to label)",
                         field="--human")
    llm = read_qrels(args.qrels)
    pilot = read_qrels(args.human)
    runs = [read_run(path) for path in args.runs]
    plans = plan_evaluation(llm, runs, metrics, pilot, args.width, method=method,  # type: ignore[arg-type]
                            confidence=args.confidence, population=_population(args), rel=args.rel)
    return _write_plans(args, plans, ["run", "metric", "pilot n", "corr(human, LLM)", "lambda",
                                      "pilot width", f"n for width {args.width:g} ({method})", "n human only"],
                        f"{int(100 * args.confidence)}% intervals over {plans[0]['n_llm']} LLM-labelled "
                        "queries; the pilot's variances are estimates, so add a margin\n")


def _write_plans(args: argparse.Namespace, plans: list[dict[str, Any]], heads: list[str], footer: str) -> int:
    """A plan per run as JSON, or as a table (``heads``; ``footer`` under a text table)."""
    if args.format == "json":
        write_output(json.dumps(plans, indent=2, allow_nan=False) + "\n", args.output)
        return 0

    rows = [[p["run"], p["metric"], p["n_pilot"], p["correlation"], p["lambda"], p["pilot_width"],
             _n(p["n_ppi"]), _n(p["n_human_only"])] for p in plans]
    text = render_table(heads, rows, args.format)
    if args.format == "table":
        text += footer
    write_output(text, args.output)
    return 0


def _n(value: int | None) -> Any:
    return "unreachable" if value is None else value


def _samples(args: argparse.Namespace) -> int:
    from ..trust.ppi import ppi_samples, read_scores

    method = _method(args)
    llm = read_scores(args.scores)
    human = read_scores(args.human)
    metrics = None
    if args.metrics:
        metrics = [m.strip() for v in args.metrics for m in v.split(",") if m.strip()]
    try:
        est = ppi_samples(llm, human, metrics, method=method, confidence=args.confidence,
                          population=_population(args))
    except InputError as exc:
        if exc.source is not None:
            raise
        # The estimator sees two mappings; the ids it cannot pair are the human file's.
        raise InputError(exc.message, source=args.human, field=exc.field) from None
    if args.format == "json":
        write_output(json.dumps({"ppi": {m: e.to_dict() for m, e in est.items()}}, indent=2,
                          allow_nan=False) + "\n", args.output)
        return 0
    heads = ["metric", "LLM only", "human only", method.upper(), "ci_low", "ci_high", "lambda",
             "n_human", "n_llm"]
    rows = [[m, e.llm_only.value, e.human_only.value, e.mean, e.ci_low, e.ci_high, e.lam,
             e.n_human, e.n_llm] for m, e in est.items()]
    text = render_table(heads, rows, args.format)
    if args.format == "table":
        small = next((e.small_sample() for e in est.values() if e.small_sample()), None)
        clipped = [m for m, e in est.items() if e.clipped]
        text += (f"note: {small}\n" if small else "") + (
            f"note: intervals cut to the metric's range for {', '.join(clipped)}\n" if clipped else "")
    write_output(text, args.output)
    return 0
