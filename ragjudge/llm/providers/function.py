"""The ``function`` provider: a Python function answers each request from the prompt and its
variables, as pydantic-ai's ``FunctionModel`` or inspect_ai's mock model do. It is a model,
not a session: :class:`ragjudge.llm.fake.FakeLLM` is the real :class:`ragjudge.llm.LLM` over
this provider, so the cache, the keys, provenance, the budget, estimates and the repair
policy are the ones every real call goes through.

The function is ``(prompt, variables) -> answer`` (it may be ``async``), or a mapping from a
prompt's id (``"relevance"``) or name (``"relevance.v1"``) to an answer or such a function.
An answer is a ``dict`` (the reply object) or a ``str`` (the reply text); a :class:`Reply`
(either of those with label probabilities, usage, latency or a served model name); or a
:class:`Failure` or an exception instance. Failures take the path a real reply of that kind
takes: a refusal is a billed refusal, a truncated reply is cut at ``max_tokens`` (the session
retries it as it would any), an unparsable one gets repair turns, a malformed body is billed
and asked again; the other kinds (an exception's ``kind`` attribute, else ``other``) fail the
item unbilled. An exception *raised* by the function fails the item the same way, except
:class:`ragjudge.errors.LLMError`, which stops the run as a revoked key would.

The session tells the provider which prompt and variables a request renders
(:func:`answering`), since a rendered chat body no longer says so.
"""

from __future__ import annotations

import contextvars
import hashlib
import inspect
import json
import math
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import LLMError
from ..cost import Usage, estimate_tokens
from ..provenance import FailureKind
from .base import (
    BadBody,
    CallFailed,
    Completion,
    EmbeddingReply,
    ProviderSpec,
    RateInfo,
    Sent,
    Verdict,
)
from .base import Failure as AttemptFailure

if TYPE_CHECKING:  # pragma: no cover
    from ..endpoint import Endpoint
    from ..prompts import Prompt

__all__ = ["SPEC", "FunctionProvider", "FunctionModel", "Reply", "Failure", "FakeCall", "answering",
           "hashed_embedding"]

SPEC = ProviderSpec(
    name="function",
    about="a Python function answering from the prompt and its variables (FakeLLM: tests, offline runs)",
    key_env="",
    features=frozenset({"logprobs", "seed", "embeddings", "json_schema", "object"}),
)

#: Failure kinds whose replies came back and are billed, answered as such a reply.
_AS_REPLY = frozenset({FailureKind.REFUSAL, FailureKind.TRUNCATED, FailureKind.UNPARSABLE,
                       FailureKind.MALFORMED})


@dataclass(frozen=True)
class Reply:
    """A function's answer with the details a real reply carries.

    ``content``: the reply object (``dict``) or its text. ``probs``: probability per label
    (keys as in the prompt's ``labels``, e.g. ``{"3": 0.8, "2": 0.2}``), returned as the
    logprobs of the label's token, so the session reads them as it reads a server's.
    ``usage``: what the call is billed for (default: the estimated prompt tokens and ~4
    characters per reply token). ``latency``: seconds reported (default: as measured).
    """

    content: Mapping[str, Any] | str
    probs: Mapping[str, float] | None = None
    usage: Usage | None = None
    latency: float = 0.0
    served_model: str | None = None


@dataclass(frozen=True)
class Failure:
    """A failed call: ``kind`` (a :class:`FailureKind` or its value, e.g. ``"refusal"``) and
    the reason. ``usage``: what a reply-shaped failure (refusal, truncated, unparsable,
    malformed) is billed for (default: the estimated prompt and one reply token)."""

    kind: FailureKind | str = FailureKind.OTHER
    reason: str = ""
    usage: Usage | None = None


Answer = Mapping[str, Any] | str | Reply | Failure | BaseException
ReplyFn = Callable[["Prompt", Mapping[str, Any]], Answer | Awaitable[Answer]]


@dataclass(frozen=True)
class FakeCall:
    """One request the function answered (cache hits and shared waits are not calls)."""

    prompt: Prompt
    variables: dict[str, Any]
    messages: list[dict[str, str]]

    @property
    def prompt_id(self) -> str:
        return self.prompt.id

    @property
    def user(self) -> str:
        """The text of the last user message."""
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "user"), "")


