# The service in one image: Python 3.11 (slim Debian) with Java 17 for Spark, installed by `make install`,
# the step `make run` runs first. Data (catalog, warehouse, labels) lives in the /data volume.
#   docker build -t doris-stream-load-spark .
#   docker run -p 8030:8030 -p 9030:9030 -e SL_ROOT_PASSWORD=change-me -v doris-data:/data doris-stream-load-spark
# The server listens on every address inside the container, so it refuses to start without SL_ROOT_PASSWORD.
# It runs as the unprivileged user `doris`, which owns only /data (and /shared, SL_SHARED_DIR on a Spark
# cluster: docker-compose.yml).
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless make procps curl \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /srv/app
COPY . .
RUN make install PYTHON=python3

RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin doris \
    && mkdir -p /data /shared && chown doris:doris /data /shared

ENV SL_HOST=0.0.0.0 \
    SL_DATA_DIR=/data
VOLUME ["/data"]
USER doris
EXPOSE 8030 9030

ENTRYPOINT [".venv/bin/python", "-m", "app"]
