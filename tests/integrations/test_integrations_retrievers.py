"""run_retriever against the real frameworks' classes (fake retrievers, no network)."""

from __future__ import annotations

import asyncio
import warnings

import pytest

import ragjudge
from ragjudge import Qrels, Run, evaluate
from ragjudge.errors import InputError
from ragjudge.integrations import RetrievalError, RetrievedRun, run_retriever, run_retriever_sync

QUERIES = {"q1": "capital of france", "q2": "largest ocean", "q3": "tallest mountain"}
ANSWERS = {"q1": ["d1", "d2", "d3"], "q2": ["d4", "d1"], "q3": ["d5"]}
QRELS = Qrels.from_dict({"q1": {"d1": 1}, "q2": {"d4": 1}, "q3": {"d5": 1}})


def test_plain_function_ids_get_rank_scores_and_keep_order() -> None:
    run = run_retriever_sync(lambda text: ANSWERS[_qid(text)], QUERIES, progress=False, name="ids")
    assert isinstance(run, Run) and isinstance(run, RetrievedRun)
    assert run.name == "ids" and run.failed == {}
    assert [d for d, _ in run.get("q1").items()] == ["d1", "d2", "d3"]
    assert list(run.get("q1").values()) == [3.0, 2.0, 1.0]
    assert evaluate(QRELS, run, ["P@1"]).mean["P@1"] == 1.0
    # equal to the plain Run with the same rows
    assert run == Run.from_dict({q: {d: float(len(ds) - i) for i, d in enumerate(ds)}
                                 for q, ds in ANSWERS.items()})


def _qid(text: str) -> str:
    return next(q for q, t in QUERIES.items() if t == text)


def test_async_function_pairs_scores_and_k() -> None:
    async def search(text: str) -> list[tuple[str, float]]:
        await asyncio.sleep(0)
        return [("b", 0.5), ("a", 0.9), ("c", 0.5), ("a", 0.1)]  # a twice: first kept

    run = asyncio.run(run_retriever(search, {"q": "x"}, k=2, progress=False))
    assert run.name == "search"
    assert dict(run.get("q")) == {"a": 0.9, "c": 0.5}  # ties by id descending, as trec_eval


def test_failures_are_data_and_a_mostly_failed_run_raises() -> None:
    def flaky(text: str) -> list[str]:
        if text == "largest ocean":
            raise TimeoutError("read timed out\nsecond line")
        return ["d1"]

    run = run_retriever_sync(flaky, QUERIES, progress=False)
    assert run.failed == {"q2": "TimeoutError: read timed out"}
    assert sorted(run.query_ids) == ["q1", "q3"]
    assert "1 failed" in repr(run)

    def broken(text: str) -> list[str]:
        raise ConnectionError("no route")

    with pytest.raises(RetrievalError, match="3 of 3 queries failed.*ConnectionError: no route") as info:
        run_retriever_sync(broken, QUERIES, progress=False)
    assert info.value.partial is not None and len(info.value.partial.failed) == 3


def test_bad_inputs_are_one_line_errors() -> None:
    with pytest.raises(InputError, match="k must be a positive integer"):
        run_retriever_sync(lambda t: [], QUERIES, k=0, progress=False)
    with pytest.raises(InputError, match="no 'id' key"):
        run_retriever_sync(lambda t: [{"doc": "d1"}], QUERIES, progress=False)
    with pytest.raises(InputError, match="cannot call"):
        run_retriever_sync(42, QUERIES, progress=False)
    with pytest.raises(InputError, match="finite"):
        run_retriever_sync(lambda t: [("d1", float("nan"))], QUERIES, progress=False)


def test_queries_from_a_file(tmp_path) -> None:
    path = tmp_path / "queries.tsv"
    path.write_text("".join(f"{q}\t{t}\n" for q, t in QUERIES.items()), encoding="utf-8")
    run = run_retriever_sync(lambda text: ANSWERS[_qid(text)], ragjudge.read_queries(path), progress=False)
    assert sorted(run.query_ids) == ["q1", "q2", "q3"]
    assert run_retriever_sync(lambda text: ANSWERS[_qid(text)], str(path), progress=False) == run


