"""Token accounting and prices.

Usage comes from each reply's ``usage`` block. ``prompt_tokens`` counts every prompt token
once, the cached prefix and the cache writes included; ``cached_tokens`` says how much of it
was read from the provider's prompt cache (billed at the cached rate), ``cache_write_tokens``
and ``cache_write_1h_tokens`` how much was written to it (Anthropic: 5-minute and 1-hour
writes, billed at their own rates).

Prices are USD per million tokens. :meth:`PriceTable.default` looks a model up, in order: the
prices the user gave (``--prices FILE``: ``{"model": {"input": x, "cached_input": y, "output":
z, "cache_write": w, "cache_write_1h": v}}``), pydantic's maintained price database
``genai-prices`` (list prices with their dates, cache reads and writes; imported the first time a
price is needed), the built-in table below (used where that package is absent or does not know
the model), and last the longest known prefix of the name (a dated snapshot), said in one line.
A model with no price (a local server) costs ``None`` -- unknown, not zero -- said in one line
naming the model and how to give its price; ``--max-cost`` then refuses to start rather than
guess.

Batch API requests are billed at :data:`BATCH_DISCOUNT` times the online price (OpenAI: 50%,
input and output alike); ``PriceTable.cost(model, usage, batch=True)`` applies it -- the one
place that knows about it.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import InputError

log = logging.getLogger("ragjudge.llm")
# Lines already logged by any table: a service builds one table per job, and its log should
# say a missing price once, not once a job (each table still keeps its notes for its result).
_LOGGED: set[str] = set()
_LOGGED_LOCK = threading.Lock()

__all__ = ["Usage", "Price", "PriceTable", "estimate_tokens", "BATCH_DISCOUNT", "database_price"]

# OpenAI bills Batch API requests (input, cached input and output) at half the online price.
BATCH_DISCOUNT = 0.5


@dataclass(frozen=True)
class Usage:
    """Tokens and calls; ``a + b`` adds them.

    ``completion_tokens`` is what the completion is billed for, hidden reasoning included
    (``reasoning_tokens`` records how many of them were reasoning). ``unknown`` counts calls
    whose reply carried no readable ``usage``: their tokens are the session's conservative
    stand-in (the call's worst case), never zero.
    """

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    unknown: int = 0
    #: prompt tokens written to the provider's prompt cache (5-minute writes; part of
    #: ``prompt_tokens``), and those written for one hour
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(self._tuple(), other._tuple())))

    def __sub__(self, other: Usage) -> Usage:
        return Usage(*(a - b for a, b in zip(self._tuple(), other._tuple())))

    def _tuple(self) -> tuple[int, ...]:
        return (self.calls, self.prompt_tokens, self.cached_tokens, self.completion_tokens,
                self.reasoning_tokens, self.unknown, self.cache_write_tokens, self.cache_write_1h_tokens)

    @classmethod
    def from_openai(cls, usage: Any) -> Usage:
        """From a reply's ``usage`` (dict or openai model). Never raises: a missing block or
        a field that is not a count gives ``Usage(calls=1, unknown=1)`` (the caller substitutes
        a conservative estimate). Reasoning tokens that a server reports *beside* rather than
        inside ``completion_tokens`` (more reasoning than completion) are added to it."""
        if usage is not None and not isinstance(usage, Mapping):
            try:
                usage = usage.model_dump() if hasattr(usage, "model_dump") else dict(vars(usage))
            except Exception:  # an object we cannot read is an unknown usage, not a crash
                usage = None
        if not isinstance(usage, Mapping):
            return cls(calls=1, unknown=1)
        prompt = _count(usage.get("prompt_tokens"))
        completion = _count(usage.get("completion_tokens"))
        if prompt is None or completion is None:
            return cls(calls=1, unknown=1)
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else None
        cdetails = usage.get("completion_tokens_details")
        reasoning = _count(cdetails.get("reasoning_tokens")) if isinstance(cdetails, Mapping) else None
        reasoning = reasoning or 0
        if reasoning > completion:
            completion += reasoning
        return cls(calls=1, prompt_tokens=prompt, cached_tokens=min(cached or 0, prompt),
                   completion_tokens=completion, reasoning_tokens=reasoning)

    def to_dict(self) -> dict[str, int]:
        d = {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
        }
        if self.reasoning_tokens:
            d["reasoning_tokens"] = self.reasoning_tokens
        if self.unknown:
            d["unknown"] = self.unknown
        if self.cache_write_tokens:
            d["cache_write_tokens"] = self.cache_write_tokens
        if self.cache_write_1h_tokens:
            d["cache_write_1h_tokens"] = self.cache_write_1h_tokens
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Usage:
        return cls(*(_count(d.get(k)) or 0 for k in (
            "calls", "prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens",
            "unknown", "cache_write_tokens", "cache_write_1h_tokens")))


#: More tokens than any one reply can be billed for: a figure above it is impossible (an
#: unknown usage, counted at the call's worst case, never a crash of float arithmetic).
MAX_COUNT = 10**12


def _count(v: Any) -> int | None:
    """A token count from JSON: a non-negative integer (also ``12.0`` or ``"12"``) up to
    :data:`MAX_COUNT`, else ``None``."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        v = v.strip()
        return _count(int(v)) if v.isdigit() and len(v) <= 13 else None
    if isinstance(v, int):
        return v if 0 <= v <= MAX_COUNT else None
    if isinstance(v, float) and math.isfinite(v) and 0 <= v <= MAX_COUNT and v == int(v):
        return int(v)
    return None


@dataclass(frozen=True)
class Price:
    """USD per million tokens. ``cached_input``: a prompt-cache read (None: billed like
    input); ``cache_write`` / ``cache_write_1h``: a 5-minute / 1-hour prompt-cache write
    (None: like input / like a 5-minute write). ``long_context_above``: the provider bills a
    request whose prompt is longer than this many tokens at a higher rate, which these rates
    are not (such a request is said, see :meth:`PriceTable.check_request`)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    cache_write_1h: float | None = None
    long_context_above: int | None = None

    def cost(self, usage: Usage, *, batch: bool = False) -> float:
        """USD for ``usage``; ``batch=True``: billed through the Batch API (discounted)."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        w5 = min(usage.cache_write_tokens, usage.prompt_tokens - cached)
        w1h = min(usage.cache_write_1h_tokens, usage.prompt_tokens - cached - w5)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        write_rate = self.input if self.cache_write is None else self.cache_write
        write_1h_rate = write_rate if self.cache_write_1h is None else self.cache_write_1h
        online = (
            (usage.prompt_tokens - cached - w5 - w1h) * self.input
            + cached * cached_rate
            + w5 * write_rate
            + w1h * write_1h_rate
            + usage.completion_tokens * self.output
        ) / 1e6
        return online * BATCH_DISCOUNT if batch else online


# Public list prices (USD / 1M tokens: input, output, cached input) at the time of writing: the
# fallback where the price database (genai-prices) is absent or does not know a model. Users
# override them with --prices FILE; the report always shows tokens too.
_DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "o4-mini": Price(1.10, 4.40, 0.275),
    # Embedding models bill input tokens only.
    "text-embedding-3-small": Price(0.02, 0.0),
    "text-embedding-3-large": Price(0.13, 0.0),
    "text-embedding-ada-002": Price(0.10, 0.0),
}

