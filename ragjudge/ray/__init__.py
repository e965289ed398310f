"""ragjudge on a Ray cluster: judging pairs (:mod:`.judge`), the LLM RAG metrics (:mod:`.rag`)
and nugget assignment (:mod:`.nuggets`) as Ray Data pipelines, with the same prompts, parsing, cache, budget and
provenance as one process (``pip install -e '.[ray]'`` in the ragjudge checkout; Ray is
imported only when a pipeline runs). What the pipelines share -- the cluster, the session's
recipe, the inputs (objects, a Ray dataset, Parquet files) -- is :mod:`.cluster`.
"""

from __future__ import annotations

from .cluster import ENGINES
from .judge import PAIR_COLUMNS, judge_ray, judge_ray_sync, vllm_judgment, vllm_request
from .nuggets import assign_nuggets_ray, assign_nuggets_ray_sync
from .rag import rag_ray, rag_ray_sync

__all__ = [
           "ENGINES",
           "PAIR_COLUMNS",
           "assign_nuggets_ray",
           "assign_nuggets_ray_sync",
           "judge_ray",
           "judge_ray_sync",
           "rag_ray",
           "rag_ray_sync",
           "vllm_judgment",
           "vllm_request",
]
