"""A small topical corpus and a fake model for the synthetic-collection tests: queries built from
a passage's first words, relevance graded by word overlap (in process or as an HTTP fake)."""

from __future__ import annotations

import json
import re
from typing import Any

import respx
from _llm_fakes import completion, grade_logprobs, ok

from ragjudge.llm.fake import FakeLLM, Reply
from ragjudge.synth.text import tokens

# ----------------------------------------------------------------------------- a small corpus
TOPICS = {
    "volcano": "Volcanoes erupt molten rock called lava from magma chambers beneath the crust of the planet",
    "coffee": "Coffee beans are roasted seeds of the coffea plant grown in tropical highlands of Ethiopia",
    "bees": "Honey bees gather nectar from flowers and store it as honey inside wax combs of the hive",
    "bikes": "Bicycles in the Netherlands outnumber people and cities build separated cycle paths everywhere",
    "bread": "Sourdough bread rises with wild yeast and lactic bacteria kept alive in a flour starter culture",
    "heart": "The human heart pumps blood through arteries and veins with four chambers and valves inside",
}


def make_corpus(per_topic: int = 3) -> dict[str, str]:
    out = {}
    for topic, text in TOPICS.items():
        for i in range(per_topic):
            out[f"{topic}-{i}"] = f"{text}. Fact number {i} about {topic}: detail {topic}{i} matters here."
    return out


def model_answer(name: str, passages: list[str], several: bool, query: str = "",
                 passage: str = "") -> tuple[Any, dict[str, float] | None]:
    """What the fake model answers, as (reply object or broken text, label probabilities):
    synth_* prompts get a query built from the passage's first words (a broken reply to
    question prompts on bicycles); relevance is graded by word overlap."""
    if name.startswith("synth_"):
        if "bicycles" in passages[0].lower() and name == "synth_question":
            return "I cannot write JSON today.", None
        words = tokens(passages[0])
        q = " ".join(words[:4]) if name == "synth_keyword" else f"what about {' '.join(words[:3])}?"
        if len(passages) > 1:
            q = f"how are {words[0]} and {tokens(passages[1])[0]} {tokens(passages[1])[1]} related?"
        answer = passages[0].split(".")[0] + "."
        if not several:  # a v1 prompt: one candidate per call
            return {"query": q, "answer": answer}, None
        # v2: three candidates; on coffee passages the first shares too few words with its
        # passage for the judge (grade 1), so its sibling must be judged next
        first = {"query": q, "answer": answer}
        if "coffee" in passages[0].lower():
            first = {"query": f"{words[1]} {words[2]} for breakfast", "answer": answer}
        second = {"query": f"tell me about {' '.join(words[3:6])}", "answer": answer}
        third = {"query": f"{' '.join(words[6:9])} explained", "answer": answer}
        return {"queries": [first, second, third]}, None
    overlap = len(set(tokens(query)) & set(tokens(passage)))
    grade = 3 if overlap >= 3 else 1
    dist = {str(grade): 0.9, "0": 0.1} if "bees" not in passage else {str(grade): 0.55, "0": 0.45}
    return {"reasoning": "overlap", "grade": grade}, dist


class FakeModel:
    """:func:`model_answer` as an OpenAI-compatible server (respx side effect), with logprobs."""

    def __init__(self, **usage: int) -> None:
        self.calls: list[str] = []
        self.usage = usage  # prompt_tokens/completion_tokens the fake server reports

    def __call__(self, request: Any) -> respx.MockResponse:
        body = json.loads(request.content)
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")  # not a repair turn
        self.calls.append(name)
        if name.startswith("synth_"):
            passages = re.findall(r"<passage(?:_[ab])?>\n(.*?)\n</passage", user, re.S)
            several = "queries" in body["response_format"]["json_schema"]["schema"]["properties"]
            obj, _ = model_answer(name, passages, several)
            return ok(completion(obj if isinstance(obj, str) else json.dumps(obj), **self.usage))
        q = re.search(r"<query>\n(.*?)\n</query>", user, re.S).group(1)  # type: ignore[union-attr]
        p = re.search(r"<passage>\n(.*?)\n</passage>", user, re.S).group(1)  # type: ignore[union-attr]
        obj, dist = model_answer(name, [], False, q, p)
        text = json.dumps(obj)
        return ok(completion(text, logprobs=grade_logprobs(text, dist), **self.usage))


def fake_session(**kw: Any) -> FakeLLM:
    """:func:`model_answer` in process (no HTTP): the pipeline's own logic under test."""

    def reply(prompt: Any, v: Any) -> Any:
        passages = [v[k] for k in ("passage", "passage_a", "passage_b") if k in v]
        if prompt.id.startswith("synth_"):
            several = "queries" in prompt.output_schema["properties"]
            obj, _ = model_answer(prompt.id, passages, several)
            return obj
        obj, dist = model_answer(prompt.id, [], False, v["query"], v["passage"])
        return Reply(obj, probs=dist)

    return FakeLLM(reply, model="m", **kw)
