# PostgreSQL from Debian's packages on the local base, for the compose stack on machines that
# cannot pull images. Takes the official image's POSTGRES_USER, POSTGRES_PASSWORD and
# POSTGRES_DB, and PGPORT; data in /var/lib/postgresql/data.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
 && install -d -o postgres -g postgres -m 0775 /var/run/postgresql
COPY postgres-entrypoint /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
USER postgres
VOLUME /var/lib/postgresql/data
HEALTHCHECK --interval=5s --timeout=5s --retries=10 CMD ["sh", "-c", "pg_isready -q -h 127.0.0.1 -p \"${PGPORT:-5432}\""]
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
