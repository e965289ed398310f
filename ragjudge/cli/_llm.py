"""LLM options shared by every subcommand that calls a model (``judge``, ``rag``, ``synth``,
``evaluate --judge``, ``retrieve``).

One definition, so the flags, defaults and checks of the commands cannot drift apart; the flags
are read into one :class:`ragjudge.llm.Endpoint` and one :class:`ragjudge.llm.LLM`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import InputError
from ..llm.defaults import ENDPOINT_OPTIONS, endpoint_flags
from ._inputs import flags_named

# Deferred imports: ragjudge.llm (its sessions, endpoints and providers). `evaluate` declares
# these flags and calls no model unless --judge is given: the LLM stack loads when a command
# builds an endpoint or a session, or shows the providers' help.

__all__ = ["add_llm_options", "add_provider_option", "add_endpoint_options", "endpoint_fields", "llm_from_args",
           "endpoint_from_args", "endpoints_from_args", "DEFAULT_PROVIDER"]

#: ``--provider``'s default (unless ``$RAGJUDGE_PROVIDER`` names another), as the endpoint declares it.
DEFAULT_PROVIDER: str = ENDPOINT_OPTIONS["provider"].default


class _ProviderFlag(argparse.Action):
    """``--provider NAME``: the registry is read when the flag is given or its help is shown,
    not when the parser is built, so a command that declares the LLM flags but is run without
    a model (``evaluate`` without ``--judge``) does not load every provider module."""

    def __init__(self, option_strings: list[str], dest: str, *, help_parts: tuple[str, str, bool],
                 **kw: Any) -> None:
        self.help_parts = help_parts
        super().__init__(option_strings, dest, **kw)

    @property  # type: ignore[override]
    def help(self) -> str:
        from ..llm.providers import provider_spec

        before, after, about = self.help_parts
        names = _url_providers()
        listed = "; ".join(f"{n}: {provider_spec(n).about}" for n in names) if about else ", ".join(names)
        return before + listed + after

    @help.setter
    def help(self, value: object) -> None:  # argparse assigns None; the text is built above
        pass

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if values not in _url_providers():
            parser.error(f"argument {option_string}: invalid choice: {values!r} "
                         f"(choose from {', '.join(_url_providers())})")
        setattr(namespace, self.dest, values)


def _url_providers() -> list[str]:
    """The providers an endpoint's address reaches (those calling a Python object take it
    from the library: ``LLM(obj)``)."""
    from ..llm.providers import provider_names, provider_spec

    return [n for n in provider_names() if "object" not in provider_spec(n).features]


def add_provider_option(group: Any, before: str, after: str, *, about: bool = False) -> None:
    """Add ``--provider NAME`` (default :data:`DEFAULT_PROVIDER`, or ``$RAGJUDGE_PROVIDER``); its
    help is ``before`` + the registered names (with what each is, if ``about``) + ``after``."""
    group.add_argument("--provider", default=os.environ.get("RAGJUDGE_PROVIDER") or DEFAULT_PROVIDER,
                       metavar="NAME", action=_ProviderFlag, help_parts=(before, after, about))


def add_llm_options(p: Any, *, model: bool = True, group: Any = None,
                    skip: tuple[str, ...] = ()) -> None:
    """Add the "model and endpoint" and "rate limits and cost" option groups to ``p``; with
    ``group``, every option goes into that one group instead. ``model=False`` leaves ``--model``
    out (a command that names the model its own way: ``evaluate --judge MODEL``); ``skip``
    leaves out flags the command uses for something else (``evaluate``'s ``--seed`` is its
    bootstrap seed): the LLM then takes their defaults."""
    ep = group if group is not None else p.add_argument_group("model and endpoint")
    rl = group if group is not None else None
    skipped = set(skip)

    class _Only:  # adds an option unless the command skips it
        def __init__(self, target: Any) -> None:
            self.target = target

        def add_argument(self, *flags: str, **kw: Any) -> None:
            if not skipped.intersection(flags):
                self.target.add_argument(*flags, **kw)

    ep = _Only(ep)
    if model:
        ep.add_argument("--model", default=os.environ.get("RAGJUDGE_MODEL"), metavar="M",
                        help="model name (or $RAGJUDGE_MODEL)")
    add_provider_option(ep, "the model's API: ", f" (default {DEFAULT_PROVIDER}, or $RAGJUDGE_PROVIDER)", about=True)
    ep.add_argument("--endpoint", dest="endpoints", action="append", metavar="URL[,KEY=VALUE...]",
                    help="spread the work over several endpoints serving the same model; repeat: "
                         "URL, then optional key_env=VAR, rpm=N, tpm=N, concurrency=N, weight=W, "
                         "provider=NAME (the rest as the flags say); one query's requests stay on one "
                         "endpoint, a failing endpoint is drained and its work moves to the others")
    add_endpoint_options(ep, "endpoint")
    ep.add_argument("--seed", type=int, default=0, help="sampling seed (default 0; temperature is 0)")
    ep.add_argument("--max-tokens", type=int, metavar="N",
                    help="completion token budget per call (default: the prompt's max_tokens; "
                         "part of the cache key)")
    ep.add_argument("--no-logprobs", action="store_true",
                    help="do not request logprobs (no per-grade probabilities)")
    rl = _Only(rl if rl is not None else p.add_argument_group("rate limits and cost"))
    add_endpoint_options(rl, "limits")
    rl.add_argument("--cache", metavar="PATH",
                    help="SQLite cache file, or a postgresql:// URL shared by several hosts (default "
                         "$RAGJUDGE_CACHE or ~/.cache/ragjudge/judgments.sqlite)")
    rl.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    rl.add_argument("--dry-run", action="store_true",
                    help="print calls, estimated tokens and cost; send nothing")
    rl.add_argument("--max-cost", type=float, metavar="USD",
                    help="stop starting new calls before spending more than this; keeps what is done")
    rl.add_argument("--prices", metavar="FILE",
                    help='JSON price overrides {"model": {"input": x, "output": y, "cached_input": z}} '
                         "(USD/1M tokens)")
    _Only(group if group is not None else p).add_argument("--no-progress", action="store_true",
                                                          help="no progress bar")


def add_endpoint_options(group: Any, which: str) -> None:
    """The flags of one group of the endpoint's fields (``endpoint``: address, key, timeouts;
    ``limits``: concurrency and rate caps), made from their declarations
    (:data:`ragjudge.llm.defaults.ENDPOINT_OPTIONS`): ``serve`` adds the same."""
    for _name, flag, kw in endpoint_flags(which):
        group.add_argument(flag, **kw)


def endpoint_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The endpoint's fields the parsed flags give (by their declared flags)."""
    fields = {name: getattr(args, name) for name, _flag, _kw in endpoint_flags() if hasattr(args, name)}
    fields["provider"] = getattr(args, "provider", DEFAULT_PROVIDER)
    return fields


