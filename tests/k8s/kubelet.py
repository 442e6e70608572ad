"""The test node's kubelet (see `tests/k8s/node/`): imported from here by the walk-through and operator tests."""

from .node import ClusterAccess, ImageConfig, Kubelet, PodWorker, ProcessRuntime, from_dockerfile

__all__ = ["ClusterAccess", "ImageConfig", "Kubelet", "PodWorker", "ProcessRuntime", "from_dockerfile"]
