#!/bin/sh
# First start of the database only (docs/deployment.md): the schema owner, which runs the migrations; pgmem's
# three NOLOGIN roles exactly as migrations 0002 and 0007 would create them (they keep existing ones), the
# function owner pgmem_api granted to the schema owner as 0007 requires; and the service's login
# pgmem_service, a member of pgmem_gateway and nothing else. Never give pgmem_api a LOGIN: it owns the API's
# SECURITY DEFINER functions, so a login of that name could read every tenant's rows (pgmem doctor checks).
# The owner gets CREATE on schema public for yoyo's bookkeeping tables (PostgreSQL 15 and newer grant none).
# Passwords come from the secret files deploy/make-secrets.sh writes (owned by the postgres user, 0600).
set -eu
secrets=${PGMEM_SECRETS_DIR:-/run/secrets}  # where compose mounts them
owner_pw=$(cat "$secrets/db_owner_password")
api_pw=$(cat "$secrets/db_service_password")
psql -v ON_ERROR_STOP=1 --username postgres --dbname pgmem \
     -v owner_pw="$owner_pw" -v api_pw="$api_pw" <<'SQL'
CREATE ROLE pgmem_owner LOGIN PASSWORD :'owner_pw';
CREATE ROLE pgmem_agent NOLOGIN NOINHERIT NOBYPASSRLS;
CREATE ROLE pgmem_gateway NOLOGIN NOBYPASSRLS;
GRANT pgmem_agent TO pgmem_gateway;
CREATE ROLE pgmem_api NOLOGIN NOINHERIT NOBYPASSRLS;
GRANT pgmem_api TO pgmem_owner;
CREATE ROLE pgmem_service LOGIN NOBYPASSRLS PASSWORD :'api_pw';
GRANT pgmem_gateway TO pgmem_service;
GRANT CREATE ON DATABASE pgmem TO pgmem_owner;
GRANT CREATE ON SCHEMA public TO pgmem_owner;
CREATE EXTENSION IF NOT EXISTS vector;
SQL
