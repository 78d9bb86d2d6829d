# gpu-balancer image: webhook, descheduler, certs and the NVML exporter in one; no simulator (the `sim`
# extra: `pip install gpu-balancer[sim]` where you simulate).
# Build: docker build -t ghcr.io/gpu-balancer/gpu-balancer:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpu_balancer gpu_balancer
COPY scoring scoring
COPY calibration calibration
COPY webhook webhook
COPY descheduler descheduler
COPY certs certs
COPY nvml_exporter nvml_exporter
RUN python -m venv /opt/gpu-balancer \
 && /opt/gpu-balancer/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/gpu-balancer/bin/pip install --no-cache-dir .

FROM python:3.11-slim
# No compilers or build tools here: only the virtual environment built above.
COPY --from=build /opt/gpu-balancer /opt/gpu-balancer
# Two malloc arenas, not one per thread: the telemetry reader decodes answers that arrive on
# parallel threads, and at 15,000 nodes per-thread arenas held its peak at 337 MB against 209 MB
# (BENCHMARKS.md, "Fleet scale").
ENV PATH=/opt/gpu-balancer/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2
USER 65532:65532
ENTRYPOINT ["gpu-balancer"]
CMD ["--help"]
