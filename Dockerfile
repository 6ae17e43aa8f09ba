# One image for every Arbiter process (validator, projections, API): Python 3.11, a JRE for Spark, the project,
# and the Spark Kafka connector fetched from Maven Central at build time.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven procps \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/arbiter
# The pinned dependencies first, in a layer of their own: a change to the code or the README does not fetch them again.
COPY pyproject.toml ./
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
    > /tmp/requirements.txt && pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY README.md ./
COPY app app
COPY commands commands
COPY projections projections
COPY schemas schemas
COPY build/maven build/maven
RUN pip install --no-cache-dir --no-deps . && ARBITER_HOME=/opt/arbiter arbiter kafka fetch
# The shard servers' compiled decision core (core/, Rust through PyO3, app/native/core.py): built with a throw-away
# toolchain into /opt/arbiter/.cache/core/<digest>/ and installed only if its corpus writes the Python fold's bytes
# (see below when it is not); the toolchain leaves with the same layer. rustup-init comes straight from
# static.rust-lang.org (sh.rustup.rs, its installer script's address, does not resolve on this project's machines).
COPY core core
# A core that does not build or does not pass its corpus is not installed: the image then decides in Python (the same
# bytes, slower), says so in its build log, and `arbiter native status` and the status page show which path runs.
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates gcc libc6-dev \
    && { { curl -sSf -o /tmp/rustup-init "https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init" \
           && chmod +x /tmp/rustup-init && /tmp/rustup-init -y --profile minimal --default-toolchain stable \
           && pip install --no-cache-dir "maturin>=1.7,<2" \
           && PATH="/root/.cargo/bin:$PATH" ARBITER_HOME=/opt/arbiter python3 -c \
              "from app.native.core_build import build; raise SystemExit(0 if build() else 1)"; } \
         || echo "WARNING: the compiled core was not built; this image's shard servers decide in Python"; } \
    && { pip uninstall -y maturin || true; } && rm -rf /tmp/rustup-init /root/.rustup /root/.cargo core/target \
    && apt-get purge -y --auto-remove curl gcc libc6-dev && rm -rf /var/lib/apt/lists/*
ENV ARBITER_HOME=/opt/arbiter ARBITER_VAR_DIR=/data PYSPARK_PYTHON=python3
VOLUME ["/data"]
ENTRYPOINT ["arbiter"]
