# One image for the operator and for the sidecar in every vLLM pod (the chart's image.repository,
# which the operator also hands to the pods it renders). Build from the repository root:
#   docker build -t ghcr.io/specops/specops:$VERSION .
# The entrypoint is the `specops` command; the chart's operator container passes
# `operator ...` as its args, the sidecar container sets `command: [specops, sidecar]`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY specops ./specops
COPY operator/specops_operator ./operator/specops_operator
COPY sidecar/specops_sidecar ./sidecar/specops_sidecar
RUN pip install . && rm -rf /src

RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin specops
USER 10001
WORKDIR /
EXPOSE 8080 9090
ENTRYPOINT ["specops"]
