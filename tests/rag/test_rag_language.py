"""A declared language: sentence rules and prompt variants, end to end on the simulator (a
Spanish collection through synth, then context recall on its samples)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _loopback import simulator_thread

from ragjudge.cli import main
from ragjudge.errors import InputError
from ragjudge.llm.prompts import load_prompt, localized_name
from ragjudge.rag import RagOptions, read_samples
from ragjudge.rag.metrics.base import Setup, split_sentences

SRA = "La Sra. García vive en Madrid desde 2010. Trabaja en el Hospital de la Paz."
DOCS = {
    "es-1": "El Teide, en Tenerife, es el pico más alto de España con 3715 metros y un volcán todavía activo.",
    "es-2": "La Sra. García dirige desde 2010 el observatorio del Teide, donde estudia la actividad sísmica.",
    "es-3": "El río Ebro nace en Cantabria y desemboca en el mar Mediterráneo formando un amplio delta.",
    "es-4": "La Alhambra de Granada fue un palacio y fortaleza nazarí construido entre los siglos XIII y XIV.",
    "es-5": "El Camino de Santiago termina en la catedral de Santiago de Compostela, en Galicia, tras cientos de kilómetros.",
    "es-6": "Las cuevas de Altamira, en Cantabria, guardan pinturas rupestres de bisontes de hace unos quince mil años.",
}


def test_sentence_rules_follow_the_declared_language() -> None:
    assert split_sentences(SRA) == ["La Sra.", "García vive en Madrid desde 2010.",
                                    "Trabaja en el Hospital de la Paz."]  # English rules
    assert split_sentences(SRA, "es") == ["La Sra. García vive en Madrid desde 2010.",
                                          "Trabaja en el Hospital de la Paz."]
    assert Setup(language="es").sentences(SRA) == split_sentences(SRA, "es")


def test_prompt_variants_are_ordinary_prompts_with_their_own_id_and_sha() -> None:
    en, es = load_prompt("context_recall.v2"), load_prompt("context_recall.v2", language="es")
    assert es.name == "context_recall.es.v2" and es.sha256 != en.sha256
    assert es.output_schema == en.output_schema  # same reply, so the same parsing
    # no Spanish variant shipped: the English prompt (which answers in the data's language)
    assert localized_name("answer_relevance.v1", "es") == "answer_relevance.v1"
    assert localized_name("context_recall.v2", "en") == "context_recall.v2"
    with pytest.raises(InputError, match="language"):
        localized_name("context_recall.v2", "Spanish")
    with pytest.raises(InputError, match="language"):
        RagOptions(language="ES")


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with simulator_thread(latency=0.0) as s:
        yield s


@pytest.mark.slow  # a loopback server, ~10 s
def test_spanish_collection_through_synth_and_context_recall(sim: Any, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "es.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "text": v}, ensure_ascii=False) + "\n"
                              for k, v in DOCS.items()), encoding="utf-8")
    common = ["--model", "sim-model", "--base-url", sim.base_url, "--cache", str(tmp_path / "c.sqlite"),
              "--no-progress"]
    assert main(["synth", "--corpus", str(corpus), "-n", "2", "--styles", "question=1",
                 "--language", "es", "--oversample", "3", "--allow-fewer", "-o", str(tmp_path / "out"),
                 *common]) == 0
    capsys.readouterr()
    records = [json.loads(x) for x in (tmp_path / "out" / "synth.jsonl").read_text().splitlines()]
    generated = [r for r in records if r["status"] != "unused"]
    assert generated and all(r["generation"]["prompt_id"] == "synth_question.es" for r in generated)
    # the samples synth wrote, with a Spanish reference, scored by context recall in Spanish
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"id": "s1", "user_input": "¿Quién dirige el observatorio?",
                                   "retrieved_contexts": [DOCS["es-2"], DOCS["es-1"]],
                                   "reference": SRA}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert main(["rag", str(samples), "-m", "context_recall", "--language", "es", "-f", "json",
                 *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["language"] == "es"
    assert out["aggregates"][0]["mean"] in (0.0, 0.5, 1.0)  # two verdicts, not three
    # the same through the library: the Spanish sentences and the Spanish prompt's provenance
    from ragjudge import LLM
    from ragjudge.rag import evaluate_samples_sync

    llm = LLM("sim-model", base_url=sim.base_url, cache=str(tmp_path / "c.sqlite"))
    report = evaluate_samples_sync(samples, ["context_recall"], judge=llm, language="es")
    (score,) = report["context_recall"]
    assert [st for st, _ in score.detail["statements"]] == split_sentences(SRA, "es")
    assert report.settings["language"] == "es"
    assert read_samples(samples)[0].reference == SRA
