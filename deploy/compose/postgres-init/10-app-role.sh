#!/bin/sh
# First start of the stack's PostgreSQL (run by the image's entrypoint from
# /docker-entrypoint-initdb.d): the application role every query runs as, with its password
# from .env. The services' first migration creates the role when it is missing, but without
# a password, and password authentication needs one.
set -eu
psql -v ON_ERROR_STOP=1 -v app_password="$PULSE_APP_DB_PASSWORD" \
  --username "$POSTGRES_USER" --dbname "${POSTGRES_DB:-$POSTGRES_USER}" <<'SQL'
CREATE ROLE pulse_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT
  PASSWORD :'app_password';
SQL
