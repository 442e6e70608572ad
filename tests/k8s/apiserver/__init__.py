"""An emulated kube-apiserver for the operator, kubectl and helm tests (see server.py for what it does not do)."""

from .server import GeofedEmulator

__all__ = ["GeofedEmulator"]
