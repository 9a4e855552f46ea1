# syntax=docker/dockerfile:1.7
# One image for the UpdateStream operator, the Spark driver and the Spark executors.
#
#   docker build --build-context vitess="$(scripts/build-vitess.sh)" \
#     -t ghcr.io/updatestream/updatestream:0.1.0 .
#
# The build context `vitess` is required: a directory holding `vtctldclient`, the Vitess
# program the operator reads a Keyspace's Vitess cluster with (spec.vitess). Nothing else is
# taken from it. scripts/build-vitess.sh (`make vitess-tools`) builds the version
# tools/vitess/go.mod pins into the cache directory and prints that directory last.
#
# Stages: `jre` (a pinned Temurin Java 17 runtime, only copied from), `builder` (wheels of the
# project and of exactly the locked versions of its runtime dependencies), and the final image:
# Python 3.11, the JRE, vtctldclient and the installed wheels, running as UID 10001, with no
# compiler, no pip and no wheel files left in it. No HEALTHCHECK: Kubernetes probes the
# operator (see the chart).
#
# The base images are build arguments. By default they are the official images above; where
# those cannot be pulled, `make image` passes images made from Debian packages
# (scripts/build-base-image.sh): PYTHON_IMAGE with Python 3.11 and tini, JRE_IMAGE holding a
# Java 17 runtime at /opt/java/openjdk.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
ARG JRE_IMAGE=eclipse-temurin:17.0.15_6-jre-jammy

FROM ${JRE_IMAGE} AS jre

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Every file the .dockerignore lets in: the packaging files, the packages and docker/.
COPY . ./
# The project's wheel, then a wheel of every runtime dependency at its locked version (pyspark
# is published as a source archive: its wheel is built here, not in the final image). pip runs
# from a venv of its own (a Debian python3 has no pip); its cache survives between builds.
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /build \
 && /build/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /build/bin/pip wheel --use-pep517 --wheel-dir /wheels --constraint requirements.lock \
      /wheels/updatestream-*.whl

FROM ${PYTHON_IMAGE}
ENV JAVA_HOME=/opt/java/openjdk \
    VIRTUAL_ENV=/opt/updatestream/venv \
    SPARK_HOME=/opt/updatestream/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/updatestream/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/updatestream/venv/bin/python \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
ENV PATH=/opt/updatestream/venv/bin:/opt/java/openjdk/bin:/usr/local/bin:/usr/bin:/bin
# tini reaps the Python workers Spark forks; the user owns nothing but its scratch space.
RUN if [ ! -x /usr/bin/tini ]; then apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/*; fi \
 && /usr/sbin/groupadd --system --gid 10001 updatestream \
 && /usr/sbin/useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin updatestream
COPY --from=jre /opt/java/openjdk /opt/java/openjdk
# A static Go binary, owned by root; found on PATH by the operator (vitess_topology).
COPY --from=vitess --chmod=0755 vtctldclient /usr/local/bin/vtctldclient
# Install the wheels (bind-mounted from the builder, so none stays in a layer) into a venv
# whose pip is removed after use, then remove pip, setuptools and wheel from the base Python
# as well when it has them. The Spark
# main file is reachable where the operator's spark-submit points drivers at
# (local:///opt/updatestream/jobs/updatestream_jobs/main.py).
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    --mount=type=bind,source=requirements.lock,target=/run/requirements.lock \
    python3 -m venv /opt/updatestream/venv \
 && /opt/updatestream/venv/bin/python -m pip install --no-cache-dir \
      --no-index --find-links=/wheels --constraint /run/requirements.lock updatestream \
 && /opt/updatestream/venv/bin/python -m pip uninstall --yes pip setuptools wheel \
 && if python3 -m pip --version >/dev/null 2>&1; then \
      python3 -m pip uninstall --yes pip setuptools wheel; fi \
 && mkdir -p /opt/updatestream/jobs \
 && ln -s /opt/updatestream/venv/lib/python3.11/site-packages/updatestream_jobs \
      /opt/updatestream/jobs/updatestream_jobs \
 && /opt/updatestream/venv/bin/updatestream --version
COPY --chmod=0755 docker/entrypoint.sh /opt/entrypoint.sh
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/entrypoint.sh"]
CMD ["operator"]
