"""Make the repository's `bench/` importable (it is a folder of scripts, not an installed package)."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.append(ROOT)  # appended, not prepended: the repo's `operator/` must not shadow the stdlib's
