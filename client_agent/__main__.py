"""`python -m client_agent ...` = `geofed client ...` (the torchrun entry point of a site's pod)."""

import os
import sys

from client_agent.cli import main

if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        # gloo/NCCL C++ threads can abort the process in static destructors at interpreter exit, after
        # all work is done ("terminate called without an active exception"); leave without running them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
