"""Defaults of calling a model that the CLI's and the service's option lists show.

Kept apart from :mod:`.endpoint` so that declaring the LLM flags (every ``--help``, and
``evaluate`` run without ``--judge``) loads no model module.
"""

from __future__ import annotations

__all__ = ["DEFAULT_CONCURRENCY"]

#: Requests in flight at most, by default. A ceiling, not a target: the runner's adaptive
#: limit starts at 1 and grows only while the server keeps up, and a server's rate limit is
#: kept by the pacer, not by this. 64, not 16: on a very busy machine our own loop holds
#: finished replies for 100-400 ms, so at 600 rpm 20-30 calls are counted in flight while the
#: server sees 12-20 (measured with 24 CPU-burning neighbours, benchmarks/bench_judge.py
#: --burners: 88.5% of the ceiling at 16, 90.0-95.5% at 32, 95.1-95.7% at 64).
DEFAULT_CONCURRENCY = 64
