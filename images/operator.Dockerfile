# geofed operator (kopf): cloud role (Federations) and site role (SiteClients) from one image.
# Build from the repository root:  docker build -f images/operator.Dockerfile -t ghcr.io/geofed/operator:0.1.0 .
# Only what the operator imports is installed (no torch): its direct dependencies, pinned.
ARG PYTHON_VERSION=3.11.11
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/geofed
ENV PATH=/opt/geofed/bin:$PATH
RUN pip install \
    kopf==1.45.2 \
    kubernetes==37.0.2 \
    pydantic==2.14.4 \
    pyyaml==6.0.4 \
    cryptography==50.0.2 \
    grpcio==1.85.3 \
    protobuf==7.36.2
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
ENV PATH=/opt/geofed/bin:$PATH PYTHONUNBUFFERED=1
USER 10001
ENTRYPOINT ["python", "-m", "geofed_operator"]
CMD ["operator", "--help"]
