-- pgmem current schema, part 90: retention, erasure and export. purge (expired memories and turns, run by
-- a maintainer), schedule_purge (pg_cron), erase_user (every row of one user), export_user/import_user.

-- Maintenance (purge, erase) reads every user's rows: it runs as a superuser or a role with BYPASSRLS.
CREATE FUNCTION pgmem._require_maintainer(p_what text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = current_user AND (r.rolsuper OR r.rolbypassrls)) THEN
        RAISE EXCEPTION 'role "%" may not %: it needs to see every user''s rows', current_user, p_what
            USING ERRCODE = 'PGM01',
                  HINT = 'Run it as a superuser or a role with BYPASSRLS (the role that runs pg_dump), e.g. the schema owner: ALTER ROLE <owner> BYPASSRLS;';
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._require_maintainer(text) IS 'Internal: error PGM01 unless the current role is a superuser or has BYPASSRLS.';

CREATE FUNCTION pgmem.purge(p_limit integer DEFAULT 10000) RETURNS TABLE (memories bigint, turns bigint, history bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_now timestamptz := now();
    v_space pgmem.spaces;
    v_n bigint;
BEGIN
    PERFORM pgmem._require_maintainer('purge expired rows');
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be at least 1, got %', p_limit USING ERRCODE = 'PGM08';
    END IF;
    memories := 0;
    turns := 0;
    -- Space by space, the cut-off times computed first, and no FOR UPDATE SKIP LOCKED across users: Citus
    -- refuses both a row lock over many shards and a STABLE expression on a column in a statement that
    -- writes a distributed table. A row a writer holds is waited for, not skipped; a row a concurrent purge
    -- removed first is simply not counted here.
    SET LOCAL pgmem.event = 'EXPIRE';
    FOR v_space IN SELECT * FROM pgmem.spaces s ORDER BY s.space_id LOOP
        EXIT WHEN memories >= p_limit;
        DELETE FROM pgmem.memories m
        WHERE (m.user_id, m.id) IN (
            SELECT x.user_id, x.id FROM pgmem.memories x
            WHERE x.space_id = v_space.space_id
              AND (x.expires_at <= v_now OR (x.expires_at IS NULL AND x.created_at <= v_now - v_space.memory_ttl))
            LIMIT p_limit - memories);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        memories := memories + v_n;
    END LOOP;
    SET LOCAL pgmem.event = '';
    -- An expired memory keeps only its tombstone: the content in its earlier events goes too.
    WITH d AS (
        DELETE FROM pgmem.history h USING pgmem.history t
        WHERE t.event = 'EXPIRE' AND h.user_id = t.user_id AND h.memory_id = t.memory_id AND h.event <> 'EXPIRE'
        RETURNING 1
    )
    SELECT count(*) INTO history FROM d;
    FOR v_space IN SELECT * FROM pgmem.spaces s ORDER BY s.space_id LOOP
        EXIT WHEN turns >= p_limit;
        DELETE FROM pgmem.turns t
        WHERE (t.user_id, t.turn_id) IN (
            SELECT x.user_id, x.turn_id FROM pgmem.turns x
            WHERE x.space_id = v_space.space_id
              AND (x.expires_at <= v_now OR (x.expires_at IS NULL AND x.created_at <= v_now - v_space.turn_ttl))
            LIMIT p_limit - turns);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        turns := turns + v_n;
    END LOOP;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION pgmem.purge(integer) IS
    'Physically remove expired memories (leaving an EXPIRE tombstone in history and removing their other history events, content included) and expired turns, at most p_limit of each per call; returns the counts. Expired rows are already invisible; this frees them. Run it from a scheduler (pgmem.schedule_purge with pg_cron, or `pgmem purge`), as a superuser or a BYPASSRLS role.';

CREATE FUNCTION pgmem.schedule_purge(p_schedule text DEFAULT '*/10 * * * *') RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_job bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron') THEN
        RAISE EXCEPTION 'pg_cron is not installed in this database' USING ERRCODE = 'PGM00',
            HINT = 'Install pg_cron (CREATE EXTENSION pg_cron), or run `pgmem purge` from cron, a systemd timer or a Kubernetes CronJob.';
    END IF;
    EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO v_job
    USING 'pgmem-purge', p_schedule, 'SELECT * FROM pgmem.purge()';
    RETURN v_job;
END
$$;
COMMENT ON FUNCTION pgmem.schedule_purge(text) IS
    'With pg_cron: schedule SELECT * FROM pgmem.purge() as job ''pgmem-purge'' (cron syntax, default every 10 minutes), as the calling role; returns the job id. Without pg_cron: error PGM00.';

CREATE FUNCTION pgmem.erase_user(p_user_id text) RETURNS TABLE (table_name text, rows bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_table name;
BEGIN
    PERFORM pgmem._require_maintainer('erase a user');
    IF p_user_id IS NULL OR p_user_id = '' THEN
        RAISE EXCEPTION 'name the user to erase' USING ERRCODE = 'PGM08';
    END IF;
    -- No history is written for the erased rows (ERASE), and every table of the schema with a user_id
    -- column is covered, tables added by later migrations included: children first (the postings too, which the
    -- memories trigger would otherwise remove uncounted), then memories.
    PERFORM set_config('pgmem.event', 'ERASE', true);
    FOR v_table IN
        SELECT c.relname FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id' AND NOT a.attisdropped
        WHERE n.nspname = 'pgmem' AND c.relkind IN ('r', 'p')
        ORDER BY CASE c.relname WHEN 'memory_vectors' THEN 0 WHEN 'memory_sources' THEN 0 WHEN 'memory_terms' THEN 0
                                WHEN 'memories' THEN 1 ELSE 2 END, c.relname
    LOOP
        EXECUTE format('DELETE FROM pgmem.%I WHERE user_id = $1', v_table) USING p_user_id;
        table_name := v_table;
        GET DIAGNOSTICS rows = ROW_COUNT;
        RETURN NEXT;
    END LOOP;
    PERFORM set_config('pgmem.event', '', true);
END
$$;
COMMENT ON FUNCTION pgmem.erase_user(text) IS
    'Right to erasure: delete every row of one user from every pgmem table (memories, extra vectors, turns, sources, history, role bindings) in one transaction, writing no history; returns rows deleted per table. Other users are untouched. Superuser or BYPASSRLS only. Dead row versions stay on disk until VACUUM; backups keep them until rotated (docs/lifecycle.md).';

CREATE FUNCTION pgmem.export_user(p_embeddings boolean DEFAULT true) RETURNS SETOF jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    RETURN QUERY
    SELECT jsonb_build_object('kind', 'memory', 'id', m.id, 'user_id', m.user_id, 'space', s.name, 'agent_id', m.agent_id,
               'session_id', m.session_id, 'content', m.content, 'metadata', m.metadata, 'created_at', m.created_at,
               'updated_at', m.updated_at, 'expires_at', m.expires_at, 'version', m.version, 'valid_from', m.valid_from,
               'valid_to', m.valid_to, 'superseded_by', m.superseded_by,
               'embedding', CASE WHEN p_embeddings THEN m.embedding::text::jsonb END,
               'vectors', CASE WHEN p_embeddings THEN (SELECT coalesce(jsonb_agg(jsonb_build_object('kind', v.kind, 'embedding', v.embedding::text::jsonb) ORDER BY v.n), '[]')
                                                       FROM pgmem.memory_vectors v WHERE v.user_id = v_user AND v.memory_id = m.id) END,
               'sources', (SELECT coalesce(jsonb_agg(ms.turn_id ORDER BY ms.turn_id), '[]') FROM pgmem.memory_sources ms
                           WHERE ms.user_id = v_user AND ms.memory_id = m.id))
    FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
    WHERE m.user_id = v_user ORDER BY m.seq;
    RETURN QUERY
    SELECT jsonb_build_object('kind', 'turn', 'turn_id', t.turn_id, 'user_id', t.user_id, 'space', s.name, 'session_id', t.session_id,
               'agent_id', t.agent_id, 'role', t.role, 'content', t.content, 'metadata', t.metadata, 'created_at', t.created_at,
               'expires_at', t.expires_at, 'consolidated_at', t.consolidated_at,
               'embedding', CASE WHEN p_embeddings THEN t.embedding::text::jsonb END)
    FROM pgmem.turns t JOIN pgmem.spaces s USING (space_id)
    WHERE t.user_id = v_user ORDER BY t.turn_id;
    RETURN QUERY
    SELECT jsonb_build_object('kind', 'history', 'event_id', h.event_id, 'user_id', h.user_id, 'memory_id', h.memory_id, 'event', h.event,
               'old_content', h.old_content, 'new_content', h.new_content, 'old_metadata', h.old_metadata,
               'new_metadata', h.new_metadata, 'actor_agent_id', h.actor_agent_id, 'actor_role', h.actor_role,
               'created_at', h.created_at, 'related_id', h.related_id)
    FROM pgmem.history h WHERE h.user_id = v_user ORDER BY h.event_id;
END
$$;
COMMENT ON FUNCTION pgmem.export_user(boolean) IS
    'Everything pgmem holds of the current user, one JSON object per row: kind memory (all of them: expired, superseded included; with embedding and extra vectors unless p_embeddings is false, and source turn ids), kind turn, kind history. pgmem.import_user reads it back.';

CREATE FUNCTION pgmem.import_user(p_rows jsonb[]) RETURNS TABLE(kind text, imported bigint, skipped bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_row jsonb;
    v_space pgmem.spaces;
    v_new bigint;
    v_id uuid;
    v_map jsonb := '{}';
    v_mem_in bigint := 0; v_mem_skip bigint := 0;
    v_turn_in bigint := 0;
    v_turn_skip bigint := 0;
    v_hist_skip bigint := 0;
    v_k text;
    v_i integer;
    v_at bigint;
    v_keys text[];
    v_vec record;
    v_src record;
BEGIN
    -- Rows are read as p_rows[1..n] here and by unnest below: an array of more dimensions or another lower bound
    -- (possible from SQL) would pass the checks as NULLs and be written all the same.
    IF array_ndims(p_rows) > 1 OR array_lower(p_rows, 1) <> 1 THEN
        RAISE EXCEPTION 'rows must be a one-dimensional array starting at index 1' USING ERRCODE = 'PGM08';
    END IF;
    -- Every key of a row is one that pgmem.export_user writes for its kind (some, such as user_id, are not read:
    -- the rows go to the importing user). A misspelt key would otherwise be ignored and its value lost: the
    -- memory stored without its metadata, the turn without its session.
    FOR v_i IN 1 .. coalesce(cardinality(p_rows), 0) LOOP
        v_row := p_rows[v_i];
        v_keys := CASE v_row ->> 'kind'
            WHEN 'memory' THEN ARRAY['kind', 'id', 'user_id', 'space', 'agent_id', 'session_id', 'content', 'metadata',
                                     'created_at', 'updated_at', 'expires_at', 'version', 'valid_from', 'valid_to',
                                     'superseded_by', 'embedding', 'vectors', 'sources']
            WHEN 'turn' THEN ARRAY['kind', 'turn_id', 'user_id', 'space', 'session_id', 'agent_id', 'role', 'content',
                                   'metadata', 'created_at', 'expires_at', 'consolidated_at', 'embedding']
            WHEN 'history' THEN ARRAY['kind', 'event_id', 'user_id', 'memory_id', 'event', 'old_content', 'new_content',
                                      'old_metadata', 'new_metadata', 'actor_agent_id', 'actor_role', 'created_at',
                                      'related_id']
        END;
        CONTINUE WHEN v_keys IS NULL;  -- an unknown kind: refused below, after the rows it would not stop
        SELECT min(x.k) INTO v_k FROM jsonb_object_keys(v_row) AS x(k) WHERE x.k <> ALL (v_keys);
        IF v_k IS NULL AND jsonb_typeof(v_row -> 'vectors') = 'array' THEN  -- an extra vector: its kind and embedding
            SELECT min(x.k) INTO v_k FROM jsonb_array_elements(v_row -> 'vectors') AS e(v)
            CROSS JOIN LATERAL jsonb_object_keys(CASE jsonb_typeof(e.v) WHEN 'object' THEN e.v ELSE '{}' END) AS x(k)
            WHERE x.k NOT IN ('kind', 'embedding');
            IF v_k IS NOT NULL THEN
                RAISE EXCEPTION 'row %: unknown key % in an extra vector of a memory row', v_i, to_json(v_k)::text
                    USING ERRCODE = 'PGM08', HINT = 'An extra vector holds kind and embedding.';
            END IF;
        END IF;
        IF v_k IS NOT NULL THEN
            RAISE EXCEPTION 'row %: unknown key % in a % row', v_i, to_json(v_k)::text, v_row ->> 'kind'
                USING ERRCODE = 'PGM08', HINT = 'A ' || (v_row ->> 'kind') || ' row has the keys ' || array_to_string(v_keys, ', ')
                                                || ' (those pgmem.export_user writes).';
        END IF;
        IF v_row ->> 'kind' = 'turn' AND NOT coalesce(jsonb_typeof(v_row -> 'turn_id') = 'number'
                                                      AND (v_row ->> 'turn_id')::numeric = trunc((v_row ->> 'turn_id')::numeric)
                                                      AND abs((v_row ->> 'turn_id')::numeric) < 9e18, false) THEN
            RAISE EXCEPTION 'row %: a turn row''s turn_id must be a whole number, got %', v_i, coalesce(v_row -> 'turn_id', 'null')
                USING ERRCODE = 'PGM08';
        END IF;
        IF v_row ->> 'kind' = 'memory' THEN  -- as pgmem.add takes them: at most 1000 extra vectors, each an object
            IF jsonb_typeof(v_row -> 'vectors') NOT IN ('array', 'null') OR jsonb_typeof(v_row -> 'sources') NOT IN ('array', 'null') THEN
                RAISE EXCEPTION 'row %: vectors and sources must be arrays', v_i USING ERRCODE = 'PGM08';
            END IF;
            IF jsonb_typeof(v_row -> 'vectors') = 'array' AND jsonb_array_length(v_row -> 'vectors') > 1000 THEN
                RAISE EXCEPTION 'row %: a memory holds at most 1000 extra vectors', v_i USING ERRCODE = 'PGM08';
            END IF;
            IF jsonb_typeof(v_row -> 'vectors') = 'array' AND EXISTS (SELECT 1 FROM jsonb_array_elements(v_row -> 'vectors') AS e(v)
                       WHERE jsonb_typeof(e.v) <> 'object' OR coalesce(e.v ->> 'kind', '') NOT IN ('sentence', 'context')) THEN
                RAISE EXCEPTION 'row %: an extra vector is an object of kind sentence or context', v_i USING ERRCODE = 'PGM08';
            END IF;
            -- pgmem.update adds 1 to the version: a version it could not add 1 to would make every later update fail.
            IF (CASE jsonb_typeof(v_row -> 'version')
                    WHEN 'number' THEN (v_row ->> 'version')::numeric NOT BETWEEN 1 AND 2147483646
                                       OR (v_row ->> 'version')::numeric <> trunc((v_row ->> 'version')::numeric)
                    WHEN 'null' THEN false ELSE jsonb_typeof(v_row -> 'version') IS NOT NULL END) THEN
                RAISE EXCEPTION 'row %: version must be a whole number from 1 to 2147483646, got %', v_i, v_row -> 'version'
                    USING ERRCODE = 'PGM08';
            END IF;
        END IF;
    END LOOP;
    -- Turns first (they get new ids; sources are mapped to them), then memories in their export order. A turn
    -- already present (same space, session, role, content and time) is not added again: its id is reused.
    -- A value the tables refuse (a missing content, a bad time or uuid, a role or metadata of the wrong kind) is
    -- PGM08 naming its row (v_at, 1-based), not the table's or the cast's own error: one block for all rows.
    BEGIN
    FOR v_row, v_at IN SELECT x.r, x.o FROM unnest(p_rows) WITH ORDINALITY AS x(r, o) WHERE x.r ->> 'kind' = 'turn'
                       ORDER BY (x.r ->> 'turn_id')::numeric LOOP
        v_space := pgmem._checked_space(v_row ->> 'space', (v_row ->> 'embedding')::@vector@.vector, NULL);
        SELECT t.turn_id INTO v_new FROM pgmem.turns t
        WHERE t.user_id = v_user AND t.space_id = v_space.space_id AND t.session_id = v_row ->> 'session_id'
          AND t.role = v_row ->> 'role' AND t.content = v_row ->> 'content'
          AND t.created_at = (v_row ->> 'created_at')::timestamptz
        LIMIT 1;
        IF FOUND THEN
            v_map := v_map || jsonb_build_object(v_row ->> 'turn_id', v_new);
            v_turn_skip := v_turn_skip + 1;
            CONTINUE;
        END IF;
        PERFORM pgmem._check_time((v_row ->> 'created_at')::timestamptz, 'turn created_at');
        PERFORM pgmem._check_time((v_row ->> 'expires_at')::timestamptz, 'turn expires_at', true);
        PERFORM pgmem._check_time((v_row ->> 'consolidated_at')::timestamptz, 'turn consolidated_at');
        INSERT INTO pgmem.turns (user_id, space_id, session_id, agent_id, role, content, embedding, metadata, created_at, expires_at, consolidated_at)
        VALUES (v_user, v_space.space_id, v_row ->> 'session_id', v_row ->> 'agent_id', v_row ->> 'role', v_row ->> 'content',
                (v_row ->> 'embedding')::@vector@.vector, coalesce(v_row -> 'metadata', '{}'), (v_row ->> 'created_at')::timestamptz,
                (v_row ->> 'expires_at')::timestamptz, (v_row ->> 'consolidated_at')::timestamptz)
        RETURNING turns.turn_id INTO v_new;
        v_map := v_map || jsonb_build_object(v_row ->> 'turn_id', v_new);
        v_turn_in := v_turn_in + 1;
    END LOOP;
    FOR v_row, v_at IN SELECT x.r, x.o FROM unnest(p_rows) WITH ORDINALITY AS x(r, o) WHERE x.r ->> 'kind' = 'memory'
                       ORDER BY x.o LOOP
        IF v_row -> 'embedding' IS NULL OR jsonb_typeof(v_row -> 'embedding') <> 'array' THEN
            RAISE EXCEPTION 'memory % has no embedding in the export', v_row ->> 'id'
                USING ERRCODE = 'PGM08', HINT = 'Export with embeddings to import: `pgmem export` without --no-embeddings, or pgmem.export_user(true).';
        END IF;
        v_space := pgmem._checked_space(v_row ->> 'space', (v_row ->> 'embedding')::@vector@.vector, NULL);
        INSERT INTO pgmem.memories AS m (user_id, id, space_id, agent_id, session_id, content, embedding, metadata, created_at,
                                         expires_at, valid_from, valid_to, superseded_by, version)
        VALUES (v_user, (v_row ->> 'id')::uuid, v_space.space_id, v_row ->> 'agent_id', v_row ->> 'session_id', v_row ->> 'content',
                (v_row ->> 'embedding')::@vector@.vector, coalesce(v_row -> 'metadata', '{}'), (v_row ->> 'created_at')::timestamptz,
                (v_row ->> 'expires_at')::timestamptz, (v_row ->> 'valid_from')::timestamptz, (v_row ->> 'valid_to')::timestamptz,
                (v_row ->> 'superseded_by')::uuid, coalesce((v_row ->> 'version')::numeric::integer, 1))
        ON CONFLICT DO NOTHING
        RETURNING m.id INTO v_id;
        IF v_id IS NULL THEN
            v_mem_skip := v_mem_skip + 1;
            CONTINUE;
        END IF;
        v_mem_in := v_mem_in + 1;
        -- Row by row (INSERT ... VALUES): Citus runs an INSERT ... SELECT from a set-returning function as COPY,
        -- which row-level security refuses.
        FOR v_vec IN SELECT e.o, e.v FROM jsonb_array_elements(coalesce(v_row -> 'vectors', '[]')) WITH ORDINALITY AS e(v, o) LOOP
            INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
            VALUES (v_user, v_id, v_vec.o, v_vec.v ->> 'kind', (v_vec.v ->> 'embedding')::@vector@.vector);
        END LOOP;
        FOR v_src IN SELECT DISTINCT coalesce((v_map ->> (s.t #>> '{}'))::bigint, (s.t #>> '{}')::bigint) AS turn_id
                     FROM jsonb_array_elements(coalesce(v_row -> 'sources', '[]')) AS s(t) LOOP
            INSERT INTO pgmem.memory_sources (user_id, memory_id, turn_id) VALUES (v_user, v_id, v_src.turn_id)
            ON CONFLICT DO NOTHING;
        END LOOP;
    END LOOP;
    EXCEPTION WHEN integrity_constraint_violation OR data_exception THEN
        RAISE EXCEPTION 'row %: %', v_at, SQLERRM USING ERRCODE = 'PGM08', HINT = 'Rows are numbered from 1; nothing was imported.';
    END;
    SELECT count(*) INTO v_hist_skip FROM unnest(p_rows) r WHERE r ->> 'kind' = 'history';
    FOR v_k IN SELECT DISTINCT r ->> 'kind' FROM unnest(p_rows) r WHERE coalesce(r ->> 'kind', '') NOT IN ('memory', 'turn', 'history') LOOP
        RAISE EXCEPTION 'unknown row kind %', quote_nullable(v_k) USING ERRCODE = 'PGM08';
    END LOOP;
    kind := 'memory'; imported := v_mem_in; skipped := v_mem_skip; RETURN NEXT;
    kind := 'turn'; imported := v_turn_in; skipped := v_turn_skip; RETURN NEXT;
    kind := 'history'; imported := 0; skipped := v_hist_skip; RETURN NEXT;
END
$$;
COMMENT ON FUNCTION pgmem.import_user(jsonb[]) IS
    'Read rows of pgmem.export_user back in for the current user, all or nothing: memories keep their ids, times, validity, metadata, embeddings, extra vectors and source links; turns get new ids (links follow them); a turn already present (same space, session, role, content, time) is skipped. History rows are not replayed (the import writes its own ADD events); they are counted as skipped. A memory whose id or current content already exists is skipped. A row with a key export_user does not write for its kind is refused (PGM08), naming the row (1-based) and the key.';
