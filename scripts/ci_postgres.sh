#!/usr/bin/env bash
# A local PostgreSQL server for the db tests (Debian/Ubuntu): installs it if missing, starts the cluster on
# 127.0.0.1, (re)creates an empty database and a user allowed to create the tests' scratch databases, then prints
# the URL on stdout (everything else goes to stderr). Idempotent. Usage:
#   KFORGE_TEST_POSTGRES_URL=$(bash scripts/ci_postgres.sh); export KFORGE_TEST_POSTGRES_URL
set -euo pipefail
DB=${KFORGE_PG_DB:-kforge_test}
USER_NAME=${KFORGE_PG_USER:-kforge}
PASSWORD=${KFORGE_PG_PASSWORD:-kforge}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
as_postgres() { as_root runuser -u postgres -- "$@"; }

if ! command -v pg_lsclusters >/dev/null; then
    as_root apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
VERSION=$(ls /usr/lib/postgresql | sort -V | tail -1)
pg_lsclusters -h | grep -q "^$VERSION main " || as_root pg_createcluster "$VERSION" main >&2
as_root pg_ctlcluster "$VERSION" main status >/dev/null 2>&1 || as_root pg_ctlcluster "$VERSION" main start >&2
PORT=$(pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" {print $3}')

as_postgres psql -q -p "$PORT" -v ON_ERROR_STOP=1 >&2 <<SQL
SET client_min_messages = warning;
SELECT format('CREATE ROLE %I LOGIN', '$USER_NAME') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$USER_NAME')
\gexec
ALTER ROLE "$USER_NAME" WITH LOGIN CREATEDB PASSWORD '$PASSWORD';
DROP DATABASE IF EXISTS "$DB" WITH (FORCE);
CREATE DATABASE "$DB" OWNER "$USER_NAME";
SQL
echo "postgresql+psycopg://$USER_NAME:$PASSWORD@127.0.0.1:$PORT/$DB"
