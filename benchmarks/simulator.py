"""The loopback OpenAI-compatible simulator now ships as :mod:`ragjudge.testing.simulator`
(``python -m ragjudge.testing.simulator``); this file keeps ``python benchmarks/simulator.py``
and the benchmarks' process launchers working."""

import sys

from ragjudge.testing.simulator import *  # noqa: F403
from ragjudge.testing.simulator import main

if __name__ == "__main__":
    sys.exit(main())
