"""The emulated API server the Kubernetes tests run against (the `apiserver` package)."""

from .apiserver import GeofedEmulator

__all__ = ["GeofedEmulator"]
