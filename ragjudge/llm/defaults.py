"""Defaults of calling a model that the CLI's and the service's option lists show: the
declarations of :class:`ragjudge.llm.endpoint.Endpoint`'s fields (default, help, flag).

Kept apart from :mod:`.endpoint` so that declaring the LLM flags (every ``--help``, and
``evaluate`` run without ``--judge``) loads no model module, not even the dataclass machinery:
``Endpoint``'s fields take their defaults and help from :data:`ENDPOINT_OPTIONS`, and
``cli/_llm`` and ``serve`` make their flags from it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_CONCURRENCY", "Declared", "ENDPOINT_OPTIONS", "endpoint_flags"]

#: Requests in flight at most, by default. A ceiling, not a target: the runner's adaptive
#: limit starts at 1 and grows only while the server keeps up, and a server's rate limit is
#: kept by the pacer, not by this. 64, not 16: on a very busy machine our own loop holds
#: finished replies for 100-400 ms, so at 600 rpm 20-30 calls are counted in flight while the
#: server sees 12-20 (measured with 24 CPU-burning neighbours, benchmarks/bench_judge.py
#: --burners: 88.5% of the ceiling at 16, 90.0-95.5% at 32, 95.1-95.7% at 64).
DEFAULT_CONCURRENCY = 64


class Declared:
    """One field of the endpoint: its default and help, and its command-line ``flag``
    (``None``: library only) with ``metavar``, value ``kind`` and option ``group``
    (``endpoint``, or ``limits`` for the rate limits)."""

    __slots__ = ("default", "help", "flag", "metavar", "kind", "group")

    def __init__(self, default: Any, help: str, flag: str | None = None, metavar: str | None = None,  # noqa: A002
                 kind: type = str, group: str = "endpoint") -> None:
        self.default, self.help, self.flag = default, help, flag
        self.metavar, self.kind, self.group = metavar, kind, group


#: The endpoint's fields but ``model`` (each command names the model its own way), in order.
ENDPOINT_OPTIONS: dict[str, Declared] = {
    "provider": Declared("openai", "the model's API (a registered provider)", "--provider", "NAME"),
    "base_url": Declared(None, "the provider's endpoint, e.g. http://localhost:8000/v1 for an "
                         "OpenAI-compatible server", "--base-url", "URL"),
    "api_key": Declared(None, "the API key itself (library only: the CLI and the service read it "
                        "from a variable)"),
    "api_key_env": Declared(None, "environment variable holding the API key", "--api-key-env", "VAR"),
    "azure_endpoint": Declared(None, "Azure OpenAI resource endpoint", "--azure-endpoint", "URL"),
    "azure_api_version": Declared(None, "Azure OpenAI API version", "--azure-api-version", "V"),
    "timeout": Declared(60.0, "timeout of one attempt in seconds, the whole reply included",
                        "--timeout", "S", float),
    "max_attempts": Declared(6, "attempts per request on retryable errors", "--max-attempts", "N", int),
    "backoff_base": Declared(0.5, "first retry wait in seconds (full-jitter exponential backoff)",
                             kind=float),
    "max_wait": Declared(60.0, "longest wait between two attempts in seconds", kind=float),
    "patience": Declared(600.0, "how long an outage or a run of 429s may last before the run stops "
                         "(seconds; they do not use up --max-attempts)", "--patience", "S", float),
    "concurrency": Declared(DEFAULT_CONCURRENCY, "requests in flight at most (a ceiling: the runner "
                            "adapts below it)", "--concurrency", "N", int, "limits"),
    "rpm": Declared(None, "requests per minute cap (default: learned from the server's headers "
                    "and 429s)", "--rpm", "N", float, "limits"),
    "tpm": Declared(None, "tokens per minute cap", "--tpm", "N", float, "limits"),
    "weight": Declared(None, "share of the work among several endpoints (default: rpm, else 1)",
                       kind=float),
    "target": Declared(None, "the Python object the function and model-object providers call "
                       "(library only)", kind=object),
}


def endpoint_flags(group: str | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """``(field, flag, argparse keywords)`` of every endpoint field with a command-line flag
    (of one ``group``; ``None``: all), in order. ``--provider`` has its own action
    (``cli/_llm.add_provider_option``) and is left out."""
    out = []
    for name, d in ENDPOINT_OPTIONS.items():
        if d.flag is None or name == "provider" or (group is not None and d.group != group):
            continue
        kw: dict[str, Any] = {"dest": name, "default": d.default, "metavar": d.metavar,
                              "help": d.help + (f" (default {d.default:g})" if isinstance(d.default, (int, float))
                                                else "")}
        if d.kind is not str:
            kw["type"] = d.kind
        out.append((name, d.flag, kw))
    return out
