"""What the tests and the benchmarks share: real processes, raw wire calls and the reliability scenarios.

`procs` starts and reaps PS processes (on `geofed_apps.launch`), `wire` talks to a PS over gRPC like a
tiny numpy client would, `ledger` recomputes a global model from the deltas sent, and `reliability`
holds the fault scenarios that `tests/reliability` asserts and `bench/reliability_report.py` tabulates.
It sits at the application layer: it may import anything, and nothing but tests and benchmarks import it.
"""
