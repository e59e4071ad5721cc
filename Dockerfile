# syntax=docker/dockerfile:1
# The bandit service image. Build: docker build -t bandit-service .
# Run: docker compose up (docker-compose.yml); every setting is a BANDIT_* variable,
# see docs/operations.md. Runtime knobs of the image itself:
#   WEB_CONCURRENCY  uvicorn worker processes (default 1; more need BANDIT_REDIS_URL)
#   PORT             listening port inside the container (default 8000)
#   BANDIT_RUN_MIGRATIONS  apply Alembic migrations once at start (the app's default: true)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: a virtual environment with the dependencies ------------------------------
# The package is installed in editable mode from /app with the server extra (the service's
# dependencies; pyproject.toml): service/storage/migrate.py finds alembic.ini and
# migrations/ next to the source tree, so the source stays in /app (the runtime stage
# copies /app and /opt/venv to the same paths).
FROM ${PYTHON_IMAGE} AS build
# EXTRAS: the extras installed (docker-compose.ray.yml builds "server,distributed")
ARG EXTRAS=server
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
COPY pyproject.toml README.md ./
COPY bandit_core/ bandit_core/
COPY service/ service/
RUN pip install --no-cache-dir --editable ".[${EXTRAS}]"

# ---- runtime: the venv, the source, the migrations and an unprivileged user -----------
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/bandit-metrics \
    BANDIT_DATA_DIR=/data \
    PORT=8000 \
    WEB_CONCURRENCY=1
# The commit the image is built from, shown by bandit_build_info:
# docker compose build --build-arg GIT_COMMIT="$(git rev-parse --short=12 HEAD)" api
ARG GIT_COMMIT=
ENV BANDIT_BUILD_COMMIT=${GIT_COMMIT}
RUN groupadd --system --gid 10001 bandit \
    && useradd --system --uid 10001 --gid bandit --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin bandit \
    && mkdir -p /data /tmp/bandit-metrics \
    && chown bandit:bandit /data /tmp/bandit-metrics
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
WORKDIR /app
COPY alembic.ini ./
COPY migrations/ migrations/
COPY deploy/docker/entrypoint.py entrypoint.py
USER 10001:10001
EXPOSE 8000
VOLUME ["/data"]
# The slim image has no curl: probe /healthz with the standard library.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8000'), timeout=2)"]
ENTRYPOINT ["python", "/app/entrypoint.py"]
CMD ["sh", "-c", "exec bandit serve --host 0.0.0.0 --port \"$PORT\" --workers \"$WEB_CONCURRENCY\""]