#: How a price was found (:meth:`PriceTable.source`).
GIVEN, DATABASE, BUILT_IN, PREFIX, NONE = "given", "genai-prices", "built-in", "prefix", "none"

_HOW_TO_PRICE = ('give its price with --prices FILE ({"<model>": {"input": USD_per_1M, '
                 '"output": USD_per_1M}})')

_DB_LOCK = threading.Lock()
_DB: list[Any] = []  # the price database's snapshot once loaded ([None]: the package is absent)


def _database() -> Any:
    """genai-prices' bundled snapshot (imported on first use: it takes ~0.3 s), or None."""
    with _DB_LOCK:
        if not _DB:
            try:
                from genai_prices import data_snapshot
                _DB.append(data_snapshot.get_snapshot())
            except Exception:  # absent or broken: the built-in table is the fallback
                log.debug("genai-prices unavailable", exc_info=True)
                _DB.append(None)
        return _DB[0]


def _rate(value: Any) -> float | None:
    """A database price (a Decimal, or tiers: their base, the rate below the long-context
    threshold) as a float."""
    if value is None:
        return None
    value = getattr(value, "base", value)
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) and out >= 0 else None


def database_price(model: str) -> Price | None:
    """The list price of ``model`` today in genai-prices (None: package absent, model unknown,
    or no token prices)."""
    db = _database()
    if db is None or not model:
        return None
    try:
        _provider, info = db.find_provider_model(model, None, None, None)
        mp = info.get_prices(datetime.now(timezone.utc))
    except Exception:  # LookupError: unknown model; anything else: treat as unknown too
        return None
    inp, out = _rate(getattr(mp, "input_mtok", None)), _rate(getattr(mp, "output_mtok", None))
    if inp is None:
        return None
    write = _rate(getattr(mp, "cache_write_mtok", None))
    tiers = getattr(getattr(mp, "input_mtok", None), "tiers", None) or ()
    above = min((t.start for t in tiers if isinstance(getattr(t, "start", None), int)), default=None)
    return Price(inp, out or 0.0, _rate(getattr(mp, "cache_read_mtok", None)), write,
                 _rate(getattr(mp, "cache_write_1h_mtok", None)), long_context_above=above)


