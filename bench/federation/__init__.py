"""Federation benchmark: time-to-loss of geofed against FedAvg, DiLoCo, FedNova and a single process.

Real processes (one PS, N clients) over emulated WAN links (`geofed_apps.wan.WanProxy`), heterogeneous
compute and a non-IID split; see `bench/run.py` for the commands and docs/benchmarks.md for results.
"""
