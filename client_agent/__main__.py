"""`python -m client_agent ...` = `geofed client ...` (the torchrun entry point of a site's pod)."""

import sys

from geofed.cli import main

if __name__ == "__main__":
    sys.exit(main(["client", *sys.argv[1:]]))