def endpoints_from_args(args: argparse.Namespace, *, model: str | None = None) -> list[Any]:
    """The endpoints the flags describe: one, or one per ``--endpoint`` (``model``: instead of
    ``--model``)."""
    base = endpoint_from_args(args, model=model)
    specs = getattr(args, "endpoints", None) or []
    if not specs:
        return [base]
    if args.base_url:
        raise InputError("give either --base-url or --endpoint (repeated), not both", field="--endpoint")
    from ..llm.endpoint import parse_endpoint

    with flags_named("endpoint"):
        return [parse_endpoint(spec, base) for spec in specs]


def endpoint_from_args(args: argparse.Namespace, *, model: str | None = None) -> Any:
    """The :class:`ragjudge.llm.Endpoint` the flags describe (errors name the flag; ``model``:
    instead of ``--model``)."""
    from ..llm import Endpoint

    try:
        return Endpoint(model or args.model, **endpoint_fields(args))
    except InputError as exc:
        if exc.field:  # the library names the field; the user typed the flag
            exc.field = "--" + exc.field.replace("_", "-")
        raise


def llm_from_args(args: argparse.Namespace) -> Any:
    """Check the shared options and build the :class:`ragjudge.llm.LLM` they describe."""
    from ..llm import LLM, check_finite

    if not args.model:
        raise InputError("no model given (pass --model M or set RAGJUDGE_MODEL)", field="--model")
    # NaN and infinity parse as floats but would silently disable the limit they set (the
    # endpoint's own fields are checked by Endpoint, their errors naming the flag).
    check_finite(args.max_tokens, "--max-tokens", integer=True)
    check_finite(args.max_cost, "--max-cost", positive=False)
    # llama.cpp reads a negative seed as "random": the answer would not be reproducible.
    seed = getattr(args, "seed", 0)
    check_finite(seed, "--seed", positive=False, integer=True)
    if args.no_cache and args.cache:
        raise InputError("--cache and --no-cache contradict each other", field="--no-cache")
    endpoints = endpoints_from_args(args)
    try:
        return LLM(
            endpoints if len(endpoints) > 1 else endpoints[0],
            cache=False if args.no_cache else (args.cache or True),
            prices=args.prices,
            max_cost=args.max_cost,
            seed=seed,
            max_tokens=args.max_tokens,
            logprobs=not args.no_logprobs,
            # A dry run sends nothing, so it must not demand an API key.
            check_key=not args.dry_run,
        )
    except InputError as exc:
        if exc.field == "max_cost":  # the library names the parameter; here it is a flag
            raise InputError(f"{exc.message}; pass --prices FILE", source=exc.source,
                             field="--max-cost") from None
        raise
