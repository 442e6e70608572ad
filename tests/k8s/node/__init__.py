"""A node for the emulated API server: a kubelet, the Deployment and Job controllers, container runtimes."""

from .images import ImageConfig, from_dockerfile
from .kubelet import Kubelet, PodWorker
from .runtime import ProcessRuntime
from .spec import ClusterAccess, PodError

__all__ = ["ClusterAccess", "ImageConfig", "Kubelet", "PodError", "PodWorker", "ProcessRuntime", "from_dockerfile"]
