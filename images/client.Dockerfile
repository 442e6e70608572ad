# geofed site client: torch with CUDA 12, one or more training processes via torchrun.
# Build from the repository root:  docker build -f images/client.Dockerfile -t ghcr.io/geofed/client:0.1.0 .
#
# torch's CUDA 12.8 wheels bring their own CUDA runtime, cuBLAS, cuDNN and NCCL (pip packages), so the base is plain
# Ubuntu, not nvidia/cuda: the only thing taken from the node is the driver, mounted by the NVIDIA container runtime.
# CUDA's minor-version compatibility runs a 12.x runtime on any driver from R525 (CUDA 12.0) on, so the image asks
# for cuda>=12.0; nvidia/cuda:12.8's NVIDIA_REQUIRE_CUDA=cuda>=12.8 made nodes with R535/R550 drivers (most managed
# GPU pools) refuse to start the container. A torch build for another CUDA major (PyPI's default wheels are CUDA 13,
# R580+) fails the build (TORCH_CUDA_MAJOR). The CPU variant (images/build.sh) sets BASE_IMAGE and TORCH_INDEX.
ARG BASE_IMAGE=ubuntu:22.04
FROM ${BASE_IMAGE}
ARG PYTHON_VERSION=3.11
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_CUDA_MAJOR=12
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility NVIDIA_REQUIRE_CUDA="cuda>=12.0"
RUN apt-get update \
    && apt-get install -y --no-install-recommends python${PYTHON_VERSION} python${PYTHON_VERSION}-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python${PYTHON_VERSION} -m venv /opt/geofed
ENV PATH=/opt/geofed/bin:$PATH
WORKDIR /src
# Dependencies first, from pyproject.toml and constraints.txt only: a code change never reinstalls torch.
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --constraint constraints.txt --extra-index-url ${TORCH_INDEX} -r /tmp/requirements.txt \
    && python -c "import sys, torch; cuda = torch.version.cuda; sys.exit(cuda is not None \
        and cuda.split('.')[0] != '${TORCH_CUDA_MAJOR}' and f'torch {torch.__version__} is built for CUDA {cuda}')"
COPY README.md ./
COPY geofed ./geofed
COPY ps_server ./ps_server
COPY client_agent ./client_agent
COPY operator ./operator
COPY geofed_apps ./geofed_apps
RUN pip install --no-deps . \
    && rm -rf /src
RUN groupadd --gid 10001 geofed && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin geofed
# numba's compiled kernels are cached under /tmp, writable under a read-only root filesystem with an emptyDir.
ENV PYTHONUNBUFFERED=1 HOME=/home/geofed NUMBA_CACHE_DIR=/tmp/numba
WORKDIR /work
USER 10001
# The operator sets the command per pod (`geofed client ...` or `torchrun --nproc-per-node N -m client_agent ...`).
ENTRYPOINT ["torchrun", "--standalone"]
CMD ["--nproc-per-node=1", "-m", "client_agent", "--help"]