class _TwiceError(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:  # JSON keeps the last silently: two prices for one model
            raise _TwiceError(key)
        out[key] = value
    return out


class PriceTable:
    """Model name -> :class:`Price`, looked up in order: the prices given (this table's own
    entries, e.g. from ``--prices FILE``), the price database (``genai-prices``, in
    :meth:`default`), the built-in list prices, then the longest known prefix of the name
    (``gpt-4o-2099-01-01`` -> ``gpt-4o``), which is said once in one line. An exact name
    always wins over a prefix, so ``claude-opus-4-6`` never takes ``claude-opus-4``'s price."""

    def __init__(self, prices: Mapping[str, Price] | None = None, *,
                 fallback: Mapping[str, Price] | None = None, database: bool = False) -> None:
        self._prices = dict(prices or {})
        self._fallback = dict(fallback or {})
        self._database = database
        self._found: dict[str, tuple[Price | None, str, str]] = {}
        #: the lines said about prices (a prefix fallback, a model without a price)
        self.notes: list[str] = []

    @classmethod
    def default(cls) -> PriceTable:
        """The price database with the built-in list prices as its fallback."""
        return cls(fallback=_DEFAULT_PRICES, database=True)

    def _derive(self, prices: Mapping[str, Price] | None = None,
                fallback: Mapping[str, Price] | None = None) -> PriceTable:
        return PriceTable({**self._prices, **(prices or {})}, fallback={**self._fallback, **(fallback or {})},
                          database=self._database)

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, source: str | None = None,
              base: PriceTable | None = None) -> PriceTable:
        prices: dict[str, Price] = {}
        for model, spec in data.items():
            if not isinstance(spec, Mapping) or "input" not in spec or "output" not in spec:
                raise InputError(f"price of {model!r} needs 'input' and 'output' (USD per 1M tokens)",
                                 source=source, field=str(model))
            known = ("input", "output", "cached_input", "cache_write", "cache_write_1h")
            odd = [k for k in spec if k not in known]
            if odd:  # a misspelt rate would fall back to the input price without a word
                raise InputError(f"unknown price field {odd[0]!r} of {model!r} (known: {', '.join(known)})",
                                 source=source, field=f"{model}.{odd[0]}")
            rates: dict[str, float | None] = {}
            for name in known:
                raw = spec.get(name)
                if raw is None and name not in ("input", "output"):
                    rates[name] = None
                    continue
                try:
                    value = float(raw)
                except (TypeError, ValueError):
                    value = math.nan
                # A NaN or negative price would silently disable --max-cost (every comparison
                # with NaN is false): refuse it.
                if isinstance(raw, bool) or not math.isfinite(value) or value < 0:
                    raise InputError(f"price {name!r} of {model!r} must be a finite number >= 0, "
                                     f"got {raw!r}", source=source, field=f"{model}.{name}")
                rates[name] = value
            prices[str(model)] = Price(**rates)  # type: ignore[arg-type]
        return base._derive(prices) if base is not None else cls(prices)

    @classmethod
    def load(cls, path: str | Path, *, base: PriceTable | None = None) -> PriceTable:
        """Read a JSON price file; its entries override ``base`` (default: :meth:`default`)."""
        try:
            # A BOM is dropped, bad UTF-8 names its line. Imported here: the io package loads
            # numpy, which a command that reads no price file should not pay for.
            from ..io.streams import decode_text

            data = json.loads(decode_text(Path(path).read_bytes(), str(path)), object_pairs_hook=_unique_pairs)
        except _TwiceError as exc:
            raise InputError(f"{exc.args[0]!r} is given twice (which price is meant?)", source=str(path),
                             field=str(exc.args[0])) from None
        except OSError as exc:
            raise InputError(f"cannot read price file: {exc.strerror}", source=str(path)) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg}", source=str(path), line=exc.lineno) from None
        if not isinstance(data, Mapping):
            raise InputError("price file must be a JSON object", source=str(path))
        return cls.parse(data, source=str(path), base=base if base is not None else cls.default())

    def merged(self, prices: Mapping[str, Price]) -> PriceTable:
        """This table with a provider's built-in list ``prices`` added to its fallback (the
        prices given and the database still win over them)."""
        return self._derive(fallback=prices) if prices else self

    def with_price(self, model: str, price: Price) -> PriceTable:
        """This table with ``price`` given for ``model`` (it wins over every other source)."""
        return self._derive({model: price})

    def source(self, model: str) -> str:
        """Where the price of ``model`` comes from: :data:`GIVEN`, :data:`DATABASE`,
        :data:`BUILT_IN`, :data:`PREFIX` or :data:`NONE`."""
        return self._find(model)[1]

    def _find(self, model: str, *, say: bool = False) -> tuple[Price | None, str]:
        found = self._found.get(model)
        if found is None:
            found = self._found[model] = self._lookup(model)
        if say and found[1] == PREFIX:
            self._note(f"no price for model {model!r}: using the price of {found[2]!r} (the "
                       f"longest known prefix of its name); if that is wrong, {_HOW_TO_PRICE}")
        elif say and found[1] == NONE and self._database:  # a table of one's own stays quiet
            self._note(f"no price for model {model!r}: its cost is reported as unknown; {_HOW_TO_PRICE}")
        return found[0], found[1]

    def _lookup(self, model: str) -> tuple[Price | None, str, str]:
        if model in self._prices:
            return self._prices[model], GIVEN, model
        if self._database and (db := database_price(model)) is not None:
            return db, DATABASE, model
        if model in self._fallback:
            return self._fallback[model], BUILT_IN, model
        known = {**self._fallback, **self._prices}
        best = max((n for n in known if model.startswith(n + "-")), key=len, default=None)
        return (None, NONE, "") if best is None else (known[best], PREFIX, best)

    def _note(self, text: str) -> None:
        line = f"ragjudge: warning: {text}"
        if line not in self.notes:
            self.notes.append(line)
            with _LOGGED_LOCK:
                first = line not in _LOGGED
                _LOGGED.add(line)
            if first:
                log.warning(line)

    def get(self, model: str) -> Price | None:
        """The price of ``model`` (None: unknown). A price taken from a prefix is said once."""
        price, how = self._find(model)
        if how == PREFIX:
            self._find(model, say=True)
        return price

    def check_request(self, model: str, usage: Usage) -> None:
        """Say once when one request's prompt passed the model's long-context threshold: the
        provider bills it at a higher rate than the one counted."""
        price = self._find(model)[0]
        above = price.long_context_above if price is not None else None
        if above is not None and usage.prompt_tokens > above:
            self._note(f"model {model!r} bills requests with more than {above:,} prompt tokens at a "
                       f"higher long-context rate, and this run sent such requests; the reported "
                       f"cost and --max-cost count the base rate, so they are low for such "
                       f"requests; to count the higher rate, give it with --prices FILE")

    def cost(self, model: str, usage: Usage, *, batch: bool = False) -> float | None:
        """USD, or ``None`` when the model's price is unknown (said once, in one line naming
        the model and how to give its price). ``batch=True``: the usage was billed through the
        Batch API (at :data:`BATCH_DISCOUNT` of the online price)."""
        price = self._find(model, say=True)[0]
        return None if price is None else price.cost(usage, batch=batch)


def estimate_tokens(messages: Sequence[Mapping[str, Any]],
                    response_format: Mapping[str, Any] | None = None, *, schema_overhead: int = 0) -> int:
    """Rough prompt size without a tokenizer: ~4 characters per token for English text plus
    a few tokens of chat framing per message, and the response schema the provider adds to the
    prompt (``schema_overhead``: the tokens it adds around one, e.g. Anthropic's tool-use
    system prompt for a forced tool). Used only for dry runs and the TPM reservation (settled
    from the real ``usage`` afterwards)."""
    chars = sum(len(str(m.get("content", ""))) for m in messages)
    tokens = chars // 4 + 4 * len(messages) + 3
    if response_format and response_format.get("type") == "json_schema":
        tokens += len(json.dumps(response_format.get("json_schema") or {}, separators=(",", ":"))) // 4
        tokens += schema_overhead
    return tokens
