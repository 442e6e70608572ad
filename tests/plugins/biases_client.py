"""The client half of `tests.plugins.biases`: the bias vectors are trained and exchanged, nothing else."""

from __future__ import annotations

from torch import nn

from client_agent.paradigms import ClientParadigm


class Biases(ClientParadigm):
    """Pretraining's hooks over the `*.bias` parameters; the frozen rest is built alike by every client."""

    shell_ok = False

    def exchanged(self, name: str, param: nn.Parameter) -> bool:
        return name.endswith(".bias")
