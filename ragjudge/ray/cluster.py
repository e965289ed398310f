"""What every Ray pipeline of ragjudge shares: joining (or starting) the cluster, the recipe a
worker rebuilds the driver's session from, and the inputs a pipeline streams (Python objects,
a Ray dataset, Parquet files)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._lazy import optional
from ..errors import InputError
from ..llm import LLM

__all__ = [
    "BATCHES_IN_FLIGHT",
    "ENGINES",
    "Columns",
    "actors",
    "check_counts",
    "connect",
    "in_order",
    "is_dataset",
    "key_env",
    "open_dataset",
    "parquet_files",
    "recipe",
    "sum_totals",
    "totals",
    "worker_llm",
]

#: Where the model runs: ragjudge's session in each worker, or a vLLM engine per GPU worker.
ENGINES = ("session", "vllm")

#: Batches a worker works on at once (one event loop, one session): the next batch starts while
#: the last calls of one finish. A worker killed mid-run repays at most this many batches' calls
#: in flight.
BATCHES_IN_FLIGHT = 2

#: Accepted column names of a dataset, canonical name first (``{"qid": ("qid", "query_id")}``).
Columns = Mapping[str, Sequence[str]]


def connect(address: str | None) -> Any:
    """The ``ray`` module, joined to the cluster at ``address`` (``ray://host:10001``, ``auto``)
    or to a local one started here when Ray is not initialised yet."""
    ray = optional("ray", extra="ray", what="the ray engine")
    # ragjudge says what happened in its own lines; Ray's notices (its start, its token
    # authentication, disabled progress bars) would bury them on stderr. Its errors still show.
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    return ray


def actors(workers: int) -> dict[str, Any]:
    """``map_batches``'s arguments for ``workers`` actors, each working on
    :data:`BATCHES_IN_FLIGHT` batches at once (an async worker: one loop, one session)."""
    from ray.data import ActorPoolStrategy

    try:
        return {"compute": ActorPoolStrategy(size=workers, max_concurrent_calls_per_actor=BATCHES_IN_FLIGHT)}
    except TypeError:  # a Ray before the named setting: the actor's own
        return {"compute": ActorPoolStrategy(size=workers), "max_concurrency": BATCHES_IN_FLIGHT}


def check_counts(**values: Any) -> None:
    """Each value a positive integer (``workers``, ``batch_size``), else one line naming it."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"must be a positive integer, got {value!r}", field=name)


# ----------------------------------------------------------------------------- the session recipe
def _cache_target(llm: LLM) -> str | None:
    """What a worker opens to share the driver's cache: the PostgreSQL URL or the SQLite path
    (a path the workers can reach: the same machine, or a shared filesystem)."""
    cache = llm.cache
    url = getattr(cache, "url", None)
    if isinstance(url, str):
        return url
    path = getattr(cache, "path", None)
    return None if path is None else str(path)


def recipe(llm: LLM, workers: int) -> dict[str, Any]:
    """How a worker builds the driver's session: its endpoints, cache, prices and sampling,
    with an even share of what is left of the budget (plain values: Ray pickles them to the
    workers), so the workers' spending together never passes ``max_cost``."""
    share = None if llm.max_cost is None else max(0.0, llm.max_cost - (llm.cost or 0.0)) / workers
    return {
        "model": [c.endpoint for c in llm.callers],
        "cache": _cache_target(llm) or False,
        "prices": llm.prices,
        "max_cost": share,
        "temperature": llm.temperature,
        "seed": llm.seed,
        "max_tokens": llm.max_tokens,
        "logprobs": llm.logprobs,
        "top_logprobs": llm.top_logprobs,
    }


def worker_llm(made: Mapping[str, Any]) -> LLM:
    """The session a worker judges with, from :func:`recipe`'s value."""
    return LLM(**made, check_key=True)


def totals(llm: LLM) -> dict[str, Any]:
    """A worker's session's running totals (what it asked, what came back, tokens, cost). A
    worker works on several batches at once with one session, so what one batch spent cannot
    be told apart; the driver sums each worker's latest totals instead (:func:`sum_totals`)."""
    u, st = llm.usage, llm.stats
    return {"requests": st.calls + st.retries, "calls": st.calls, "retries": st.retries,
            "cache_hits": st.cache_hits, "failed_calls": st.failed, "skipped": st.skipped,
            "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
            "embedding_tokens": sum(e.total_tokens for e in getattr(llm, "embedding_usage", {}).values()),
            "cost_usd": llm.cost}


def sum_totals(reports: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The sum over workers of each worker's latest :func:`totals` (``(worker id, totals)``
    pairs, in any order: totals only grow, so a worker's latest is its largest). A worker that
    died counts what it reported before; its replacement has an id of its own."""
    latest: dict[str, dict[str, Any]] = {}
    for worker, t in reports:
        have = latest.setdefault(worker, {})
        for key, value in t.items():
            if key == "cost_usd":
                have[key] = None if value is None or (key in have and have[key] is None) \
                    else max(value, have.get(key) or 0.0)
            else:
                have[key] = max(int(value), have.get(key, 0))
    out: dict[str, Any] = {}
    for t in latest.values():
        for key, value in t.items():
            if key == "cost_usd":
                out[key] = None if value is None or (key in out and out[key] is None) else out.get(key, 0.0) + value
            else:
                out[key] = out.get(key, 0) + value
    return out


def key_env(llm: LLM) -> dict[str, str]:
    """The environment variables holding the endpoints' keys, for the workers' runtime
    environment (a local cluster inherits them; a remote one gets them this way)."""
    out = {}
    for c in llm.callers:
        e = c.endpoint
        for name in (getattr(e, "api_key_env", None), getattr(getattr(llm, "spec", None), "key_env", None)):
            if isinstance(name, str) and name in os.environ:
                out[name] = os.environ[name]
    return out


# ----------------------------------------------------------------------------- inputs
def is_dataset(obj: Any) -> bool:
    """A Ray dataset (recognised by its class's module: nothing is imported to tell)."""
    return type(obj).__module__.startswith("ray.data") and callable(getattr(obj, "map_batches", None))


def parquet_files(obj: Any) -> list[str] | None:
    """The Parquet files ``obj`` names (a ``.parquet`` path, a directory of them, or a list of
    such paths), else ``None`` (then ``obj`` is something else: objects, a dataset)."""
    items = [obj] if isinstance(obj, (str, Path)) else obj if isinstance(obj, (list, tuple)) else None
    if not items or not all(isinstance(p, (str, Path)) for p in items):
        return None
    out: list[str] = []
    for p in map(Path, items):
        if p.is_dir():
            found = sorted(str(f) for f in p.rglob("*.parquet"))
            if not found:
                raise InputError("no .parquet file in this directory", source=str(p))
            out.extend(found)
        elif p.suffix == ".parquet":
            out.append(str(p))
        else:
            return None
    return out


def _resolve(names: Sequence[str], columns: Columns, source: str) -> dict[str, str]:
    """``{canonical: column}`` for the required ``columns`` among a schema's ``names``."""
    have = set(names)
    out = {}
    for canonical, accepted in columns.items():
        hit = next((c for c in accepted if c in have), None)
        if hit is None:
            also = f" (or {', '.join(accepted[1:])})" if len(accepted) > 1 else ""
            raise InputError(f"no {accepted[0]!r} column{also}; the columns are: {', '.join(names)}",
                             source=source, field=accepted[0])
        out[canonical] = hit
    return out


def open_dataset(data: Any, columns: Columns, address: str | None, *, batch_size: int,
                 only: bool = False) -> tuple[Any, Any, dict[str, str]]:
    """``(ray, dataset, {canonical: column})`` of a Ray dataset or Parquet files. The Parquet
    files' columns are checked first, from each file's footer, before a cluster is joined: a
    bad file or a missing column is one line naming the file. Nothing is read into the driver:
    the dataset streams through the workers, cut into blocks of at most ``batch_size`` rows
    (one large block would go to one worker whole). ``only``: read just those columns of the
    files (a pair needs four; a sample reads every field it has)."""
    files = parquet_files(data)
    if files is None:  # a Ray dataset
        ray = connect(address)
        schema = data.schema()
        names = _resolve(list(schema.names) if schema is not None else [], columns, "<Ray dataset>")
        return ray, _blocks(data, batch_size), names
    pq = optional("pyarrow.parquet", extra="ray", what="reading Parquet")
    names: dict[str, str] | None = None
    for f in files:
        try:
            schema = pq.read_schema(f)
        except FileNotFoundError:
            raise InputError("no such file", source=f) from None
        except (OSError, ValueError) as exc:  # pyarrow: ArrowInvalid (a ValueError), ArrowIOError
            raise InputError(f"not a readable Parquet file ({' '.join(str(exc).split())})", source=f) from None
        got = _resolve(list(schema.names), columns, f)
        if names is not None and got != names:
            raise InputError(f"columns differ from {files[0]}'s ({got} vs {names})", source=f)
        names = got
    assert names is not None
    ray = connect(address)
    ds = ray.data.read_parquet(files)
    if only:
        ds = ds.select_columns(sorted(set(names.values())))
    return ray, _blocks(ds, batch_size), names


@contextmanager
def in_order(ds: Any) -> Iterator[None]:
    """While iterating ``ds``, its rows come in the input's order (a report's samples are in
    their input order). The dataset keeps the context it was made with, so the setting goes
    there, and is put back after (a user's dataset shares it)."""
    options = ds.context.execution_options
    keep, options.preserve_order = options.preserve_order, True
    try:
        yield
    finally:
        options.preserve_order = keep


def _blocks(ds: Any, rows: int) -> Any:
    """``ds`` in blocks of at most ``rows`` rows, streamed (no shuffle, nothing materialised)."""
    try:
        return ds.repartition(target_num_rows_per_block=rows)
    except TypeError:  # a Ray without streaming repartition: the blocks as read
        return ds
