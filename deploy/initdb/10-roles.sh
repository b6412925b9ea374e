#!/bin/sh
# First start of the database only (docs/deployment.md): the schema owner, which runs the migrations; pgmem's
# two NOLOGIN roles exactly as migration 0002 would create them (it keeps existing ones); and the API's
# login, a member of pgmem_gateway and nothing else. Passwords come from the pgpass secret files.
set -eu
owner_pw=$(cut -d: -f5 /run/secrets/pgpass_owner)
api_pw=$(cut -d: -f5 /run/secrets/pgpass_api)
psql -v ON_ERROR_STOP=1 --username postgres --dbname pgmem \
     -v owner_pw="$owner_pw" -v api_pw="$api_pw" <<'SQL'
CREATE ROLE pgmem_owner LOGIN PASSWORD :'owner_pw';
CREATE ROLE pgmem_agent NOLOGIN NOINHERIT NOBYPASSRLS;
CREATE ROLE pgmem_gateway NOLOGIN NOBYPASSRLS;
GRANT pgmem_agent TO pgmem_gateway;
CREATE ROLE pgmem_api LOGIN NOBYPASSRLS PASSWORD :'api_pw';
GRANT pgmem_gateway TO pgmem_api;
GRANT CREATE ON DATABASE pgmem TO pgmem_owner;
CREATE EXTENSION IF NOT EXISTS vector;
SQL
