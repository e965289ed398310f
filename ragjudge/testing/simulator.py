"""A loopback OpenAI-compatible server for your own tests and CI, benchmarks and fault/load tests.

It serves ``POST /v1/chat/completions``, ``GET /v1/models`` and enough of the Files and
Batches API for batch mode (``POST /v1/files``, ``GET /v1/files/{id}``,
``GET /v1/files/{id}/content``, ``POST /v1/batches``, ``GET /v1/batches[/{id}]``,
``POST /v1/batches/{id}/cancel``), with

* a configurable latency (mean and uniform jitter);
* requests-per-minute and tokens-per-minute limits enforced over a sliding window: a request
  over the limit gets ``429`` with ``retry-after`` / ``retry-after-ms`` and every reply carries
  ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` headers;
* injected faults with given probabilities: 5xx, hangs longer than any sane client timeout,
  malformed JSON content, HTTP bodies that are not a chat completion, truncated replies
  (``finish_reason="length"``), refusals, spurious 429s, batch lines in the error file;
  servers without ``json_schema`` or logprobs, or with llama.cpp's fenced logprob tokens;
* odd fields in otherwise good replies (each an independent draw): non-numeric logprobs,
  ``usage`` fields that are strings or missing, an empty ``choices`` list, a grade out of the
  scale (``7``, ``-1``) or as a string (``"2"``);
* long hidden reasoning: ``reasoning_tokens`` per reply billed in
  ``completion_tokens_details.reasoning_tokens`` and ``completion_tokens``, as reasoning
  models do; like them, reasoning counts against ``max_tokens`` (what is left is the room for
  the visible reply, else it is cut with ``finish_reason="length"``);
* outages: after ``outage_after`` admitted requests the server is down for ``outage_seconds``
  -- ``refuse`` (the listener closes: connection refused; open connections are dropped),
  ``503`` (every request fails) or ``429`` (every request is rate limited);
* optionally (``processing_header``) the server's own time on each 2xx reply in
  ``openai-processing-ms``, as OpenAI sends it;
* a server with ``slots`` parallel slots (llama.cpp ``--parallel``): more requests queue
  inside the server and their latency grows with the load;
* counters: requests, paid calls (a 200 carrying ``usage``), 429s, faults, the largest number
  of requests in flight, and *duplicate paid calls* (an identical request body paid twice);
  a retry of a body that arrives before the ``retry-after`` it was given is counted too.

The rate limits are the server's, whoever calls: several client processes share them.

Replies are deterministic functions of the request: with ``response_format`` of type
``json_schema`` the content is a valid instance of the schema drawn from a PRNG seeded with a
hash of the messages and schema, so the same request gets the same answer; a reply longer than
the request's ``max_tokens`` is cut with ``finish_reason="length"``. Faults are drawn from a PRNG
seeded by (seed, request body, how many times that body arrived): a retry gets a fresh draw,
and a job meets the same faults whatever the arrival order.

Only ever listens on 127.0.0.1 and stops itself after ``max_lifetime`` seconds.

Standalone::

    python -m ragjudge.testing.simulator --port 0 --rpm 600 --latency 0.3 --p-5xx 0.1

prints the base URL (``http://127.0.0.1:PORT/v1``) on its first stdout line; ``GET /_sim/stats``
returns the counters as JSON and ``POST /_sim/reset`` zeroes them.

In-process (tests)::

    async with Simulator(SimConfig(latency=0.01)) as sim:   # on the current loop
        ... sim.base_url ... sim.stats()
    with SimulatorThread(SimConfig(...)) as sim:             # on its own loop in a thread
        ...
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import dataclasses
import hashlib
import json
import math
import random
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web

__all__ = [
    "SimConfig",
    "Simulator",
    "SimulatorThread",
    "instance_for_schema",
    "estimate_tokens",
    "main",
]

HOST = "127.0.0.1"  # never anything else: this is a test fixture, not a service


# ----------------------------------------------------------------------------- config
#: The per-request fault probabilities of :class:`SimConfig` (each also a CLI flag).
FAULT_PROBABILITIES = (
    "p_5xx",
    "p_hang",
    "p_malformed",
    "p_bad_body",
    "p_truncate",
    "p_refusal",
    "p_429",
    "batch_p_error",
    "p_odd_logprobs",
    "p_odd_usage",
    "p_empty_choices",
    "p_billed_garbage",
    "p_bad_grade",
    "p_slow_body",
)
OUTAGE_KINDS = ("refuse", "503", "429")


@dataclasses.dataclass
class SimConfig:
    """Everything that shapes the simulator's behaviour. Probabilities are per request."""

    latency: float = 0.3  # seconds, mean time to answer an admitted request
    jitter: float = 0.0  # uniform +-jitter*latency
    rpm: int | None = None  # requests per minute (None: unlimited)
    tpm: int | None = None  # tokens per minute, prompt + completion (None: unlimited)
    window: float = 60.0  # sliding window in seconds; limits scale to rpm*window/60
    p_5xx: float = 0.0
    p_hang: float = 0.0
    hang_first: int = 0  # the first N admitted requests hang (deterministic hang tests)
    hang_seconds: float = 120.0  # a hung request answers 504 (unpaid) after this, if still open
    p_malformed: float = 0.0  # 200 with usage whose *content* is not valid JSON (paid)
    p_bad_body: float = 0.0  # 200 whose HTTP body is not a chat completion (not paid)
    p_truncate: float = 0.0
    p_refusal: float = 0.0
    p_429: float = 0.0  # spurious rate-limit replies, independent of the limits
    spurious_retry_after: float = 0.5  # seconds announced with a spurious 429
    ratelimit_headers: bool = True  # False: no x-ratelimit-* headers (many proxies); 429s keep retry-after
    processing_header: bool = False  # True: 2xx replies state the server's own time, as OpenAI's openai-processing-ms
    model: str = "sim-model"
    api_key: str | None = None  # when set, other keys get 401
    supports_json_schema: bool = True  # False: json_schema requests get 400, like older servers
    supports_logprobs: bool = True
    judge: str = "random"  # "random" | "overlap": how the relevance prompt is graded (see above)
    judge_noise: float = 0.15  # judge="overlap": share of grades moved one step at random
    logprobs_fence: bool = False  # logprobs spell "```json\n...\n```" around the content (llama.cpp)
    batch_seconds: float = 1.0  # time from batch creation to completion
    batch_p_error: float = 0.0  # per batch line: an entry in the error file instead
    batch_paused: bool = False  # while True, batches stay "validating" (tests of resuming)
    max_lifetime: float = 600.0  # the server stops itself after this many seconds
    seed: int = 0
    # --- odd fields in good replies (independent draws per request)
    p_odd_logprobs: float = 0.0  # a logprob that is not a number ("-0.1x", null, "NaN")
    p_odd_usage: float = 0.0  # usage fields as strings, or no usage at all
    p_empty_choices: float = 0.0  # "choices": [] (paid: the server did the work)
    p_billed_garbage: float = 0.0  # a paid reply whose body is not clean JSON but states its usage
    p_bad_grade: float = 0.0  # the "grade" field out of scale (7, -1) or a string ("2")
    p_slow_body: float = 0.0  # a good reply (paid) whose body trickles out at slow_body_pace
    slow_body_pace: float = 1.0  # seconds per byte of a slow body
    reasoning_tokens: int = 0  # hidden reasoning billed per reply (completion_tokens_details)
    # --- outages and load
    outage_after: int | None = None  # admitted requests before the server goes down (once)
    outage_seconds: float = 5.0
    outage_kind: str = "refuse"  # "refuse" | "503" | "429"
    slots: int | None = None  # requests processed at once; the rest queue inside the server

    def __post_init__(self) -> None:
        for name in FAULT_PROBABILITIES:
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        exclusive = self.p_5xx + self.p_hang + self.p_bad_body + self.p_malformed + self.p_truncate + self.p_refusal
        if exclusive > 1.0 + 1e-12:
            raise ValueError(f"the per-request fault probabilities add up to {exclusive} > 1")
        if self.window <= 0 or self.max_lifetime <= 0:
            raise ValueError("window and max_lifetime must be positive")
        if self.outage_kind not in OUTAGE_KINDS:
            raise ValueError(f"outage_kind must be one of {OUTAGE_KINDS}, got {self.outage_kind!r}")
        if self.slots is not None and self.slots < 1:
            raise ValueError("slots must be at least 1")
        if self.judge not in ("random", "overlap") or not 0.0 <= self.judge_noise <= 1.0:
            raise ValueError("judge must be 'random' or 'overlap', judge_noise in [0, 1]")


