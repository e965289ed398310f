"""Token accounting and prices.

Usage comes from each reply's ``usage`` block (``prompt_tokens`` includes the cached prefix;
``prompt_tokens_details.cached_tokens`` says how much of it was served from the provider's
prompt cache and is billed at the cached rate). Prices are USD per million tokens and can be
overridden from a JSON file ``{"model": {"input": x, "cached_input": y, "output": z}}``.
A model with no known price (a local server) costs ``None`` -- unknown, not zero -- unless
the user supplies a price; ``--max-cost`` then refuses to start rather than guess.

Batch API requests are billed at :data:`BATCH_DISCOUNT` times the online price (OpenAI: 50%,
input and output alike); ``PriceTable.cost(model, usage, batch=True)`` applies it -- the one
place that knows about it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = ["Usage", "Price", "PriceTable", "estimate_tokens", "BATCH_DISCOUNT"]

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

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(self._tuple(), other._tuple())))

    def __sub__(self, other: Usage) -> Usage:
        return Usage(*(a - b for a, b in zip(self._tuple(), other._tuple())))

    def _tuple(self) -> tuple[int, ...]:
        return (self.calls, self.prompt_tokens, self.cached_tokens, self.completion_tokens,
                self.reasoning_tokens, self.unknown)

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
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Usage:
        return cls(*(_count(d.get(k)) or 0 for k in (
            "calls", "prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens",
            "unknown")))


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
    """USD per million tokens."""

    input: float
    output: float
    cached_input: float | None = None  # None: billed like input

    def cost(self, usage: Usage, *, batch: bool = False) -> float:
        """USD for ``usage``; ``batch=True``: billed through the Batch API (discounted)."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        online = (
            (usage.prompt_tokens - cached) * self.input
            + cached * cached_rate
            + usage.completion_tokens * self.output
        ) / 1e6
        return online * BATCH_DISCOUNT if batch else online


# Public list prices (USD / 1M tokens: input, output, cached input) at the time of writing.
# They change: users override them with --prices FILE; the report always shows tokens too.
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


class PriceTable:
    """Model name -> :class:`Price`. A dated snapshot name (``gpt-4o-mini-2024-07-18``) falls
    back to the longest known prefix."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._prices = dict(prices or {})

    @classmethod
    def default(cls) -> PriceTable:
        return cls(_DEFAULT_PRICES)

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, source: str | None = None,
              base: PriceTable | None = None) -> PriceTable:
        prices = dict(base._prices) if base is not None else {}
        for model, spec in data.items():
            if not isinstance(spec, Mapping) or "input" not in spec or "output" not in spec:
                raise InputError(f"price of {model!r} needs 'input' and 'output' (USD per 1M tokens)",
                                 source=source, field=str(model))
            rates: dict[str, float | None] = {}
            for name in ("input", "output", "cached_input"):
                raw = spec.get(name)
                if raw is None and name == "cached_input":
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
            prices[str(model)] = Price(rates["input"], rates["output"], rates["cached_input"])  # type: ignore[arg-type]
        return cls(prices)

    @classmethod
    def load(cls, path: str | Path, *, base: PriceTable | None = None) -> PriceTable:
        """Read a JSON price file; its entries override ``base`` (default: the built-in table)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"cannot read price file: {exc.strerror}", source=str(path)) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg}", source=str(path), line=exc.lineno) from None
        if not isinstance(data, Mapping):
            raise InputError("price file must be a JSON object", source=str(path))
        return cls.parse(data, source=str(path), base=base if base is not None else cls.default())

    def merged(self, prices: Mapping[str, Price]) -> PriceTable:
        """This table with ``prices`` added (they win over entries of the same name)."""
        return PriceTable({**self._prices, **prices}) if prices else self

    def with_price(self, model: str, price: Price) -> PriceTable:
        prices = dict(self._prices)
        prices[model] = price
        return PriceTable(prices)

    def get(self, model: str) -> Price | None:
        if model in self._prices:
            return self._prices[model]
        best = None
        for name in self._prices:
            if model.startswith(name + "-") and (best is None or len(name) > len(best)):
                best = name
        return self._prices[best] if best is not None else None

    def cost(self, model: str, usage: Usage, *, batch: bool = False) -> float | None:
        """USD, or ``None`` when the model's price is unknown. ``batch=True``: the usage was
        billed through the Batch API (at :data:`BATCH_DISCOUNT` of the online price)."""
        price = self.get(model)
        return None if price is None else price.cost(usage, batch=batch)


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Rough prompt size without a tokenizer: ~4 characters per token for English text plus
    a few tokens of chat framing per message. Used only for dry runs and the TPM reservation
    (settled from the real ``usage`` afterwards)."""
    chars = sum(len(str(m.get("content", ""))) for m in messages)
    return chars // 4 + 4 * len(messages) + 3

