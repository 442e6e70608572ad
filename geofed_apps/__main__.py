"""`python -m geofed_apps ...` = `geofed ...` (how launchers start children with this interpreter)."""

import sys

from geofed_apps.cli import main

if __name__ == "__main__":
    sys.exit(main())
