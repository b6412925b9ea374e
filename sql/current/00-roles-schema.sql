-- pgmem current schema, part 00: pgvector, the roles, the schema, and the helper that writes pgvector's schema
-- into definitions. See README.md in this folder for what is where and how a change becomes a migration.

-- pgvector >= 0.8, created when this role may (nothing else runs before this check).
DO $pgmem$
DECLARE
    v_version text;
BEGIN
    SELECT e.extversion INTO v_version FROM pg_catalog.pg_extension e WHERE e.extname = 'vector';
    IF v_version IS NULL THEN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions a WHERE a.name = 'vector') THEN
            RAISE EXCEPTION 'pgmem needs the pgvector extension (>= 0.8), which is not installed on this server'
                USING ERRCODE = 'PGM00',
                      HINT = 'Install pgvector on the server (https://github.com/pgvector/pgvector), then have a superuser run in database '
                             || quote_ident(current_database()) || ': CREATE EXTENSION vector;';
        END IF;
        BEGIN
            CREATE EXTENSION vector;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'pgmem needs the pgvector extension, and role "%" may not create it', current_user
                USING ERRCODE = 'PGM00',
                      HINT = 'Ask a superuser to run, in database ' || quote_ident(current_database())
                             || ': CREATE EXTENSION vector;  then run the migration again.';
        END;
        SELECT e.extversion INTO v_version FROM pg_catalog.pg_extension e WHERE e.extname = 'vector';
    END IF;
    IF string_to_array(split_part(v_version, '-', 1), '.')::int[] < ARRAY[0, 8] THEN
        RAISE EXCEPTION 'pgmem needs pgvector >= 0.8 (iterative index scans); this database has %', v_version
            USING ERRCODE = 'PGM00',
                  HINT = 'Install pgvector >= 0.8 on the server, then have a superuser run: ALTER EXTENSION vector UPDATE;';
    END IF;
END
$pgmem$;

-- ---------------------------------------------------------------------------------------------------------
-- Roles (cluster-wide, so created only when missing). pgmem_agent: runtime, no DDL, no RLS bypass.
-- pgmem_gateway: a trusted service that names the user it acts for, per transaction (pgmem.act_as).
-- Objects are owned by the role that runs this migration: the schema owner.
-- ---------------------------------------------------------------------------------------------------------
DO $pgmem$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_agent') THEN
        CREATE ROLE pgmem_agent NOLOGIN NOINHERIT NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_gateway') THEN
        CREATE ROLE pgmem_gateway NOLOGIN NOBYPASSRLS;
    END IF;
    -- Only when missing: granting a role needs ADMIN on it, which a non-superuser schema owner lacks.
    IF NOT pg_has_role('pgmem_gateway', 'pgmem_agent', 'MEMBER') THEN
        GRANT pgmem_agent TO pgmem_gateway;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE EXCEPTION 'pgmem needs the roles pgmem_agent and pgmem_gateway, pgmem_agent granted to pgmem_gateway, and role "%" may not create them', current_user
        USING ERRCODE = 'PGM00',
              HINT = 'Ask a DBA to run: CREATE ROLE pgmem_agent NOLOGIN NOINHERIT NOBYPASSRLS; '
                     || 'CREATE ROLE pgmem_gateway NOLOGIN NOBYPASSRLS; GRANT pgmem_agent TO pgmem_gateway;';
END
$pgmem$;

-- pgmem_api owns the API functions (SECURITY DEFINER), which is how agents and gateways reach the tables
-- without holding a privilege on them (docs/security.md).
DO $pgmem$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_api') THEN
        CREATE ROLE pgmem_api NOLOGIN NOINHERIT NOBYPASSRLS;
        -- (commenting on a role needs CREATEROLE: only where it is created)
        COMMENT ON ROLE pgmem_api IS 'pgmem: owns the API functions (SECURITY DEFINER) and holds the table privileges they need; never a login, no BYPASSRLS.';
    END IF;
    -- The schema owner hands its functions to pgmem_api (ALTER FUNCTION ... OWNER TO), so it must be able
    -- to SET ROLE pgmem_api. A superuser can anyway; a role that just created pgmem_api holds ADMIN on it.
    IF NOT pg_catalog.pg_has_role(current_user, 'pgmem_api', 'SET') THEN
        EXECUTE pg_catalog.format('GRANT pgmem_api TO %I', current_user);
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE EXCEPTION 'pgmem needs the role pgmem_api, granted to the schema owner "%", and that role may not create or grant it', current_user
        USING ERRCODE = 'PGM00',
              HINT = pg_catalog.format('Ask a DBA to run: CREATE ROLE pgmem_api NOLOGIN NOINHERIT NOBYPASSRLS; GRANT pgmem_api TO %I;', current_user);
END
$pgmem$;

-- Load pgvector's library in this session, so that hnsw.* settings are its real settings, not placeholders.
DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;

CREATE SCHEMA pgmem;
COMMENT ON SCHEMA pgmem IS 'pgmem: shared, durable memory for AI agents. The API is the functions in this schema; see \df+ pgmem.*';

-- Definitions in this folder write @vector@ where pgvector's schema goes: migrations run them through
-- pgmem._define, the loader of this folder (tools/schema_source.py) replaces it the same way.
-- pgvector's schema, and the helper that writes it into a definition. Owner only.
CREATE FUNCTION pgmem._vector_schema() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT n.nspname::text FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'vector'
$$;
COMMENT ON FUNCTION pgmem._vector_schema() IS 'Internal: the schema pgvector is installed in (pg_extension), which definitions name in place of @vector@.';

CREATE FUNCTION pgmem._define(p_sql text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_schema text := pgmem._vector_schema();
BEGIN
    IF v_schema IS NULL THEN
        RAISE EXCEPTION 'pgvector is not installed in this database' USING ERRCODE = 'PGM00', HINT = 'CREATE EXTENSION vector;';
    END IF;
    EXECUTE replace(p_sql, '@vector@', quote_ident(v_schema));
END
$$;
COMMENT ON FUNCTION pgmem._define(text) IS
    'Migrations only (schema owner): run a definition after putting pgvector''s schema, quoted, in place of every @vector@, so that definer functions name pgvector''s types, functions and operators schema-qualified.';
