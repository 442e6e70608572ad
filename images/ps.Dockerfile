# geofed parameter server (cloud): CPU only, it aggregates deltas and never trains (paper §III-B1).
# Build from the repository root:  docker build -f images/ps.Dockerfile -t ghcr.io/geofed/ps:0.1.0 .
# No torch, no transformers: the PS imports neither (tests/k8s/test_images.py runs it with only these
# packages importable). Dependencies are one layer before the sources: a code change reinstalls nothing.
ARG PYTHON_VERSION=3.11.11
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/geofed
ENV PATH=/opt/geofed/bin:$PATH
RUN pip install \
    grpcio==1.85.3 \
    grpcio-health-checking==1.85.1 \
    protobuf==7.36.2 \
    pydantic==2.14.4 \
    prometheus-client==0.26.0 \
    numpy==2.4.6 \
    constriction==0.5.0 \
    numba==0.68.1 \
    pyyaml==6.0.4 \
    safetensors==0.8.0 \
    dp-accounting==0.6.0
WORKDIR /src
COPY pyproject.toml README.md ./
COPY geofed ./geofed
COPY ps_server ./ps_server
COPY client_agent ./client_agent
COPY operator ./operator
COPY geofed_apps ./geofed_apps
RUN pip install --no-deps .

FROM python:${PYTHON_VERSION}-slim-bookworm
RUN groupadd --gid 10001 geofed && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin geofed
COPY --from=build /opt/geofed /opt/geofed
# numba's compiled kernels are cached under /tmp (the pod's emptyDir): the root filesystem is read-only.
ENV PATH=/opt/geofed/bin:$PATH PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
USER 10001
EXPOSE 7443 7444
ENTRYPOINT ["geofed"]
CMD ["ps", "--help"]
