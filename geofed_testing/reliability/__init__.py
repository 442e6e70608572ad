"""The fault scenarios of issue 5: each a function `(workdir, reaper) -> ScenarioResult` that injects one
fault into a real federation and checks the global model against an independent ledger.

`tests/reliability` asserts them; `bench/reliability_report.py` runs them all and writes the table.
"""
