"""collect_samples against the real frameworks' classes (fake retrievers and LLMs, no network)."""


import asyncio

import pytest

from ragjudge.errors import InputError
from ragjudge.integrations import RetrievalError, collect_samples, collect_samples_sync
from ragjudge.rag import as_samples, evaluate_samples_sync

QUESTIONS = {"q1": "What is the capital of France?", "q2": "Which ocean is the largest?"}
REFERENCES = {"q1": "Paris", "q2": "The Pacific"}
DOCS = {"q1": [("d1", "Paris is the capital of France."), ("d2", "France is in Europe.")],
        "q2": [("d3", "The Pacific is the largest ocean.")]}
ANSWER = {"q1": "Paris", "q2": "The Pacific"}


def _qid(text: str) -> str:
    return next(q for q, t in QUESTIONS.items() if t == text)


def _check(samples: list[dict], *, ids: bool = True) -> None:
    assert [s["id"] for s in samples] == ["q1", "q2"]
    s = samples[0]
    assert s["user_input"] == QUESTIONS["q1"] and s["response"] == "Paris"
    assert s["retrieved_contexts"] == [t for _, t in DOCS["q1"]]
    if ids:
        assert s["retrieved_context_ids"] == ["d1", "d2"]
    # what ragjudge rag / evaluate_samples read
    report = evaluate_samples_sync(as_samples(samples), ["hit@1"] if ids else ["containment@2"],
                                   progress=False)
    assert report.summaries


def test_function_tuple_and_dict_outputs() -> None:
    def rag(question: str) -> tuple[str, list[str]]:
        return ANSWER[_qid(question)], [t for _, t in DOCS[_qid(question)]]

    samples = collect_samples_sync(rag, QUESTIONS, REFERENCES, progress=False)
    _check(samples, ids=False)
    assert samples[1]["reference"] == "The Pacific" and samples.failed == {}

    async def arag(question: str) -> dict:
        await asyncio.sleep(0)
        q = _qid(question)
        return {"answer": ANSWER[q], "contexts": [{"id": d, "text": t} for d, t in DOCS[q]]}

    _check(asyncio.run(collect_samples(arag, QUESTIONS, progress=False)))
    listed = collect_samples_sync(rag, list(QUESTIONS.values()), list(REFERENCES.values()), progress=False)
    assert [s["id"] for s in listed] == ["0", "1"] and listed[0]["reference"] == "Paris"


def test_missing_contexts_and_failures() -> None:
    with pytest.raises(InputError, match="returned no contexts: its output has answer; expected one of"):
        collect_samples_sync(lambda q: {"answer": "x"}, QUESTIONS, progress=False)
    with pytest.raises(InputError, match="returned str output without contexts"):
        collect_samples_sync(lambda q: "just an answer", QUESTIONS, progress=False)
    with pytest.raises(InputError, match="references for unknown question ids: q9"):
        collect_samples_sync(lambda q: ("a", []), QUESTIONS, {"q9": "x"}, progress=False)

    def flaky(question: str) -> tuple[str, list[str]]:
        if question == QUESTIONS["q2"]:
            raise RuntimeError("rate limited")
        return "a", ["c"]

    samples = collect_samples_sync(flaky, {**QUESTIONS, "q3": "third"}, progress=False)
    assert [s["id"] for s in samples] == ["q1", "q3"]
    assert samples.failed == {"q2": "RuntimeError: rate limited"}
    with pytest.raises(RetrievalError, match="2 of 2 questions failed"):
        collect_samples_sync(lambda q: 1 / 0, QUESTIONS, progress=False)


