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
ENV ARBITER_HOME=/opt/arbiter ARBITER_VAR_DIR=/data PYSPARK_PYTHON=python3
VOLUME ["/data"]
ENTRYPOINT ["arbiter"]