# ----------------------------------------------------------------------------- helpers
def estimate_tokens(text: str) -> int:
    """The simulator's token count: about four characters per token."""
    return max(1, math.ceil(len(text) / 4))


def _message_text(messages: Any) -> str:
    parts: list[str] = []
    for m in messages or []:
        if not isinstance(m, Mapping):
            continue
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for p in content:
                if isinstance(p, Mapping) and isinstance(p.get("text"), str):
                    parts.append(p["text"])
    return "\n".join(parts)


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sha(obj: Any) -> str:
    return hashlib.sha256(_canonical(obj).encode("utf-8")).hexdigest()


def _duration(seconds: float) -> str:
    """``x-ratelimit-reset-*`` style durations: ``250ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1.0:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, secs = divmod(seconds, 60.0)
    secs = round(secs, 3)
    return f"{int(minutes)}m{secs:g}s" if minutes >= 1 else f"{secs:g}s"


_WORDS = (
    "the passage discusses topic query answer relevant information partly mentions directly "
    "explains context detail evidence document describes question addresses background related "
    "specific example fact claim statement source covers explicitly general aspect"
).split()


def _sentence(rng: random.Random, lo: int = 6, hi: int = 14) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(lo, hi))]
    return " ".join(words).capitalize() + "."


def _sentences_of(text: str) -> list[str]:
    out = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if len(s.strip()) > 20]
    return out[-40:]


# ----------------------------------------------------------------------------- schema instances
class _Gen:
    """Draws a valid instance of a JSON schema (the subset structured outputs use)."""

    def __init__(self, root: Mapping[str, Any], rng: random.Random, pool: list[str]) -> None:
        self.root = root
        self.rng = rng
        self.pool = pool
        self._pool_order: list[str] = []

    def _resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        seen = 0
        while "$ref" in schema and seen < 32:
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise ValueError(f"unsupported $ref {ref!r}")
            node: Any = self.root
            for part in ref.lstrip("#/").split("/"):
                if part:
                    node = node[part.replace("~1", "/").replace("~0", "~")]
            schema = node
            seen += 1
        return schema

    def gen(self, schema: Any, name: str = "", depth: int = 0) -> Any:
        rng = self.rng
        if schema is True or schema is None or schema == {}:
            return _sentence(rng, 3, 6)
        schema = self._resolve(schema)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if "enum" in schema:
            return copy.deepcopy(rng.choice(list(schema["enum"])))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [self._resolve(o) for o in schema[key]]
                non_null = [o for o in options if o.get("type") != "null"]
                return self.gen(rng.choice(non_null or options), name, depth)
        if "allOf" in schema:
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                merged.update(self._resolve(part))
            return self.gen(merged, name, depth)
        typ = schema.get("type")
        if isinstance(typ, list):
            non_null = [t for t in typ if t != "null"]
            typ = non_null[0] if non_null else "null"
        if typ is None:
            typ = "object" if "properties" in schema else "array" if "items" in schema else "string"
        if typ == "object":
            return self._object(schema, depth)
        if typ == "array":
            return self._array(schema, name, depth)
        if typ == "integer":
            if "minimum" in schema:
                lo = math.ceil(schema["minimum"])
            elif "exclusiveMinimum" in schema:
                lo = math.floor(schema["exclusiveMinimum"]) + 1
            else:
                lo = 0
            if "maximum" in schema:
                hi = math.floor(schema["maximum"])
            elif "exclusiveMaximum" in schema:
                hi = math.ceil(schema["exclusiveMaximum"]) - 1
            else:
                hi = lo + 10
            return rng.randint(lo, max(lo, hi))
        if typ == "number":
            lo = float(schema.get("minimum", 0.0))
            hi = float(schema.get("maximum", lo + 1.0))
            return round(rng.uniform(lo, hi), 3)
        if typ == "boolean":
            return rng.random() < 0.5
        if typ == "null":
            return None
        return self._string(schema, name)

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        props = schema.get("properties") or {}
        out: dict[str, Any] = {}
        for key, sub in props.items():
            out[key] = self.gen(sub, key, depth + 1)
        return out

    def _array(self, schema: Mapping[str, Any], name: str, depth: int) -> list[Any]:
        lo = int(schema.get("minItems", 0))
        hi = schema.get("maxItems")
        # plausible lengths: a few statements/claims, never an empty list unless forced
        want_lo, want_hi = (
            (2, 6) if re.search(r"statement|claim|fact|sentence|verdict", name, re.I) else (1, 4)
        )
        lo_eff = max(lo, min(want_lo, hi if hi is not None else want_lo))
        hi_eff = min(int(hi), want_hi) if hi is not None else want_hi
        hi_eff = max(hi_eff, lo_eff)
        n = self.rng.randint(lo_eff, hi_eff) if depth < 6 else lo
        items = schema.get("items", {})
        singular = name[:-1] if name.endswith("s") else name
        return [self.gen(items, singular, depth + 1) for _ in range(n)]

    def _string(self, schema: Mapping[str, Any], name: str) -> str:
        rng = self.rng
        fmt = schema.get("format")
        if fmt == "date-time":
            return "2024-01-01T00:00:00Z"
        if fmt == "date":
            return "2024-01-01"
        if re.search(r"statement|claim|fact|sentence", name, re.I) and self.pool:
            if not self._pool_order:  # distinct sentences until the pool is used up
                self._pool_order = rng.sample(self.pool, len(self.pool))
            s = self._pool_order.pop()
        elif re.search(r"reason|explan|justif|rational|comment", name, re.I):
            s = _sentence(rng, 8, 20)
        else:
            s = _sentence(rng, 2, 8)
        lo = int(schema.get("minLength", 0))
        hi = schema.get("maxLength")
        if hi is not None:
            s = s[: int(hi)]
        while len(s) < lo:
            s += " " + rng.choice(_WORDS)
        return s[: int(hi)] if hi is not None else s


def instance_for_schema(schema: Mapping[str, Any], seed: str | int, pool: list[str] | None = None) -> Any:
    """A valid instance of ``schema``, a pure function of ``(schema, seed, pool)``."""
    rng = random.Random(
        seed if isinstance(seed, int) else int(hashlib.sha256(str(seed).encode()).hexdigest()[:16], 16)
    )
    return _Gen(schema, rng, list(pool or [])).gen(schema)


def _schema_in_prompt(text: str) -> Mapping[str, Any] | None:
    """The first JSON object in the prompt that looks like a JSON schema (for json_object mode)."""
    dec = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("properties"), dict):
            return obj
    return None


# ----------------------------------------------------------------------------- synth_* prompts
# ``ragjudge synth``'s prompts (json_schema named ``synth_*``, fields ``query`` and ``answer``)
# get a query made of words of their passage(s), so the round-trip filter and the validity
# benchmark see something query-like rather than random words. A few replies misbehave on
# purpose (a copied span, an off-topic query, a vague query with a single passage word), so
# every filter has work. A ``{"queries": [...]}`` schema (synth_*.v2) gets ``maxItems`` of them. Deterministic: the
# PRNG is the one seeded by the request.
_SYNTH_PASSAGE = re.compile(r"<(passage(?:_[ab])?)>\n?(.*?)\n?</\1>", re.S)
_SYNTH_WORD = re.compile(r"[^\W\d_]{4,}")
_SYNTH_STOP = frozenset(
    "this that with from have which were been their there they them than then when where what "
    "about also into only other some such these those through while would could should after "
    "before being many more most much over under very your".split()
)


def _synth_reply(rf: Mapping[str, Any], user_text: str, rng: random.Random) -> str | None:
    js = rf.get("json_schema") if rf.get("type") == "json_schema" else None
    if not isinstance(js, Mapping) or not str(js.get("name", "")).startswith("synth_"):
        return None
    props = (js.get("schema") or {}).get("properties") or {}
    many = props.get("queries") if isinstance(props.get("queries"), Mapping) else None
    if many is not None:  # {"queries": [{query, answer}, ...]} (synth_*.v2)
        item = (many.get("items") or {}).get("properties") or {}
        if not {"query", "answer"} <= set(item):
            return None
        count = int(many.get("maxItems") or 3)
    elif {"query", "answer"} <= set(props):
        item, count = props, 1
    else:
        return None
    passages = [m.group(2).strip() for m in _SYNTH_PASSAGE.finditer(user_text)]
    if not passages:
        return None
    style = str(js["name"])[len("synth_"):]
    out = [_synth_candidate(style, passages, item, rng) for _ in range(count)]
    return json.dumps({"queries": out} if many is not None else out[0], ensure_ascii=False)


def _synth_candidate(style: str, passages: list[str], props: Mapping[str, Any],
                     rng: random.Random) -> dict[str, str]:
    picks: list[str] = []
    for text in passages:
        words = list(dict.fromkeys(w for w in _SYNTH_WORD.findall(text.lower()) if w not in _SYNTH_STOP))
        k = min(len(words), 2 if len(passages) > 1 else (2 if style == "keyword" else 3))
        if words:
            # longer words are rarer and more distinctive: what a searcher would type
            picks += sorted(rng.sample(words, min(len(words), 3 * k)), key=len, reverse=True)[:k]
    u = rng.random()
    if u < 0.07:  # copies a long span of the passage
        seq = passages[0].split()
        start = rng.randint(0, max(0, len(seq) - 10))
        query = " ".join(seq[start : start + 10])
    elif u < 0.14:  # off-topic: the round trip should catch it
        query = " ".join(rng.choice(_WORDS) for _ in range(4))
    elif u < 0.26 and picks:  # vague: one passage word in generic ones; a reading judge fails it
        query = " ".join([rng.choice(_WORDS) for _ in range(3)] + [picks[0]])
    elif style == "keyword":
        query = " ".join(picks)
    elif len(passages) > 1:
        query = f"how are {' '.join(picks[:2])} and {' '.join(picks[2:])} related?"
    else:
        lead = rng.choice(["what is", "how does", "why is", "what do we know about", "where is"])
        query = f"{lead} {' '.join(picks)}?"
    first = re.split(r"(?<=[.!?])\s+", passages[0].split("\n")[-1].strip())[0]
    out = {"query": query, "answer": first or passages[0][:200]}
    for name in ("query", "answer"):
        hi = (props.get(name) or {}).get("maxLength")
        if hi is not None:
            out[name] = out[name][: int(hi)]
    return out


# ----------------------------------------------------------------------------- judge="overlap"
# With ``SimConfig(judge="overlap")`` the pointwise relevance prompt (json_schema ``relevance``)
# is graded from the query's content words found in the passage, with ``judge_noise`` of the
# grades moved one step at random: a judge that reads the text, imperfectly. The default,
# ``judge="random"``, grades uniformly at random (a coin-flip judge: the worst case for any
# filter that relies on it).
_REL_QUERY = re.compile(r"<query>\n?(.*?)\n?</query>", re.S)
_REL_PASSAGE = re.compile(r"<passage>\n?(.*?)\n?</passage>", re.S)


def _overlap_grade(user_text: str, rng: random.Random, noise: float) -> int | None:
    q = _REL_QUERY.search(user_text)
    p = _REL_PASSAGE.search(user_text)
    if q is None or p is None:
        return None
    words = {w for w in _SYNTH_WORD.findall(q.group(1).lower()) if w not in _SYNTH_STOP}
    if not words:
        grade = 0
    else:
        found = len(words & set(_SYNTH_WORD.findall(p.group(1).lower()))) / len(words)
        grade = 3 if found >= 0.75 else 2 if found >= 0.5 else 1 if found >= 0.25 else 0
    if rng.random() < noise:
        grade = min(3, max(0, grade + rng.choice((-1, 1))))
    return grade


_DEFAULT_OBJECT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "grade": {"type": "integer", "minimum": 0, "maximum": 3},
    },
    "required": ["reasoning", "grade"],
}

_TOKEN_RE = re.compile(r"\d|[A-Za-z]+|\s+|[^\w\s]+|_")


def _logprobs(content: str, rng: random.Random, top: int) -> dict[str, Any]:
    """OpenAI-shaped ``logprobs.content``: digits are single tokens whose alternatives are digits."""
    items = []
    for tok in _TOKEN_RE.findall(content):
        if tok.isdigit():
            # a peaked distribution over 0-3 around the chosen digit, renormalised over the rest
            weights = {d: (8.0 if str(d) == tok else rng.uniform(0.05, 1.0)) for d in {0, 1, 2, 3, int(tok)}}
            total = sum(weights.values())
            alts = sorted(((str(d), math.log(w / total)) for d, w in weights.items()), key=lambda x: -x[1])
        else:
            lp = -rng.uniform(0.0, 0.2)
            alts = [(tok, lp)] + [
                (rng.choice(_WORDS), lp - rng.uniform(2.0, 6.0)) for _ in range(max(0, top - 1))
            ]
        chosen_lp = dict(alts).get(tok, alts[0][1])
        items.append(
            {
                "token": tok,
                "logprob": chosen_lp,
                "bytes": list(tok.encode("utf-8")),
                "top_logprobs": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))} for t, lp in alts[:top]
                ],
            }
        )
    return {"content": items, "refusal": None}


# ----------------------------------------------------------------------------- the server
class _Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = 0  # chat completion requests received
        self.admitted = 0  # passed the rate limits
        self.paid = 0  # 200 with usage
        self.rate_limited = 0  # 429 (limits + spurious)
        self.spurious_429 = 0
        self.errors_5xx = 0
        self.hangs = 0
        self.malformed = 0
        self.bad_bodies = 0
        self.truncated = 0
        self.refusals = 0
        self.client_errors = 0  # 400/401/404
        self.cancelled = 0  # client went away before the reply
        self.duplicate_paid = 0
        self.slow_bodies = 0
        # odd fields injected into good replies, and hidden reasoning tokens billed
        self.odd_logprobs = self.odd_usage = self.empty_choices = self.bad_grades = 0
        self.billed_garbage = 0
        self.reasoning_tokens = 0
        self.outages = self.outage_rejected = 0  # outages; requests dropped/refused/failed while down
        self.queued = 0  # requests that waited for a slot
        self.early_retries = 0  # same body back before the retry-after it was told
        self.inflight = 0
        self.max_inflight = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.batch_lines = 0
        self.batches_created = 0
        self.files_uploaded = 0
        self.first_admit: float | None = None
        self.last_admit: float | None = None
        self.paid_bodies: collections.Counter[str] = collections.Counter()
        self.retry_not_before: dict[str, float] = {}

    def snapshot(self) -> dict[str, Any]:
        d = {k: v for k, v in vars(self).items() if k not in ("paid_bodies", "retry_not_before")}
        d["distinct_paid_bodies"] = len(self.paid_bodies)
        span = (
            (self.last_admit - self.first_admit)
            if self.first_admit is not None and self.last_admit is not None
            else 0.0
        )
        d["admit_span_s"] = span
        return d


class _Window:
    """Sliding-window accounting of (time, amount) entries against a limit."""

    def __init__(self, limit: float | None, window: float) -> None:
        self.limit = limit
        self.window = window
        self.entries: collections.deque[tuple[float, float]] = collections.deque()
        self.used = 0.0

    def _expire(self, now: float) -> None:
        while self.entries and self.entries[0][0] <= now - self.window:
            self.used -= self.entries.popleft()[1]

    def wait_for(self, now: float, amount: float) -> float:
        """0 if ``amount`` fits now, else seconds until it will (inf if it never can)."""
        if self.limit is None:
            return 0.0
        self._expire(now)
        if self.used + amount <= self.limit:
            return 0.0
        if amount > self.limit:
            return math.inf
        need = self.used + amount - self.limit
        for t, a in self.entries:
            need -= a
            if need <= 0:
                return max(0.001, t + self.window - now)
        return self.window

    def add(self, now: float, amount: float) -> None:
        if self.limit is not None:
            self.entries.append((now, amount))
            self.used += amount

    def remaining(self, now: float) -> float:
        if self.limit is None:
            return math.inf
        self._expire(now)
        return max(0.0, self.limit - self.used)

    def reset_in(self, now: float) -> float:
        self._expire(now)
        return (self.entries[0][0] + self.window - now) if self.entries else 0.0


def _error(
    status: int, message: str, typ: str, code: str | None = None, headers: Mapping[str, str] | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": typ, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=dict(headers or {}))


class Simulator:
    """The simulator on the running event loop: ``async with Simulator(cfg) as sim``."""

    def __init__(self, config: SimConfig | None = None, *, port: int = 0) -> None:
        self.config = config or SimConfig()
        self.port = port
        self._stats = _Stats()
        self._rng = random.Random(self.config.seed)
        scale = self.config.window / 60.0
        self._req_window = _Window(self.config.rpm * scale if self.config.rpm else None, self.config.window)
        self._tok_window = _Window(self.config.tpm * scale if self.config.tpm else None, self.config.window)
        self._files: dict[str, dict[str, Any]] = {}
        self._seen: collections.Counter[str] = collections.Counter()
        self._batches: dict[str, dict[str, Any]] = {}
        self._runner: web.AppRunner | None = None
        self._lifetime_task: asyncio.Task[None] | None = None
        self._batch_tasks: set[asyncio.Task[None]] = set()
        self._counter = 0
        self.stopped = asyncio.Event()
        self.base_url = ""
        self._site: web.TCPSite | None = None
        self._down_until = 0.0
        self._outage_done = False
        self._slots = asyncio.Semaphore(self.config.slots) if self.config.slots else None

    # --- lifecycle
    async def start(self) -> Simulator:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.add_routes(
            [
                web.post("/v1/chat/completions", self._chat),
                web.get("/v1/models", self._models),
                web.post("/v1/files", self._file_upload),
                web.get("/v1/files/{file_id}", self._file_meta),
                web.get("/v1/files/{file_id}/content", self._file_content),
                web.post("/v1/batches", self._batch_create),
                web.get("/v1/batches", self._batch_list),
                web.get("/v1/batches/{batch_id}", self._batch_get),
                web.post("/v1/batches/{batch_id}/cancel", self._batch_cancel),
                web.get("/_sim/stats", self._stats_handler),
                web.post("/_sim/reset", self._reset_handler),
            ]
        )
        # handler_cancellation: a client that gives up (timeout) cancels the handler, so a
        # request the client abandoned is never counted as paid.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, self.port)
        await site.start()
        self._site = site
        self.port = self._runner.addresses[0][1]
        self.base_url = f"http://{HOST}:{self.port}/v1"
        self._lifetime_task = asyncio.get_running_loop().create_task(self._lifetime())
        return self

    async def _lifetime(self) -> None:
        try:
            await asyncio.sleep(self.config.max_lifetime)
        except asyncio.CancelledError:
            return
        print(f"simulator: max lifetime {self.config.max_lifetime}s reached, stopping", file=sys.stderr)
        await self.stop(_from_lifetime=True)

    async def stop(self, *, _from_lifetime: bool = False) -> None:
        if self._lifetime_task is not None and not _from_lifetime:
            self._lifetime_task.cancel()
        for t in list(self._batch_tasks):
            t.cancel()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        self.stopped.set()

    async def __aenter__(self) -> Simulator:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # --- introspection
    def stats(self) -> dict[str, Any]:
        """A snapshot of the counters (see the module docstring)."""
        return self._stats.snapshot()

    def reset_stats(self) -> None:
        self._stats.reset()

    async def _stats_handler(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _reset_handler(self, request: web.Request) -> web.Response:
        self.reset_stats()
        return web.json_response({"ok": True})

    # --- outages
    def _down(self, now: float) -> bool:
        return now < self._down_until

    def _maybe_go_down(self) -> None:
        cfg = self.config
        if cfg.outage_after is None or self._outage_done or self._stats.admitted < cfg.outage_after:
            return
        self._outage_done = True
        self._stats.outages += 1
        self._down_until = time.monotonic() + cfg.outage_seconds
        if cfg.outage_kind == "refuse":
            asyncio.get_running_loop().create_task(self._refuse_for(cfg.outage_seconds))

    async def _refuse_for(self, seconds: float) -> None:
        """Close the listener (new connections are refused), then listen again on the same port."""
        if self._site is not None:
            await self._site.stop()
        await asyncio.sleep(seconds)
        if self._runner is not None:
            site = web.TCPSite(self._runner, HOST, self.port, reuse_address=True)
            await site.start()
            self._site = site

    def _outage_reply(self, request: web.Request) -> web.StreamResponse:
        """What a request gets while the server is down."""
        self._stats.outage_rejected += 1
        kind = self.config.outage_kind
        if kind == "429":
            return _error(429, "Rate limit reached (simulated outage).", "requests", "rate_limit_exceeded",
                          {"retry-after": "1", "retry-after-ms": "1000"})
        if kind == "refuse" and request.transport is not None:
            request.transport.abort()  # a kept-alive connection: dropped, nothing is sent
        return _error(503, "Service unavailable (simulated outage).", "server_error")

    # --- chat completions
    def _auth(self, request: web.Request) -> web.Response | None:
        if self.config.api_key is None:
            return None
        if request.headers.get("Authorization", "") != f"Bearer {self.config.api_key}":
            self._stats.client_errors += 1
            return _error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        return None

    def _limit_headers(self, now: float) -> dict[str, str]:
        h: dict[str, str] = {}
        if not self.config.ratelimit_headers:
            return h
        for kind, w in (("requests", self._req_window), ("tokens", self._tok_window)):
            if w.limit is None:
                continue
            h[f"x-ratelimit-limit-{kind}"] = str(int(w.limit * 60.0 / self.config.window))
            h[f"x-ratelimit-remaining-{kind}"] = str(int(w.remaining(now)))
            h[f"x-ratelimit-reset-{kind}"] = _duration(w.reset_in(now))
        return h

    def _validate(self, body: Any) -> str | None:
        if not isinstance(body, dict):
            return "request body must be a JSON object"
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return "'messages' must be a non-empty array"
        if not isinstance(body.get("model"), str):
            return "'model' is required"
        if body.get("stream"):
            return "streaming is not supported by the simulator"
        rf = body.get("response_format")
        if rf is not None:
            if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
                return "invalid response_format"
            if rf["type"] == "json_schema":
                if not self.config.supports_json_schema:
                    return "response_format type json_schema is not supported by this server"
                js = rf.get("json_schema")
                if not isinstance(js, dict) or not isinstance(js.get("schema"), dict):
                    return "response_format.json_schema.schema is required"
        return None

    def _reply(self, body: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
        """Deterministic content for a request, and the logprobs object when asked for."""
        messages = body["messages"]
        rf = body.get("response_format") or {}
        text = _message_text(messages)
        key = _sha({"messages": messages, "response_format": rf})
        rng = random.Random(int(key[:16], 16))
        users = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
        pool = _sentences_of(_message_text(users[-1:]))
        synth = _synth_reply(rf, _message_text(users[-1:]), rng)  # synth_* prompts (ragjudge synth)
        if synth is not None:
            content = synth
        elif rf.get("type") == "json_schema":
            obj = instance_for_schema(rf["json_schema"]["schema"], key, pool)
            if self.config.judge == "overlap" and rf["json_schema"].get("name") == "relevance" \
                    and isinstance(obj, dict) and "grade" in obj:
                grade = _overlap_grade(_message_text(users[-1:]), rng, self.config.judge_noise)
                obj["grade"] = obj["grade"] if grade is None else grade
            content = json.dumps(obj, ensure_ascii=False)
        elif rf.get("type") == "json_object":
            schema = _schema_in_prompt(text) or _DEFAULT_OBJECT_SCHEMA
            content = json.dumps(instance_for_schema(schema, key, pool), ensure_ascii=False)
        else:
            schema = _schema_in_prompt(text) or _DEFAULT_OBJECT_SCHEMA
            obj = instance_for_schema(schema, key, pool)
            content = f"Here is my assessment.\n```json\n{json.dumps(obj, ensure_ascii=False, indent=2)}\n```"
        logprobs = None
        if body.get("logprobs") and self.config.supports_logprobs:
            top = int(body.get("top_logprobs") or 0)
            # llama.cpp (seen with xllamacpp 2026.10) returns the tokens of a fenced reply while
            # the content is the unwrapped object: imitate it on request.
            spelled = f"```json\n{content}\n```" if self.config.logprobs_fence else content
            logprobs = _logprobs(spelled, rng, max(0, min(top, 20)))
        return content, logprobs

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        st = self._stats
        st.requests += 1
        denied = self._auth(request)
        if denied is not None:
            return denied
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            st.client_errors += 1
            return _error(400, "We could not parse the JSON body of your request.", "invalid_request_error")
        problem = self._validate(body)
        if problem is not None:
            st.client_errors += 1
            return _error(400, problem, "invalid_request_error")
        body_key = _sha(body)
        now = time.monotonic()
        if self._down(now):
            return self._outage_reply(request)
        # Faults are drawn from a PRNG seeded by (seed, body, how often this body arrived), so a
        # run's faults do not depend on arrival order: the same job meets the same faults, and
        # a retry of a body gets a fresh draw.
        seen = self._seen[body_key]
        self._seen[body_key] = seen + 1
        frng = random.Random(f"{self.config.seed}:{body_key}:{seen}")
        nb = st.retry_not_before.pop(body_key, None)
        if nb is not None and now < nb - 0.05:  # 50 ms slack for clock granularity
            st.early_retries += 1

        content, logprobs = self._reply(body)
        prompt_tokens = estimate_tokens(_message_text(body["messages"]))
        completion_tokens = estimate_tokens(content)
        cost = prompt_tokens + completion_tokens

        # --- rate limits (a rejected request does not consume the window)
        wait = max(self._req_window.wait_for(now, 1), self._tok_window.wait_for(now, cost))
        spurious = wait == 0.0 and frng.random() < self.config.p_429
        if spurious:
            wait = self.config.spurious_retry_after
            st.spurious_429 += 1
        if wait > 0.0:
            st.rate_limited += 1
            headers = self._limit_headers(now)
            if math.isinf(wait):
                return _error(
                    429,
                    f"Request too large: {cost} tokens exceed the per-window limit.",
                    "tokens",
                    "rate_limit_exceeded",
                    headers,
                )
            st.retry_not_before[body_key] = now + wait
            headers["retry-after"] = str(max(1, math.ceil(wait))) if wait >= 1 else f"{wait:.3f}"
            headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
            which = "requests" if self._req_window.wait_for(now, 1) > 0 or spurious else "tokens"
            return _error(
                429,
                f"Rate limit reached for {which} (simulated). Please try again in {wait:.3f}s.",
                which,
                "rate_limit_exceeded",
                headers,
            )
        self._req_window.add(now, 1)
        self._tok_window.add(now, cost)
        st.admitted += 1
        self._maybe_go_down()
        st.first_admit = now if st.first_admit is None else st.first_admit
        st.last_admit = now
        headers = self._limit_headers(now)
        self._counter += 1
        headers["x-request-id"] = f"req_sim_{self._counter}"

        st.inflight += 1
        st.max_inflight = max(st.max_inflight, st.inflight)
        slot = self._slots
        acquired = False
        try:
            if slot is not None:
                # A server with few slots queues the rest: their latency grows with the load.
                if slot.locked():
                    st.queued += 1
                await slot.acquire()
                acquired = True
            return await self._answer(body, body_key, frng, headers, content, logprobs, prompt_tokens,
                                  request=request, arrived=arrived)
        except asyncio.CancelledError:
            st.cancelled += 1
            raise
        finally:
            if acquired and slot is not None:
                slot.release()
            st.inflight -= 1

    async def _answer(self, body: dict[str, Any], body_key: str, frng: random.Random,
                      headers: dict[str, str], content: str, logprobs: dict[str, Any] | None,
                      prompt_tokens: int, *, request: web.Request,
                      arrived: float | None = None) -> web.StreamResponse:
        """An admitted request: its fault draw, its latency, then the reply."""
        st = self._stats
        cfg = self.config
        u = frng.random()
        if u < cfg.p_5xx:
            st.errors_5xx += 1
            await asyncio.sleep(cfg.latency * frng.uniform(0.1, 1.0))
            status = frng.choice((500, 502, 503))
            return _error(
                status,
                "The server had an error while processing your request (simulated).",
                "server_error",
                None,
                headers,
            )
        u -= cfg.p_5xx
        if u < cfg.p_hang or st.admitted <= cfg.hang_first:
            st.hangs += 1
            await asyncio.sleep(cfg.hang_seconds)
            return _error(504, "Gateway timeout (simulated hang).", "server_error", None, headers)
        u -= cfg.p_hang
        delay = cfg.latency * (1.0 + cfg.jitter * frng.uniform(-1.0, 1.0))
        await asyncio.sleep(max(0.0, delay))
        if u < cfg.p_bad_body:
            # 200 whose body is not a chat completion (a broken proxy): no usage, not paid
            st.bad_bodies += 1
            return web.Response(
                text='{"choices": [{"message": {"content": "{\\"gra',
                content_type="application/json",
                headers=headers,
            )
        u -= cfg.p_bad_body

        finish = "stop"
        refusal = None
        if u < cfg.p_malformed:
            st.malformed += 1
            content = frng.choice(
                (
                    content[: max(1, len(content) // 2)],  # cut mid-object, yet "stop"
                    content.replace('"', "'"),
                    "Sure! " + content + " Hope this helps",
                    '{"grade": ' + "three, " + content[1:],
                )
            )
            logprobs = None
        elif (u := u - cfg.p_malformed) < cfg.p_truncate:
            st.truncated += 1
            content = content[: max(1, len(content) // 3)]
            finish = "length"
            logprobs = None
        elif u - cfg.p_truncate < cfg.p_refusal:
            st.refusals += 1
            refusal = "I'm sorry, but I can't help with that request."
            content = None  # type: ignore[assignment]
            logprobs = None
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        reasoning = max(0, cfg.reasoning_tokens)
        if isinstance(limit, int) and limit > 0:
            # Hidden reasoning comes first and counts against the same budget (as OpenAI's
            # max_completion_tokens): what is left is the room for the visible reply.
            reasoning = min(reasoning, limit)
            room = limit - reasoning
            if content and estimate_tokens(content) > room:
                # the reply does not fit the requested budget: cut, like a real server
                st.truncated += 1
                content = content[: room * 4]
                finish = "length"
                logprobs = None
        if content and frng.random() < cfg.p_bad_grade:
            content = self._bad_grade(content, frng)
        completion_tokens = estimate_tokens(content or refusal or "") + reasoning
        st.reasoning_tokens += reasoning
        usage: Any = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        }
        if frng.random() < cfg.p_odd_usage:
            st.odd_usage += 1
            usage = frng.choice((
                None,  # no usage reported at all
                {k: str(v) if isinstance(v, int) else v for k, v in usage.items()},  # "120"
                {"prompt_tokens": "n/a", "completion_tokens": None, "total_tokens": "?"},
            ))
        if logprobs and frng.random() < cfg.p_odd_logprobs:
            st.odd_logprobs += 1
            logprobs = copy.deepcopy(logprobs)
            odd = frng.choice(("-0.1x", None, "NaN", {"value": -0.1}))
            for item in logprobs["content"]:
                item["logprob"] = odd
                for alt in item.get("top_logprobs") or []:
                    alt["logprob"] = odd
        choices: list[dict[str, Any]] = [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "logprobs": logprobs,
                "finish_reason": finish,
            }
        ]
        if frng.random() < cfg.p_empty_choices:
            st.empty_choices += 1
            choices = []
        reply = {
            "id": f"chatcmpl-sim-{self._counter}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or cfg.model,
            "system_fingerprint": "fp_sim_1",
            "choices": choices,
            "usage": usage,
        }
        # Billed on what the server did, whatever the reply's usage field says.
        self._pay(body_key, prompt_tokens, completion_tokens)
        if frng.random() < cfg.p_billed_garbage:
            # Paid, and the body still states its usage, but it is no clean JSON: a byte that
            # is not UTF-8 in the text, or a proxy's stray event line after the object.
            st.billed_garbage += 1
            data = json.dumps(reply).encode()
            if content and frng.random() < 0.5:
                data = data.replace(b'"content": "', b'"content": "\xff', 1)
            else:
                data += b"\ndata: [DONE]\n"
            return web.Response(body=data, headers={**headers, "Content-Type": "application/json"})
        if frng.random() < cfg.p_slow_body:
            # Headers at once, then the body a byte at a time: every read is quick, the whole
            # reply takes minutes (a congested proxy, a stalled stream).
            st.slow_bodies += 1
            data = json.dumps(reply).encode()
            resp = web.StreamResponse(status=200, headers={**headers, "Content-Type": "application/json"})
            resp.content_length = len(data)
            await resp.prepare(request)
            try:
                for i in range(len(data)):
                    await resp.write(data[i : i + 1])
                    await asyncio.sleep(cfg.slow_body_pace)
                await resp.write_eof()
            except (ConnectionResetError, asyncio.CancelledError):
                pass
            return resp
        if cfg.processing_header and arrived is not None:
            # The server's own time from the request's arrival to its reply (queueing in the
            # server included), which a client's wall clock cannot tell from its own delays.
            headers["openai-processing-ms"] = str(round((time.monotonic() - arrived) * 1000.0))
        return web.json_response(reply, headers=headers)

    def _bad_grade(self, content: str, frng: random.Random) -> str:
        """The reply's "grade" out of the scale or as a string; other replies unchanged."""
        try:
            obj = json.loads(content)
        except ValueError:
            return content
        if not isinstance(obj, dict) or "grade" not in obj:
            return content
        self._stats.bad_grades += 1
        obj["grade"] = frng.choice((7, -1, str(obj["grade"])))
        return json.dumps(obj, ensure_ascii=False)

    def _pay(self, body_key: str, prompt_tokens: int, completion_tokens: int) -> None:
        st = self._stats
        st.paid += 1
        if st.paid_bodies[body_key]:
            st.duplicate_paid += 1
        st.paid_bodies[body_key] += 1
        st.prompt_tokens += prompt_tokens
        st.completion_tokens += completion_tokens

    async def _models(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": self.config.model, "object": "model", "created": 0, "owned_by": "simulator"}],
            }
        )

    # --- files
    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:24]}"

    def _file_object(self, f: Mapping[str, Any]) -> dict[str, Any]:
        return {k: f[k] for k in ("id", "object", "bytes", "created_at", "filename", "purpose", "status")}

    def _add_file(self, data: bytes, filename: str, purpose: str) -> dict[str, Any]:
        fid = self._new_id("file")
        f = {
            "id": fid,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
            "data": data,
        }
        self._files[fid] = f
        return f

    async def _file_upload(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        form = await request.post()
        upload = form.get("file")
        purpose = form.get("purpose")
        if upload is None or not hasattr(upload, "file") or not isinstance(purpose, str):
            return _error(400, "multipart fields 'file' and 'purpose' are required", "invalid_request_error")
        data = upload.file.read()
        self._stats.files_uploaded += 1
        f = self._add_file(data, upload.filename or "upload.jsonl", purpose)
        return web.json_response(self._file_object(f))

    async def _file_meta(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        f = self._files.get(request.match_info["file_id"])
        if f is None:
            return _error(404, "No such File object", "invalid_request_error", "file_not_found")
        return web.json_response(self._file_object(f))

    async def _file_content(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        f = self._files.get(request.match_info["file_id"])
        if f is None:
            return _error(404, "No such File object", "invalid_request_error", "file_not_found")
        return web.Response(body=f["data"], content_type="application/octet-stream")

    # --- batches
    async def _batch_create(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "invalid JSON body", "invalid_request_error")
        fid = body.get("input_file_id")
        endpoint = body.get("endpoint")
        if fid not in self._files:
            return _error(400, f"input file {fid!r} not found", "invalid_request_error", "file_not_found")
        if endpoint != "/v1/chat/completions":
            return _error(400, f"unsupported endpoint {endpoint!r}", "invalid_request_error")
        if body.get("completion_window") != "24h":
            return _error(400, "completion_window must be '24h'", "invalid_request_error")
        now = int(time.time())
        bid = self._new_id("batch")
        batch: dict[str, Any] = {
            "id": bid,
            "object": "batch",
            "endpoint": endpoint,
            "errors": None,
            "input_file_id": fid,
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": None,
            "expires_at": now + 86400,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "metadata": body.get("metadata"),
        }
        self._batches[bid] = batch
        self._stats.batches_created += 1
        task = asyncio.get_running_loop().create_task(self._run_batch(batch))
        self._batch_tasks.add(task)
        task.add_done_callback(self._batch_tasks.discard)
        return web.json_response(batch)

    def _parse_batch_input(self, batch: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The valid request lines and the validation errors (OpenAI fails the whole batch on any)."""
        data = self._files[batch["input_file_id"]]["data"].decode("utf-8")
        lines: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        seen: set[str] = set()
        for i, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                errors.append(
                    {
                        "code": "invalid_json_line",
                        "message": "line is not valid JSON",
                        "param": None,
                        "line": i,
                    }
                )
                continue
            cid = obj.get("custom_id")
            if not isinstance(cid, str) or cid in seen:
                errors.append(
                    {
                        "code": "duplicate_custom_id" if cid in seen else "missing_custom_id",
                        "message": "custom_id must be a unique string",
                        "param": "custom_id",
                        "line": i,
                    }
                )
                continue
            seen.add(cid)
            if obj.get("method") != "POST" or obj.get("url") != batch["endpoint"]:
                errors.append(
                    {
                        "code": "invalid_url",
                        "message": "method must be POST and url must match the batch endpoint",
                        "param": "url",
                        "line": i,
                    }
                )
                continue
            problem = self._validate(obj.get("body"))
            if problem is not None:
                errors.append({"code": "invalid_request", "message": problem, "param": "body", "line": i})
                continue
            lines.append(obj)
        if not lines and not errors:
            errors.append(
                {
                    "code": "empty_file",
                    "message": "the input file has no requests",
                    "param": None,
                    "line": None,
                }
            )
        return lines, errors

    async def _run_batch(self, batch: dict[str, Any]) -> None:
        step = self.config.batch_seconds / 3.0
        await asyncio.sleep(step)
        while self.config.batch_paused:
            await asyncio.sleep(0.02)
        if batch["status"] != "validating":
            return
        parsed, errors = self._parse_batch_input(batch)
        if errors:
            batch.update(
                status="failed", failed_at=int(time.time()), errors={"object": "list", "data": errors}
            )
            return
        batch.update(status="in_progress", in_progress_at=int(time.time()))
        batch["request_counts"]["total"] = len(parsed)
        await asyncio.sleep(step)
        out_lines: list[str] = []
        err_lines: list[str] = []
        for obj in parsed:
            if batch["status"] != "in_progress":
                break
            body = obj["body"]
            rid = self._new_id("batch_req")
            self._stats.batch_lines += 1
            if self._rng.random() < self.config.batch_p_error:
                err = {
                    "message": "The server had an error while processing your request (simulated).",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
                err_lines.append(
                    _canonical(
                        {
                            "id": rid,
                            "custom_id": obj["custom_id"],
                            "response": {"status_code": 500, "request_id": rid, "body": {"error": err}},
                            "error": None,
                        }
                    )
                )
                batch["request_counts"]["failed"] += 1
                continue
            content, logprobs = self._reply(body)
            pt, ct = estimate_tokens(_message_text(body["messages"])), estimate_tokens(content)
            reply = {
                "id": f"chatcmpl-sim-{rid}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model"),
                "system_fingerprint": "fp_sim_1",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "logprobs": logprobs,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": pt,
                    "completion_tokens": ct,
                    "total_tokens": pt + ct,
                    "prompt_tokens_details": {"cached_tokens": 0},
                },
            }
            self._pay(_sha(body), pt, ct)
            out_lines.append(
                _canonical(
                    {
                        "id": rid,
                        "custom_id": obj["custom_id"],
                        "response": {"status_code": 200, "request_id": rid, "body": reply},
                        "error": None,
                    }
                )
            )
            batch["request_counts"]["completed"] += 1
        if batch["status"] == "cancelling":
            batch.update(status="cancelled", cancelled_at=int(time.time()))
        else:
            batch.update(status="finalizing", finalizing_at=int(time.time()))
            await asyncio.sleep(step)
            batch.update(status="completed", completed_at=int(time.time()))
        if out_lines:
            batch["output_file_id"] = self._add_file(
                ("\n".join(out_lines) + "\n").encode(), f"{batch['id']}_output.jsonl", "batch_output"
            )["id"]
        if err_lines:
            batch["error_file_id"] = self._add_file(
                ("\n".join(err_lines) + "\n").encode(), f"{batch['id']}_error.jsonl", "batch_output"
            )["id"]

    async def _batch_get(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        batch = self._batches.get(request.match_info["batch_id"])
        if batch is None:
            return _error(404, "No such Batch object", "invalid_request_error", "batch_not_found")
        return web.json_response(batch)

    async def _batch_list(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        try:
            limit = max(1, min(100, int(request.query.get("limit", "20"))))
        except ValueError:
            return _error(400, "limit must be an integer", "invalid_request_error")
        data = sorted(self._batches.values(), key=lambda b: b["created_at"], reverse=True)[:limit]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": False,
            }
        )

    async def _batch_cancel(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        batch = self._batches.get(request.match_info["batch_id"])
        if batch is None:
            return _error(404, "No such Batch object", "invalid_request_error", "batch_not_found")
        if batch["status"] in ("validating", "in_progress"):
            batch.update(status="cancelling", cancelling_at=int(time.time()))
            if batch["in_progress_at"] is None:  # not started: cancel at once
                batch.update(status="cancelled", cancelled_at=int(time.time()))
        return web.json_response(batch)


class SimulatorThread:
    """The simulator on its own event loop in a daemon thread (for sync code and tests that run
    the client on another loop): ``with SimulatorThread(cfg) as sim: sim.base_url``."""

    def __init__(
        self, config: SimConfig | None = None, *, port: int = 0, start_timeout: float = 10.0
    ) -> None:
        self.config = config or SimConfig()
        self._port = port
        self._start_timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.sim: Simulator | None = None

    def start(self) -> SimulatorThread:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self.sim = Simulator(self.config, port=self._port)
                loop.run_until_complete(self.sim.start())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_until_complete(self.sim.stopped.wait())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="ragjudge-simulator", daemon=True)
        self._thread.start()
        if not ready.wait(self._start_timeout):
            raise RuntimeError("simulator did not start in time")
        if failure:
            raise failure[0]
        return self

    @property
    def base_url(self) -> str:
        assert self.sim is not None
        return self.sim.base_url

    def _call(self, fn: Any) -> Any:
        assert self._loop is not None

        async def wrapped() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(wrapped(), self._loop).result(10)

    def stats(self) -> dict[str, Any]:
        """Counters, read on the simulator's loop (consistent snapshot)."""
        assert self.sim is not None
        return self._call(self.sim.stats)

    def reset_stats(self) -> None:
        assert self.sim is not None
        self._call(self.sim.reset_stats)

    def stop(self) -> None:
        if (
            self.sim is not None
            and self._loop is not None
            and not self._loop.is_closed()
            and not self.sim.stopped.is_set()
        ):
            try:
                asyncio.run_coroutine_threadsafe(self.sim.stop(), self._loop).result(10)
            except RuntimeError:  # loop already closed by a max-lifetime stop
                pass
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> SimulatorThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ----------------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Loopback OpenAI-compatible simulator (127.0.0.1 only).")
    d = SimConfig()
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--latency", type=float, default=d.latency)
    p.add_argument("--jitter", type=float, default=d.jitter)
    p.add_argument("--rpm", type=int, default=None)
    p.add_argument("--tpm", type=int, default=None)
    p.add_argument(
        "--window", type=float, default=d.window, help="sliding window in seconds (limits scale with it)"
    )
    for name in FAULT_PROBABILITIES:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=0.0)
    p.add_argument("--hang-seconds", type=float, default=d.hang_seconds)
    p.add_argument("--hang-first", type=int, default=0)
    p.add_argument("--model", default=d.model)
    p.add_argument("--api-key", default=None)
    p.add_argument("--no-json-schema", dest="supports_json_schema", action="store_false")
    p.add_argument("--no-logprobs", dest="supports_logprobs", action="store_false")
    p.add_argument("--no-ratelimit-headers", dest="ratelimit_headers", action="store_false")
    p.add_argument("--processing-header", action="store_true",
                   help="2xx replies carry openai-processing-ms (the server's own time)")
    p.add_argument("--logprobs-fence", action="store_true", help="logprob tokens wrap the content in a code fence")
    p.add_argument("--batch-seconds", type=float, default=d.batch_seconds)
    p.add_argument("--max-lifetime", type=float, default=3600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reasoning-tokens", type=int, default=0, help="hidden reasoning tokens billed per reply")
    p.add_argument("--outage-after", type=int, default=None, help="admitted requests before an outage")
    p.add_argument("--outage-seconds", type=float, default=d.outage_seconds)
    p.add_argument("--outage-kind", choices=OUTAGE_KINDS, default=d.outage_kind)
    p.add_argument("--slots", type=int, default=None, help="requests processed at once (the rest queue)")
    p.add_argument("--slow-body-pace", type=float, default=d.slow_body_pace, help="seconds per byte of a slow body")
    p.add_argument("--spurious-retry-after", type=float, default=d.spurious_retry_after,
                   help="seconds a spurious 429 asks to wait (3600: an hour ahead)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(_parser().parse_args(argv))
    port = args.pop("port")
    config = SimConfig(**args)

    async def serve() -> None:
        sim = Simulator(config, port=port)
        await sim.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, sim.stopped.set)  # stop cleanly and print the counters
        print(sim.base_url, flush=True)
        try:
            await sim.stopped.wait()
        finally:
            await sim.stop()
            print(json.dumps(sim.stats()), file=sys.stderr, flush=True)

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