def test_concurrency_is_honoured_for_sync_retrievers() -> None:
    import threading
    import time

    active = [0, 0]
    lock = threading.Lock()

    def slow(text: str) -> list[str]:
        with lock:
            active[0] += 1
            active[1] = max(active[1], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        return ["d"]

    run_retriever_sync(slow, {str(i): "q" for i in range(40)}, concurrency=12, progress=False)
    assert active[1] == 12


def test_inside_a_running_loop() -> None:
    async def main() -> RetrievedRun:
        return run_retriever_sync(lambda t: ["d1"], QUERIES, progress=False)  # like Jupyter

    assert asyncio.run(main()).num_queries == 3


# ----------------------------------------------------------------------------- LangChain
def test_langchain_retriever() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class Fake(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                    ) -> list[Document]:
            docs = ANSWERS[_qid(query)]
            # the corpus id in metadata (first) or Document.id
            return [Document(page_content=f"text {d}", metadata={"doc_id": d}) if i % 2 == 0
                    else Document(page_content=f"text {d}", id=d) for i, d in enumerate(docs)]

    run = run_retriever_sync(Fake(), QUERIES, id_key="doc_id", progress=False)
    assert run.name == "Fake"
    assert list(run.get("q1")) == ["d1", "d2", "d3"]

    class Async(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            raise AssertionError("the async path is used")

        async def _aget_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return [Document(page_content="x", id="d1")]

    assert list(run_retriever_sync(Async(), QUERIES, progress=False).get("q2")) == ["d1"]

    class NoId(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return [Document(page_content="x")]

    with pytest.raises(InputError, match=r"Document from the LangChain NoId retriever has no id: "
                                         r"neither metadata\['id'\] nor Document.id"):
        run_retriever_sync(NoId(), QUERIES, progress=False)


# ----------------------------------------------------------------------------- LlamaIndex
def test_llamaindex_retriever() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode

    class Fake(BaseRetriever):
        def _retrieve(self, query_bundle):  # type: ignore[no-untyped-def]
            out = []
            for i, d in enumerate(ANSWERS[_qid(query_bundle.query_str)]):
                # a chunk of document d: its id is the source document's (ref_doc_id)
                node = TextNode(text=f"chunk of {d}", id_=f"node-{d}-{i}")
                node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=d)
                out.append(NodeWithScore(node=node, score=1.0 - 0.1 * i))
            return out

    run = run_retriever_sync(Fake(), QUERIES, progress=False)
    assert dict(run.get("q2")) == pytest.approx({"d4": 1.0, "d1": 0.9})

    class Meta(BaseRetriever):
        def _retrieve(self, query_bundle):  # type: ignore[no-untyped-def]
            return [NodeWithScore(node=TextNode(text="x", id_="n1", metadata={"id": "d9"}), score=None)]

        async def _aretrieve(self, query_bundle):  # type: ignore[no-untyped-def]
            return [NodeWithScore(node=TextNode(text="x", id_="n1", metadata={"id": "d7"}), score=None)]

    run = run_retriever_sync(Meta(), QUERIES, progress=False)
    assert dict(run.get("q1")) == {"d7": 1.0}  # metadata id first; async path; rank score


# ----------------------------------------------------------------------------- Haystack
def test_haystack_component() -> None:
    pytest.importorskip("haystack")
    from haystack import Document, component

    @component
    class FakeRetriever:
        def __init__(self) -> None:
            self.top_ks: list[int | None] = []

        @component.output_types(documents=list[Document])
        def run(self, query: str, top_k: int | None = None) -> dict:
            self.top_ks.append(top_k)
            return {"documents": [Document(content=f"text {d}", meta={"id": d}, score=1.0 / (i + 1))
                                  for i, d in enumerate(ANSWERS[_qid(query)])]}

    fake = FakeRetriever()
    run = run_retriever_sync(fake, QUERIES, k=10, progress=False)
    assert fake.top_ks == [10, 10, 10]
    assert list(run.get("q1")) == ["d1", "d2", "d3"]
    assert run.get("q1")["d2"] == 0.5
    assert evaluate(QRELS, run, ["recall@10"]).mean["recall@10"] == 1.0

    @component
    class ContentIds:
        @component.output_types(documents=list[Document])
        def run(self, query: str) -> dict:
            return {"documents": [Document(content="same text")]}

    run = run_retriever_sync(ContentIds(), QUERIES, progress=False)
    assert list(run.get("q1")) == [Document(content="same text").id]  # Haystack's own id


# ----------------------------------------------------------------------------- k reaches the retriever
def test_k_reaches_langchain_retrievers_without_changing_the_callers_object() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class WithK(BaseRetriever):  # as LangChain's BM25Retriever: its own default of 4
        k: int = 4

        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return [Document(page_content="x", id=f"d{i}") for i in range(self.k)]

    class WithSearchKwargs(BaseRetriever):  # as a VectorStoreRetriever
        search_kwargs: dict = {"k": 4, "filter": "x"}

        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            assert self.search_kwargs["filter"] == "x"
            return [Document(page_content="x", id=f"d{i}") for i in range(self.search_kwargs["k"])]

    for retriever in (WithK(), WithSearchKwargs()):
        run = run_retriever_sync(retriever, QUERIES, k=7, progress=False)
        assert [len(run.get(q)) for q in QUERIES] == [7, 7, 7]
    mine = WithK()
    run_retriever_sync(mine, QUERIES, k=7, progress=False)
    assert mine.k == 4


def test_k_reaches_other_langchain_count_fields_and_wrapped_retrievers() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class TopK(BaseRetriever):  # as AzureAISearchRetriever
        top_k: int = 3

        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return [Document(page_content="x", id=f"d{i}") for i in range(self.top_k)]

    class TopKResults(BaseRetriever):  # as WikipediaRetriever
        top_k_results: int = 3

        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return [Document(page_content="x", id=f"d{i}") for i in range(self.top_k_results)]

    class Mmr(BaseRetriever):  # a VectorStoreRetriever with search_type="mmr": k of fetch_k
        search_type: str = "mmr"
        search_kwargs: dict = {"k": 4, "fetch_k": 5}

        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            n = min(self.search_kwargs["k"], self.search_kwargs["fetch_k"])
            return [Document(page_content="x", id=f"d{i}") for i in range(n)]

    class Compressing(BaseRetriever):  # as ContextualCompressionRetriever
        base_retriever: BaseRetriever

        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return self.base_retriever.invoke(query)

    class Ensemble(BaseRetriever):  # as EnsembleRetriever: the union of its retrievers' results
        retrievers: list

        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return [d for r in self.retrievers for d in r.invoke(query)][:7]

    inner = TopK()
    for retriever in (TopK(), TopKResults(), Mmr(), Compressing(base_retriever=inner),
                      Ensemble(retrievers=[TopK(), Mmr()])):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "fewer than k" warning: k reached the retriever
            run = run_retriever_sync(retriever, QUERIES, k=7, progress=False)
        assert [len(run.get(q)) for q in QUERIES] == [7, 7, 7], type(retriever).__name__
    assert inner.top_k == 3  # the caller's objects are never changed


@pytest.mark.parametrize("asynchronous", [False, True])
def test_k_reaches_a_function_that_takes_it(asynchronous: bool) -> None:
    def search(text: str, k: int = 4) -> list[str]:
        return [f"d{i}" for i in range(k)]

    async def asearch(text: str, *, top_k: int = 4) -> list[str]:
        return [f"d{i}" for i in range(top_k)]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = run_retriever_sync(asearch if asynchronous else search, QUERIES, k=9, progress=False)
    assert [len(run.get(q)) for q in QUERIES] == [9, 9, 9]


def test_k_reaches_llamaindex_similarity_top_k() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    class TopK(BaseRetriever):
        def __init__(self) -> None:
            super().__init__()
            self.similarity_top_k = 2

        def _retrieve(self, query_bundle):  # type: ignore[no-untyped-def]
            return [NodeWithScore(node=TextNode(text="x", id_=f"d{i}"), score=1.0 / (i + 1))
                    for i in range(self.similarity_top_k)]

    run = run_retriever_sync(TopK(), QUERIES, k=5, progress=False)
    assert [len(run.get(q)) for q in QUERIES] == [5, 5, 5]


def test_fewer_than_k_for_most_queries_warns() -> None:
    def four(text: str) -> list[str]:
        return ["d1", "d2", "d3", "d4"]

    with pytest.warns(UserWarning, match=r"fewer than k=100 documents for 3 of 3 queries .*knows no k"):
        run_retriever_sync(four, QUERIES, k=100, progress=False)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_retriever_sync(four, QUERIES, k=4, progress=False)


def test_run_retriever_without_await_hints_at_the_sync_twin() -> None:
    def ids(text: str) -> list[str]:
        return ["d1"]

    pending = run_retriever(ids, QUERIES)
    with pytest.raises(InputError, match=r"run_retriever\(\) is async; write `await "
                                         r"run_retriever\(...\)`, or call run_retriever_sync"):
        evaluate({"q1": {"d1": 1}}, pending)


def test_progress_lines_spell_queries(capsys: pytest.CaptureFixture[str]) -> None:
    def ids(text: str) -> list[str]:
        return ["d1"]

    run_retriever_sync(ids, QUERIES, k=1, progress=True)
    err = capsys.readouterr().err
    assert "3/3 queries, 100%" in err and "querys" not in err