_REQUEST: contextvars.ContextVar[tuple[Any, Mapping[str, Any]] | None] = contextvars.ContextVar(
    "ragjudge_function_request", default=None)


@contextmanager
def answering(prompt: Prompt, variables: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, requests sent by this task render ``prompt`` with ``variables``."""
    token = _REQUEST.set((prompt, variables))
    try:
        yield
    finally:
        _REQUEST.reset(token)


_WORD = re.compile(r"\w+", re.UNICODE)


def hashed_embedding(text: str, dim: int = 64) -> list[float]:
    """A deterministic unit vector of ``text``'s words (feature hashing): texts sharing words
    are similar, unrelated texts nearly orthogonal. The default embedding."""
    vec = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        h = hashlib.sha256(word.encode("utf-8")).digest()
        vec[int.from_bytes(h[:4], "big") % dim] += 1.0 if h[4] % 2 else -1.0
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0.0:
        vec[0], norm = 1.0, 1.0
    return [x / norm for x in vec]


class FunctionModel:
    """What the ``function`` provider calls (an :class:`~ragjudge.llm.endpoint.Endpoint`'s
    ``target``): the reply function or mapping, the embedding function, fixed token counts,
    and ``calls``, every request answered."""

    def __init__(self, reply: ReplyFn | Mapping[str, Any] | None = None, *,
                 embed: Callable[[str], Sequence[float] | Failure | BaseException] | None = None,
                 prompt_tokens: int | None = None, completion_tokens: int | None = None) -> None:
        self.reply = reply
        self.embed = embed if embed is not None else hashed_embedding
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.calls: list[FakeCall] = []

    def function(self, prompt: Prompt) -> Any:
        """The answer or function for ``prompt`` (an :class:`LLMError` when there is none)."""
        if self.reply is None:
            raise LLMError(f"FakeLLM has no reply for prompt {prompt.name}")
        if isinstance(self.reply, Mapping):
            for name in (prompt.name, prompt.id):
                if name in self.reply:
                    return self.reply[name]
            raise LLMError(f"FakeLLM has no reply for prompt {prompt.name} "
                           f"(it knows {', '.join(map(str, self.reply))})")
        return self.reply

    def usage(self, messages: Sequence[Mapping[str, Any]], text: str) -> Usage:
        prompt = self.prompt_tokens if self.prompt_tokens is not None else estimate_tokens(messages)
        completion = self.completion_tokens if self.completion_tokens is not None else len(text) // 4 + 1
        return Usage(1, prompt, 0, completion)


class Answered(Exception):  # noqa: N818 -- an answer, carried to classify()
    """A :class:`Failure` the function answered that fails the item unbilled."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


@dataclass
class _Sent(Sent):
    """The function's answer, already read: a completion, a billed bad body or vectors."""

    completion: Completion | None = None
    bad: BadBody | None = None
    vectors: EmbeddingReply | None = None


def _failure_of(answer: BaseException) -> Failure:
    kind = FailureKind.parse(getattr(answer, "kind", None)) or FailureKind.OTHER
    return Failure(kind, str(answer) or type(answer).__name__)


def label_logprobs(prompt: Prompt, text: str, probs: Mapping[str, float]) -> list[dict[str, Any]] | None:
    """The tokens of ``text`` with the label's token carrying ``probs`` as its alternatives:
    how a server that returns logprobs states them."""
    field = prompt.label_field
    if not field:
        return None
    matches = list(re.finditer(r'"' + re.escape(field) + r'"\s*:\s*"?', text))
    if not matches:
        return None
    pos = matches[-1].end()
    end = pos
    while end < len(text) and text[end] not in ',}" \n':
        end += 1
    alts: dict[str, float | None] = {}
    for label, p in probs.items():
        p = float(p)
        if math.isfinite(p) and p > 0:
            alts[str(label)] = math.log(p)
    if not alts or end == pos:
        return None
    own = text[pos:end]
    tokens = [{"token": text[:pos], "logprob": 0.0, "top_logprobs": {text[:pos]: 0.0}},
              {"token": own, "logprob": alts.get(own, -30.0), "top_logprobs": alts}]
    if end < len(text):
        tokens.append({"token": text[end:], "logprob": 0.0, "top_logprobs": {text[end:]: 0.0}})
    return tokens


class FunctionProvider:
    """The ``function`` provider (see the module docstring)."""

    spec = SPEC

    def __init__(self, endpoint: Endpoint, http_client: Any = None) -> None:
        target = endpoint.target
        self.model: FunctionModel = target if isinstance(target, FunctionModel) else FunctionModel(target)

    @property
    def endpoint(self) -> str:
        return "function"

    async def close(self) -> None:
        return None

    async def send_chat(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        request = _REQUEST.get()
        if request is None:
            raise LLMError("the function provider answers requests made through FakeLLM (it needs "
                           "the prompt and its variables); for your own model give LLM(...) the object")
        prompt, variables = request
        fn = self.model.function(prompt)
        messages = [dict(m) for m in body.get("messages", ())]
        self.model.calls.append(FakeCall(prompt, dict(variables), messages))
        answer = fn(prompt, variables) if callable(fn) else fn
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, BaseException):
            answer = _failure_of(answer)
        if isinstance(answer, Failure):
            return self._failed(answer, messages)
        if not isinstance(answer, Reply):
            answer = Reply(answer)
        content = answer.content
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        logprobs = label_logprobs(prompt, text, answer.probs) \
            if answer.probs is not None and body.get("logprobs") else None
        comp = Completion(text=text, finish_reason="stop", refusal=None,
                          usage=answer.usage or self.model.usage(messages, text), logprobs=logprobs,
                          system_fingerprint="function", model=answer.served_model or body.get("model"),
                          latency=answer.latency)
        return _Sent(b"", {}, 200, completion=comp)

    def _failed(self, failure: Failure, messages: list[dict[str, Any]]) -> Sent:
        kind = FailureKind.parse(failure.kind) or FailureKind.OTHER
        if kind not in _AS_REPLY:
            raise Answered(Failure(kind, failure.reason or str(kind)))
        usage = failure.usage or self.model.usage(messages, "")
        if kind is FailureKind.MALFORMED:
            return _Sent(b"", {}, 200, bad=BadBody(failure.reason or "malformed", usage))
        refusal = None
        text: str | None = failure.reason or "(no JSON)"
        finish = "stop"
        if kind is FailureKind.REFUSAL:
            refusal = re.sub(r"^refusal:\s*", "", failure.reason) or "declined by the model"
            text = None
        elif kind is FailureKind.TRUNCATED:
            text, finish = "", "length"
        comp = Completion(text=text, finish_reason=finish, refusal=refusal, usage=usage, logprobs=None,
                          system_fingerprint="function", model=None)
        return _Sent(b"", {}, 200, completion=comp)

    def chat_reply(self, sent: Sent, *, attempts: int) -> Completion:
        assert isinstance(sent, _Sent)
        if sent.bad is not None:
            raise sent.bad
        comp = sent.completion
        assert comp is not None
        comp.attempts = attempts
        comp.latency = comp.latency or sent.latency
        return comp

    async def send_embed(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        texts = [str(t) for t in body.get("input") or ()]
        vectors: list[list[float]] = []
        for t in texts:
            got = self.model.embed(t)
            if isinstance(got, BaseException):
                got = _failure_of(got)
            if isinstance(got, Failure):
                kind = FailureKind.parse(got.kind) or FailureKind.OTHER
                raise Answered(Failure(kind, got.reason or str(kind)))
            vectors.append([float(x) for x in got])
        usage = Usage(1, sum(len(t) // 4 + 1 for t in texts), 0, 0)
        return _Sent(b"", {}, 200, vectors=EmbeddingReply(vectors, usage, str(body.get("model"))))

    def embed_reply(self, sent: Sent, *, expected: int, attempts: int) -> EmbeddingReply:
        assert isinstance(sent, _Sent) and sent.vectors is not None
        sent.vectors.attempts = attempts
        sent.vectors.latency = sent.latency
        return sent.vectors

    def classify(self, exc: BaseException) -> Verdict:
        """Nothing here is worth a retry: the same function gives the same answer."""
        failure = exc.failure if isinstance(exc, Answered) else _failure_of(exc)
        reason = failure.reason
        final: Exception = exc if isinstance(exc, LLMError) else CallFailed(
            reason, kind=FailureKind.parse(failure.kind) or FailureKind.OTHER)
        return Verdict(AttemptFailure("other", reason, "function"), retry=False, reason=reason, final=final)

    def rate_info(self, headers: Mapping[str, str]) -> RateInfo:
        return RateInfo()
