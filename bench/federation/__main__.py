"""`python -m bench.federation ...` is `python bench/run.py ...`."""

import sys

from bench.run import main

sys.exit(main())
