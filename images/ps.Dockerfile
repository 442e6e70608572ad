# geofed parameter server (cloud): CPU only, it aggregates deltas and never trains (paper §III-B1).
# Build from the repository root:  docker build -f images/ps.Dockerfile -t ghcr.io/geofed/ps:0.1.0 .
ARG PYTHON_VERSION=3.11.11
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/geofed
ENV PATH=/opt/geofed/bin:$PATH
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY geofed ./geofed
COPY ps_server ./ps_server
COPY client_agent ./client_agent
COPY operator ./operator
COPY geofed_apps ./geofed_apps
COPY geofed_testing ./geofed_testing
# CPU wheels of torch (the PS keeps the global model in fp32 host memory); versions from constraints.txt.
RUN pip install --constraint constraints.txt --extra-index-url https://download.pytorch.org/whl/cpu .

FROM python:${PYTHON_VERSION}-slim-bookworm
RUN groupadd --gid 10001 geofed && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin geofed
COPY --from=build /opt/geofed /opt/geofed
ENV PATH=/opt/geofed/bin:$PATH PYTHONUNBUFFERED=1
USER 10001
EXPOSE 7443 9090
ENTRYPOINT ["geofed"]
CMD ["ps", "--help"]
