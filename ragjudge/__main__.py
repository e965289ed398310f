"""``python -m ragjudge`` == the ``ragjudge`` console script."""

import sys

from .cli import main

# Guarded: the service's worker processes are spawned, and a spawned process imports the main
# module of its parent (under another name) before it runs anything.
if __name__ == "__main__":
    sys.exit(main())
