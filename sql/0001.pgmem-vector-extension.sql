-- pgmem: require pgvector >= 0.8, creating the extension when this role may; nothing else runs before this check
-- depends:

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
