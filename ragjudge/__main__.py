"""``python -m ragjudge`` == the ``ragjudge`` console script."""

import sys

from .cli import main

sys.exit(main())
