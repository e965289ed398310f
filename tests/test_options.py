"""The typed options values (SynthOptions, RagOptions, JudgeOptions): validated once with errors
naming the parameter, one default per field, and the same value from the library, the CLI and
the service."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from ragjudge.cli import build_parser
from ragjudge.cli._inputs import options_from_args
from ragjudge.cli.synth import synth_options
from ragjudge.errors import InputError
from ragjudge.judges import JudgeOptions
from ragjudge.rag import RagOptions
from ragjudge.server import models
from ragjudge.server.service import judge_options, rag_inputs, synth_inputs
from ragjudge.synth import SynthOptions

# Options a surface deliberately does not offer, with the reason.
NOT_ON_THE_SERVICE = {
    SynthOptions: {"prompts": "shipped prompts only", "judge_prompt": "shipped prompts only",
                   "depth": "no judge pool", "max_passage_chars": "library only"},
    RagOptions: {},
    JudgeOptions: {"combine": "no judge panels"},
}
NOT_ON_THE_CLI = {SynthOptions: {"max_passage_chars": "library only"}, RagOptions: {}, JudgeOptions: {}}
COMMAND = {SynthOptions: "synth", RagOptions: "rag", JudgeOptions: "judge"}
REQUEST = {SynthOptions: models.SynthRequest, RagOptions: models.RagRequest,
           JudgeOptions: models.JudgeRequest}
MINIMAL = {"synth": ["synth", "--corpus", "c.jsonl", "-n", "3"],
           "rag": ["rag", "s.jsonl", "-m", "hit@5"],
           "judge": ["judge", "--run", "r.trec"]}
ALL = (SynthOptions, RagOptions, JudgeOptions)


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


@pytest.mark.parametrize("cls, change, field", [
    (SynthOptions, {"oversample": 0.5}, "oversample"),
    (SynthOptions, {"oversample": float("nan")}, "oversample"),
    (SynthOptions, {"roundtrip_k": 0}, "roundtrip_k"),
    (SynthOptions, {"copy_span": -1}, "copy_span"),
    (SynthOptions, {"min_words": 1.5}, "min_words"),
    (SynthOptions, {"min_confidence": 1.5}, "min_confidence"),
    (SynthOptions, {"depth": 0}, "depth"),
    (SynthOptions, {"styles": 3}, "styles"),
    (RagOptions, {"grading": "pairwise"}, "grading"),
    (RagOptions, {"match": "fuzzy"}, "match"),
    (RagOptions, {"default_k": 0}, "default_k"),
    (RagOptions, {"default_k": True}, "default_k"),
    (RagOptions, {"embedding_model": " "}, "embedding_model"),
    (JudgeOptions, {"depth": -3}, "depth"),
    (JudgeOptions, {"combine": "median"}, "combine"),
    (JudgeOptions, {"prompt": ""}, "prompt"),
])
def test_a_bad_value_names_its_parameter(cls: Any, change: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        cls(**change)
    assert err.value.field == field
    with pytest.raises(InputError) as err2:  # a copy is validated again
        cls().replace(**change)
    assert err2.value.field == field


def test_unknown_names_are_one_error_naming_them() -> None:
    with pytest.raises(InputError, match="unknown option.*oversampel") as err:
        SynthOptions.from_mapping({"oversampel": 2})
    assert err.value.field == "oversampel"


def test_merge_keywords_and_options() -> None:
    base = SynthOptions(oversample=3)
    assert SynthOptions.merge(base, oversample=SynthOptions.default("oversample")) is base
    assert SynthOptions.merge(base, oversample=3) == base
    assert SynthOptions.merge(None, seed=7) == SynthOptions(seed=7)
    assert SynthOptions.merge(base, seed=7) == SynthOptions(oversample=3, seed=7)
    with pytest.raises(TypeError, match="oversample is given both"):
        SynthOptions.merge(base, oversample=2)
    with pytest.raises(TypeError, match="must be a SynthOptions"):
        SynthOptions.merge(RagOptions(), seed=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", ALL)
def test_the_cli_defaults_are_the_options_defaults(cls: Any) -> None:
    args = _parse(MINIMAL[COMMAND[cls]])
    assert (synth_options(args) if cls is SynthOptions else options_from_args(cls, args)) == cls()
    for name in cls.names():
        if name not in NOT_ON_THE_CLI[cls]:
            assert hasattr(args, name), f"ragjudge {COMMAND[cls]} has no flag for {name}"


@pytest.mark.parametrize("cls", ALL)
def test_the_service_defaults_and_help_are_the_options(cls: Any) -> None:
    fields = REQUEST[cls].model_fields
    for name in cls.names():
        if name in NOT_ON_THE_SERVICE[cls]:
            assert name not in fields
            continue
        assert name in fields, f"{REQUEST[cls].__name__} has no field {name}"
        assert fields[name].default == cls.default(name), name


def test_cli_and_service_build_the_same_synth_value() -> None:
    args = _parse([*MINIMAL["synth"], "--oversample", "2", "--roundtrip-k", "0", "--min-words", "5",
                   "--min-confidence", "0.7", "--seed", "4", "--styles", "question=1"])
    cli = synth_options(args)
    req = models.SynthRequest(corpus={"d1": "text"}, n=3, oversample=2, roundtrip_k=None, min_words=5,
                              min_confidence=0.7, seed=4, styles="question=1")
    assert synth_inputs(req, 10_000) == cli


def test_cli_and_service_build_the_same_rag_value() -> None:
    args = _parse([*MINIMAL["rag"], "-k", "7", "--grading", "pointwise", "--match", "text",
                   "--skip-invalid"])
    req = models.RagRequest(samples=[{"user_input": "q", "retrieved_contexts": ["a"]}],
                            metrics=["hit@5"], default_k=7, grading="pointwise", match="text",
                            skip_invalid=True)
    _, _, options = rag_inputs(req, 10_000)
    assert options == options_from_args(RagOptions, args)


def test_cli_and_service_build_the_same_judge_value() -> None:
    args = _parse([*MINIMAL["judge"], "--depth", "5", "--all-queries"])
    req = models.JudgeRequest(pairs=[], depth=5, all_queries=True)
    assert judge_options(req) == options_from_args(JudgeOptions, args)


@pytest.mark.parametrize("argv, flag", [
    ([*MINIMAL["synth"], "--oversample", "0.5"], "--oversample"),
    ([*MINIMAL["rag"], "-k", "0"], "-k"),
    ([*MINIMAL["judge"], "--depth", "0"], "--depth"),
])
def test_the_cli_names_the_flag(argv: list[str], flag: str) -> None:
    from ragjudge.cli import main

    cls = {"synth": SynthOptions, "rag": RagOptions, "judge": JudgeOptions}[argv[0]]
    build = synth_options if cls is SynthOptions else (lambda a: options_from_args(cls, a))
    with pytest.raises(InputError) as err:
        build(_parse(argv))
    assert err.value.field == flag
    assert main(argv) == 2


def test_the_service_names_the_field() -> None:
    with pytest.raises(InputError) as err:
        synth_inputs(models.SynthRequest.model_construct(corpus={"d": "t"}, n=1, oversample=0.5,
                                                         **{k: SynthOptions.default(k) for k in
                                                            ("styles", "examples", "seed", "roundtrip_k",
                                                             "min_grade", "min_confidence",
                                                             "copy_span", "min_words")}), 10_000)
    assert err.value.field == "oversample"


def test_library_keywords_and_options_agree() -> None:
    import inspect

    from ragjudge.rag import evaluate_samples
    from ragjudge.synth import synthesize

    for fn, cls in ((synthesize, SynthOptions), (evaluate_samples, RagOptions)):
        params = inspect.signature(fn).parameters
        assert "options" in params
        for name in cls.names():
            assert params[name].default == cls.default(name), (fn.__name__, name)


def test_a_bare_options_import_is_cheap() -> None:
    """The CLI's parser and the service's models read the options values: importing them must
    not load the pipelines (the LLM layer, BM25, the metrics)."""
    import subprocess
    import sys

    code = ("import sys, ragjudge.synth.options, ragjudge.rag.options, ragjudge.judges.options;"
            "print(sorted(m for m in sys.modules if m.startswith(('ragjudge.synth.', 'ragjudge.rag.',"
            " 'ragjudge.judges.')) and not m.endswith('.options')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- the LLM endpoint
# Endpoint fields with no flag, and why (each is still a keyword of LLM(...)).
ENDPOINT_NOT_ON_THE_CLI = {"model": "each command names the model its own way", "api_key": "a secret: read from a variable",
                           "backoff_base": "library only", "max_wait": "library only",
                           "weight": "in --endpoint URL,weight=W", "target": "a Python object"}
LLM_COMMANDS = {"judge": ["judge", "--run", "r.trec"], "rag": MINIMAL["rag"], "synth": MINIMAL["synth"],
                "retrieve": ["retrieve", "--corpus", "c.jsonl", "--queries", "q.tsv"],
                "evaluate": ["evaluate", "q.txt", "r.run", "--judge", "m"],
                "nuggets create": ["nuggets", "create", "-o", "n.jsonl"],
                "nuggets assign": ["nuggets", "assign", "-o", "a.jsonl", "n.jsonl", "answers.jsonl"],
                "nuggets cite": ["nuggets", "cite", "answers.jsonl"],
                "serve": ["serve"]}


def test_the_endpoint_names_its_bad_field() -> None:
    from ragjudge.llm import Endpoint

    for change, name in (({"timeout": float("nan")}, "timeout"), ({"max_attempts": 0}, "max_attempts"),
                         ({"patience": -1.0}, "patience"), ({"concurrency": 1.5}, "concurrency"),
                         ({"provider": "nope"}, "provider")):
        with pytest.raises(InputError) as err:
            Endpoint("m", **change)
        assert err.value.field == name
    assert Endpoint.default("timeout") == 60.0 and Endpoint.default("max_attempts") == 6
    assert "outage" in Endpoint.help("patience")


@pytest.mark.parametrize("command", sorted(LLM_COMMANDS))
def test_every_endpoint_field_reaches_each_command_with_its_default(command: str) -> None:
    from ragjudge.cli._llm import endpoint_fields
    from ragjudge.llm import Endpoint

    args = _parse(LLM_COMMANDS[command])
    for name in Endpoint.names():
        if name in ENDPOINT_NOT_ON_THE_CLI:
            continue
        assert hasattr(args, name), f"ragjudge {command} has no flag for the endpoint's {name}"
        if name != "provider":  # $RAGJUDGE_PROVIDER may set it
            assert getattr(args, name) == Endpoint.default(name), (command, name)
    given = endpoint_fields(args)
    assert Endpoint("m", **given) == Endpoint("m")


def test_the_cli_and_the_service_build_the_same_endpoint() -> None:
    from ragjudge.cli._llm import endpoint_from_args
    from ragjudge.cli.serve import settings_from_args
    from ragjudge.llm import Endpoint
    from ragjudge.server.settings import ServerSettings

    flags = ["--base-url", "http://llm.test/v1", "--timeout", "5", "--max-attempts", "2", "--patience", "30",
             "--concurrency", "3", "--rpm", "120", "--tpm", "9000", "--api-key-env", "MY_KEY"]
    cli = endpoint_from_args(_parse([*LLM_COMMANDS["rag"], "--model", "m", *flags]))
    settings = settings_from_args(_parse(["serve", "--model", "m", *flags, "--no-cache"]))
    settings.check()
    assert settings.endpoints == (cli,)  # the settings hold the endpoint itself
    (served,) = settings.llm_endpoints("m")
    assert served == cli == Endpoint("m", base_url="http://llm.test/v1", timeout=5.0, max_attempts=2,
                                     patience=30.0, concurrency=3, rpm=120.0, tpm=9000.0, api_key_env="MY_KEY")
    # passed to worker processes as JSON and back
    again = ServerSettings.from_json(settings.to_json())
    assert again == settings and again.llm_endpoints("m") == [served]


def test_the_service_settings_hold_endpoints_and_a_job_only_takes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` makes the endpoints once (each ``--endpoint`` parsed then); a job's LLM takes
    them with its model and its limit, and nothing after the flags parses an endpoint again."""
    pytest.importorskip("fastapi")
    import ragjudge.llm.endpoint
    from ragjudge.cli.serve import settings_from_args
    from ragjudge.llm import Endpoint
    from ragjudge.server.service import build_llm
    from ragjudge.server.settings import ANY_MODEL, ServerSettings

    settings = settings_from_args(_parse(["serve", "--concurrency", "8", "--no-cache", "--endpoint",
                                          "http://a.test/v1,rpm=60", "--endpoint", "http://b.test/v1,concurrency=4"]))
    assert settings.endpoints == (Endpoint(ANY_MODEL, base_url="http://a.test/v1", rpm=60.0, concurrency=8),
                                  Endpoint(ANY_MODEL, base_url="http://b.test/v1", concurrency=4))
    settings = ServerSettings.from_json(settings.to_json())  # as a worker process gets them

    def no_parsing(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an endpoint was parsed after the settings were made")

    monkeypatch.setattr(ragjudge.llm.endpoint, "parse_endpoint", no_parsing)
    llm = build_llm(settings, models.ModelSettings(model="j", concurrency=6), check_key=False)
    assert [c.endpoint for c in llm.callers] == [
        Endpoint("j", base_url="http://a.test/v1", rpm=60.0, concurrency=6),
        Endpoint("j", base_url="http://b.test/v1", concurrency=4)]
    assert settings.llm_endpoints("j") == [e.replace(model="j") for e in settings.endpoints]
    # a library caller gives Endpoint values, never --endpoint strings
    with pytest.raises(TypeError, match="Endpoint"):
        ServerSettings(endpoints=("http://a.test/v1,rpm=60",))  # type: ignore[arg-type]
    assert ServerSettings(model="m").endpoints == (Endpoint("m"),)


def test_serve_flags_carry_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of ``serve``'s flags for a field of ServerSettings defaults to that field's default
    (stated once, on the field): ``serve`` with no flags is ``ServerSettings()``."""
    import dataclasses

    from ragjudge.cli.serve import settings_from_args
    from ragjudge.server.settings import ServerSettings

    for var in ("RAGJUDGE_MODEL", "RAGJUDGE_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    args = _parse(["serve"])
    flagged = [f for f in dataclasses.fields(ServerSettings) if hasattr(args, f.name)]
    assert {f.name for f in flagged} >= {"host", "port", "token_env", "workers", "max_body_bytes", "max_pairs",
                                         "client_concurrency", "body_seconds", "max_jobs", "lease_seconds",
                                         "drain_seconds"}
    for f in flagged:
        if f.name != "endpoints":  # the flag's list of strings; the field's Endpoint values
            assert getattr(args, f.name) == f.default, f.name
    assert settings_from_args(args) == ServerSettings()


@pytest.mark.parametrize("argv, flag", [
    (["--timeout", "nan"], "--timeout"), (["--max-attempts", "0"], "--max-attempts"),
    (["--patience", "-1"], "--patience"), (["--concurrency", "0"], "--concurrency"),
])
def test_a_bad_endpoint_flag_is_named_by_the_cli_and_serve(argv: list[str], flag: str) -> None:
    from ragjudge.cli._llm import llm_from_args
    from ragjudge.cli.serve import settings_from_args

    with pytest.raises(InputError) as err:
        llm_from_args(_parse([*LLM_COMMANDS["rag"], "--model", "m", *argv]))
    assert err.value.field == flag
    with pytest.raises(InputError) as err2:
        settings_from_args(_parse(["serve", *argv, "--no-cache"]))
    assert err2.value.field == flag


def test_the_library_takes_the_endpoint_fields_as_keywords() -> None:
    import inspect

    from ragjudge.llm import LLM, Endpoint

    params = inspect.signature(LLM).parameters
    for name in Endpoint.names():
        assert name in params, name
    llm = LLM("m", base_url="http://llm.test/v1", api_key="k", timeout=5, patience=30, cache=False)
    assert (llm.endpoint.timeout, llm.endpoint.patience, llm.endpoint.max_attempts) == (5, 30, 6)
    with pytest.raises(TypeError, match="timeuot"):
        LLM("m", base_url="http://llm.test/v1", api_key="k", timeuot=5, cache=False)