# ----------------------------------------------------------------------------- LangChain
def test_langchain_chain() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough

    class Fake(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return [Document(page_content=t, metadata={"id": d}) for d, t in DOCS[_qid(query)]]

    llm = FakeListChatModel(responses=["Paris", "The Pacific"])
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {input}")
    answer = prompt | llm | StrOutputParser()
    # create_retrieval_chain's shape: {"input"} -> {"input", "context", "answer"}
    chain = RunnablePassthrough.assign(context=(lambda x: x["input"]) | Fake()).assign(answer=answer)
    samples = collect_samples_sync(chain, QUESTIONS, concurrency=1, progress=False)
    _check(samples)

    # a chain taking the question as a string, returning source_documents
    plain = {"source_documents": Fake(), "result": lambda q: ANSWER[_qid(q)]} | RunnablePassthrough()
    _check(collect_samples_sync(plain, QUESTIONS, progress=False))

    with pytest.raises(InputError, match="RunnableSequence chain returned AIMessage output without contexts"):
        collect_samples_sync(prompt.partial(context="") | llm, QUESTIONS, progress=False)


# ----------------------------------------------------------------------------- LlamaIndex
def test_llamaindex_query_engine() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import CustomQueryEngine, RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    class Fake(BaseRetriever):
        def _retrieve(self, query_bundle):  # type: ignore[no-untyped-def]
            return [NodeWithScore(node=TextNode(text=t, id_=d), score=1.0)
                    for d, t in DOCS[_qid(query_bundle.query_str)]]

    engine = RetrieverQueryEngine.from_args(Fake(), llm=MockLLM(max_tokens=4))
    samples = collect_samples_sync(engine, QUESTIONS, progress=False)
    assert samples[0]["retrieved_contexts"] == [t for _, t in DOCS["q1"]]
    assert samples[0]["retrieved_context_ids"] == ["d1", "d2"]
    assert isinstance(samples[0]["response"], str)

    class Answers(CustomQueryEngine):
        def custom_query(self, query_str: str):  # type: ignore[no-untyped-def]
            from llama_index.core.base.response.schema import Response

            nodes = Fake().retrieve(query_str)
            return Response(response=ANSWER[_qid(query_str)], source_nodes=nodes)

    _check(collect_samples_sync(Answers(), QUESTIONS, progress=False))

    class NoSources(CustomQueryEngine):
        def custom_query(self, query_str: str) -> str:
            return "Paris"

    with pytest.raises(InputError, match="NoSources query engine returned no contexts for any question"):
        collect_samples_sync(NoSources(), QUESTIONS, progress=False)


# ----------------------------------------------------------------------------- Haystack
def test_haystack_pipeline() -> None:
    pytest.importorskip("haystack")
    from haystack import Document, Pipeline, component
    from haystack.components.builders import AnswerBuilder, PromptBuilder

    @component
    class FakeRetriever:
        @component.output_types(documents=list[Document])
        def run(self, query: str, top_k: int = 10) -> dict:
            return {"documents": [Document(content=t, meta={"id": d}) for d, t in DOCS[_qid(query)]]}

    @component
    class FakeRanker:
        @component.output_types(documents=list[Document])
        def run(self, documents: list[Document]) -> dict:
            return {"documents": documents}

    @component
    class FakeGenerator:
        @component.output_types(replies=list[str])
        def run(self, prompt: str) -> dict:
            return {"replies": ["Paris" if "France" in prompt.split("Question:")[1] else "The Pacific"]}

    def build(answer_builder: bool) -> Pipeline:
        p = Pipeline()
        p.add_component("retriever", FakeRetriever())
        p.add_component("ranker", FakeRanker())
        p.add_component("prompt", PromptBuilder(
            template="{% for d in documents %}{{ d.content }} {% endfor %}Question: {{ question }}",
            required_variables=["question"]))
        p.add_component("llm", FakeGenerator())
        p.connect("retriever.documents", "ranker.documents")
        p.connect("ranker.documents", "prompt.documents")
        p.connect("prompt.prompt", "llm.prompt")
        if answer_builder:
            p.add_component("answers", AnswerBuilder())
            p.connect("llm.replies", "answers.replies")
            p.connect("ranker.documents", "answers.documents")
        return p

    _check(collect_samples_sync(build(False), QUESTIONS, progress=False))
    _check(collect_samples_sync(build(True), QUESTIONS, progress=False))

    p = Pipeline()
    p.add_component("llm", FakeGenerator())
    with pytest.raises(InputError, match="no open input named query, question, text"):
        collect_samples_sync(p, QUESTIONS, progress=False)
