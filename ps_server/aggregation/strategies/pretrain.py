"""Pretraining (paper §III-C1): the exchanged vector is the whole model; Algorithm 1 as written."""

from __future__ import annotations

from .delta_averaging import DeltaAveraging


class Pretrain(DeltaAveraging):
    """`DeltaAveraging` as it is: the weighted mean of whole-model deltas, then the outer step."""
