-- Rollback of 0008: the definitions of migration 0007.
DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.search(p_space text, p_embedding @vector@.vector, p_k integer DEFAULT 10, p_agent_id text DEFAULT NULL::text, p_session_id text DEFAULT NULL::text, p_filter jsonb DEFAULT NULL::jsonb, p_min_similarity double precision DEFAULT NULL::double precision, p_model text DEFAULT NULL::text, p_created_after timestamp with time zone DEFAULT NULL::timestamp with time zone, p_created_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_as_of timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF pgmem.memory
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET "hnsw.ef_search" TO '100'
 SET "hnsw.iterative_scan" TO 'relaxed_order'
 SET "hnsw.max_scan_tuples" TO '20000'
 SET enable_sort TO 'on'
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'pg_catalog', 'pgmem', 'pg_temp'
AS $function$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
    v_threshold integer := coalesce(nullif(current_setting('pgmem.exact_search_max_rows', true), '')::integer, 5000);
    v_plain boolean := p_agent_id IS NULL AND p_session_id IS NULL AND p_created_after IS NULL
                       AND p_created_before IS NULL AND p_as_of IS NULL AND (p_filter IS NULL OR p_filter = '{}'::jsonb);
    v_static boolean := p_as_of IS NULL AND (p_filter IS NULL OR p_filter = '{}'::jsonb);
    v_scope record;
    v_n bigint;
    v_stored bigint;
    v_fresh_large boolean;
    v_exact record;
    v_ids uuid[];
    v_ef integer;
    v_ef_setting text;
BEGIN
    IF p_embedding IS NULL THEN
        RAISE EXCEPTION 'a query embedding is required' USING ERRCODE = 'PGM08';
    END IF;
    IF p_k IS NULL OR p_k < 1 OR p_k > 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, got %', p_k USING ERRCODE = 'PGM08';
    END IF;
    IF p_min_similarity IS NOT NULL AND (p_min_similarity < -1 OR p_min_similarity > 1 OR p_min_similarity = 'NaN') THEN
        RAISE EXCEPTION 'min_similarity must be in [-1, 1], got %', p_min_similarity USING ERRCODE = 'PGM08';
    END IF;

    -- Routing. A shared HNSW index post-filters: for a tenant (or filter) holding a small share of the
    -- space it returns too few rows. So count the matching rows, capped, and scan them exactly when few.
    -- A plain search of a large tenant whose size is cached (pgmem.tenant_sizes) needs no count at all.
    IF v_space.index_kind <> 'exact' THEN
        IF v_plain THEN
            SELECT t.rows, t.rows > v_threshold
                   AND t.counted_at > now() - make_interval(secs => coalesce(nullif(current_setting('pgmem.route_cache_seconds', true), '')::integer, 60))
            INTO v_stored, v_fresh_large
            FROM pgmem.tenant_sizes t WHERE t.user_id = v_user AND t.space_id = v_space.space_id;
            IF v_fresh_large THEN
                v_n := v_stored;
            END IF;
        END IF;
        -- No filter, no as-of, no stored size (one that is not fresh, or no longer large, is checked by
        -- _matching_rows below, which stores the new count or removes it): the generated statement (migration
        -- 0006) counts the matching rows, capped, and finds the k nearest of them in the same pass.
        IF v_n IS NULL AND v_static AND v_stored IS NULL THEN
            -- (An assignment, not SELECT ... INTO: PL/pgSQL evaluates a lone function call without a statement.)
            v_exact := pgmem._exact_ids(v_user, p_agent_id, p_session_id, p_created_after, p_created_before, NULL, NULL, NULL,
                                        p_embedding, p_k, v_threshold + 1, v_space.space_id, v_space.memory_ttl);
            v_n := v_exact.o_rows;
            v_ids := v_exact.o_ids;
            IF v_n > v_threshold THEN
                v_ids := NULL;  -- many rows: HNSW below
                IF v_plain THEN
                    v_n := NULL;  -- a large tenant without a stored size: counted again just below, which stores it
                END IF;
            END IF;
        END IF;
        IF v_n IS NULL THEN
            v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
            v_n := pgmem._matching_rows(v_user, v_space, v_scope.o_sql, v_scope.o_filter, v_threshold,
                                        p_agent_id, p_session_id, p_created_after, p_created_before, p_filter, p_as_of);
        END IF;
    END IF;

    IF v_ids IS NULL AND v_space.index_kind <> 'exact' AND v_n > v_threshold THEN
        -- ef_search: max(pgmem.hnsw_ef_search (default 100), 2k), at most 1000 (pgvector's limit).
        v_ef_setting := nullif(current_setting('pgmem.hnsw_ef_search', true), '');
        IF v_ef_setting IS NOT NULL AND (v_ef_setting !~ '^[0-9]{1,4}$' OR v_ef_setting::integer NOT BETWEEN 1 AND 1000) THEN
            RAISE EXCEPTION 'pgmem.hnsw_ef_search must be an integer from 1 to 1000, got %', quote_literal(v_ef_setting)
                USING ERRCODE = 'PGM08';
        END IF;
        v_ef := least(1000, greatest(coalesce(v_ef_setting::integer, 100), 2 * p_k));
        IF v_ef <> 100 THEN
            PERFORM set_config('hnsw.ef_search', v_ef::text, true);
        END IF;
        IF p_k > 100 THEN
            PERFORM set_config('hnsw.max_scan_tuples', (200 * p_k)::text, true);
        END IF;
        IF v_static THEN
            v_ids := pgmem._knn(v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
                                NULL, NULL, NULL, p_embedding, p_k, v_space.space_id, v_space.memory_ttl);
        END IF;
        IF v_ids IS NULL THEN  -- a metadata filter or as-of (or a space _knn does not know): the same, dynamic
            IF v_scope IS NULL THEN
                v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
            END IF;
            PERFORM set_config('enable_sort', 'off', true);
            EXECUTE pgmem._knn_sql(v_space, v_scope.o_sql) INTO v_ids
            USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
                  (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text, p_embedding, p_k;
            PERFORM set_config('enable_sort', 'on', true);
        END IF;
        IF coalesce(cardinality(v_ids), 0) < p_k THEN
            -- The index gave fewer than k rows (a filter selective across the whole index): fall back to the
            -- exact scan below, which returns min(k, matching rows).
            v_ids := NULL;
        END IF;
    END IF;

    IF v_ids IS NOT NULL THEN
        -- The k nearest by the HNSW index (its order approximate: halfvec, relaxed_order) or by the generated
        -- exact statement: the rows come back in exact order.
        RETURN QUERY
            SELECT m.id, m.user_id, v_space.name, m.agent_id, m.session_id, m.content, m.metadata, m.created_at,
                   m.updated_at, nullif(pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl), 'infinity'),
                   m.version, greatest(-1, least(1, 1 - (m.embedding OPERATOR(@vector@.<=>) p_embedding))),
                   m.valid_from, m.valid_to, m.superseded_by
            -- unnest + join, not id = ANY(...): the cached generic plan of the latter scanned
            -- memories_user_space_created_idx instead of the primary key (1.5 ms instead of 0.3).
            FROM unnest(v_ids) AS u(id) JOIN pgmem.memories m ON m.user_id = v_user AND m.id = u.id
            WHERE p_min_similarity IS NULL OR 1 - (m.embedding OPERATOR(@vector@.<=>) p_embedding) >= p_min_similarity
            ORDER BY m.embedding OPERATOR(@vector@.<=>) p_embedding, m.id;
        RETURN;
    END IF;

    IF v_scope IS NULL THEN
        v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
    END IF;
    RETURN QUERY EXECUTE pgmem._exact_sql(v_space, v_scope.o_sql)
    USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text,
          p_embedding, p_k, v_space.name, p_min_similarity;
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.supersede(p_id uuid, p_content text, p_embedding @vector@.vector, p_metadata jsonb DEFAULT NULL::jsonb, p_valid_from timestamp with time zone DEFAULT NULL::timestamp with time zone, p_agent_id text DEFAULT NULL::text, p_expected_version integer DEFAULT NULL::integer, p_model text DEFAULT NULL::text, p_vector_kinds text[] DEFAULT NULL::text[], p_vectors @vector@.vector[] DEFAULT NULL::@vector@.vector[])
 RETURNS SETOF pgmem.memory
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgmem', 'pg_temp'
AS $function$
DECLARE
    v_user text := pgmem._require_user();
    v_old pgmem.memories := pgmem._lock_current(v_user, p_id);
    v_space pgmem.spaces;
    v_at timestamptz := coalesce(p_valid_from, now());
    v_new uuid;
    v_row pgmem.memories;
BEGIN
    SELECT * INTO v_space FROM pgmem.spaces s WHERE s.space_id = v_old.space_id;
    PERFORM pgmem._checked_space(v_space.name, p_embedding, p_model);
    IF p_embedding IS NULL OR p_content IS NULL THEN
        RAISE EXCEPTION 'superseding needs the new content and its embedding' USING ERRCODE = 'PGM08';
    END IF;
    IF p_expected_version IS NOT NULL AND p_expected_version <> v_old.version THEN
        RAISE EXCEPTION 'memory % is at version %, not %', p_id, v_old.version, p_expected_version USING ERRCODE = 'PGM04';
    END IF;
    IF p_content = v_old.content THEN
        RAISE EXCEPTION 'the new content of memory % is the same as the old; nothing to supersede', p_id USING ERRCODE = 'PGM08';
    END IF;
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'metadata must be a JSON object' USING ERRCODE = 'PGM08';
    END IF;
    IF v_at < v_old.valid_from THEN
        RAISE EXCEPTION 'the new fact cannot hold from % , before the old one began (%)', v_at, v_old.valid_from USING ERRCODE = 'PGM08';
    END IF;
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    -- The successor first: its content differs from the old fact's, so the old one does not block it.
    PERFORM pgmem._expire_conflicts(v_user, v_space, ARRAY[pgmem.content_hash(p_content)]);
    INSERT INTO pgmem.memories AS m (user_id, space_id, agent_id, session_id, content, embedding, metadata, expires_at, valid_from)
    VALUES (v_user, v_space.space_id, coalesce(p_agent_id, v_old.agent_id), v_old.session_id, p_content, p_embedding,
            v_old.metadata || coalesce(p_metadata, '{}'), v_old.expires_at, v_at)
    ON CONFLICT (user_id, space_id, content_hash) WHERE valid_to IS NULL DO NOTHING
    RETURNING m.id INTO v_new;
    IF v_new IS NULL THEN
        -- The new content already holds as another memory: that one is the successor.
        SELECT m.id INTO v_new FROM pgmem.memories m
        WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.content_hash = pgmem.content_hash(p_content)
          AND m.valid_to IS NULL;
    ELSE
        PERFORM pgmem._store_vectors(v_user, v_new, p_vector_kinds, p_vectors);
    END IF;
    PERFORM set_config('pgmem.event', 'SUPERSEDE', true);
    UPDATE pgmem.memories m SET valid_to = v_at, superseded_by = v_new WHERE m.user_id = v_user AND m.id = p_id;
    PERFORM set_config('pgmem.event', '', true);
    PERFORM set_config('pgmem.actor', '', true);
    SELECT * INTO v_row FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = v_new;
    RETURN NEXT pgmem._to_memory(v_row, v_space.name, NULL, v_space.memory_ttl);
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.invalidate(p_id uuid, p_valid_to timestamp with time zone DEFAULT NULL::timestamp with time zone, p_agent_id text DEFAULT NULL::text)
 RETURNS SETOF pgmem.memory
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgmem', 'pg_temp'
AS $function$
DECLARE
    v_user text := pgmem._require_user();
    v_row pgmem.memories := pgmem._lock_current(v_user, p_id);
    v_at timestamptz := coalesce(p_valid_to, now());
BEGIN
    IF v_at < v_row.valid_from THEN
        RAISE EXCEPTION 'a fact cannot stop holding at %, before it began (%)', v_at, v_row.valid_from USING ERRCODE = 'PGM08';
    END IF;
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    PERFORM set_config('pgmem.event', 'INVALIDATE', true);
    UPDATE pgmem.memories m SET valid_to = v_at WHERE m.user_id = v_user AND m.id = p_id RETURNING * INTO v_row;
    PERFORM set_config('pgmem.event', '', true);
    PERFORM set_config('pgmem.actor', '', true);
    RETURN NEXT (SELECT pgmem._to_memory(v_row, s.name, NULL, s.memory_ttl) FROM pgmem.spaces s WHERE s.space_id = v_row.space_id);
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.import_user(p_rows jsonb[])
 RETURNS TABLE(kind text, imported bigint, skipped bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgmem', 'pg_temp'
AS $function$
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
BEGIN
    -- Turns first (they get new ids; sources are mapped to them), then memories in their export order. A turn
    -- already present (same space, session, role, content and time) is not added again: its id is reused.
    FOR v_row IN SELECT r FROM unnest(p_rows) r WHERE r ->> 'kind' = 'turn' ORDER BY (r ->> 'turn_id')::bigint LOOP
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
        INSERT INTO pgmem.turns (user_id, space_id, session_id, agent_id, role, content, embedding, metadata, created_at, expires_at, consolidated_at)
        VALUES (v_user, v_space.space_id, v_row ->> 'session_id', v_row ->> 'agent_id', v_row ->> 'role', v_row ->> 'content',
                (v_row ->> 'embedding')::@vector@.vector, coalesce(v_row -> 'metadata', '{}'), (v_row ->> 'created_at')::timestamptz,
                (v_row ->> 'expires_at')::timestamptz, (v_row ->> 'consolidated_at')::timestamptz)
        RETURNING turns.turn_id INTO v_new;
        v_map := v_map || jsonb_build_object(v_row ->> 'turn_id', v_new);
        v_turn_in := v_turn_in + 1;
    END LOOP;
    FOR v_row IN SELECT r FROM unnest(p_rows) WITH ORDINALITY AS x(r, o) WHERE r ->> 'kind' = 'memory' ORDER BY o LOOP
        IF v_row -> 'embedding' IS NULL OR jsonb_typeof(v_row -> 'embedding') <> 'array' THEN
            RAISE EXCEPTION 'memory % has no embedding in the export', v_row ->> 'id'
                USING ERRCODE = 'PGM08', HINT = 'Export with embeddings to import: `pgmem export` without --no-embeddings, or pgmem.export_user(true).';
        END IF;
        v_space := pgmem._checked_space(v_row ->> 'space', (v_row ->> 'embedding')::@vector@.vector, NULL);
        INSERT INTO pgmem.memories AS m (user_id, id, space_id, agent_id, session_id, content, embedding, metadata, created_at,
                                         expires_at, valid_from, valid_to, superseded_by)
        VALUES (v_user, (v_row ->> 'id')::uuid, v_space.space_id, v_row ->> 'agent_id', v_row ->> 'session_id', v_row ->> 'content',
                (v_row ->> 'embedding')::@vector@.vector, coalesce(v_row -> 'metadata', '{}'), (v_row ->> 'created_at')::timestamptz,
                (v_row ->> 'expires_at')::timestamptz, (v_row ->> 'valid_from')::timestamptz, (v_row ->> 'valid_to')::timestamptz,
                (v_row ->> 'superseded_by')::uuid)
        ON CONFLICT DO NOTHING
        RETURNING m.id INTO v_id;
        IF v_id IS NULL THEN
            v_mem_skip := v_mem_skip + 1;
            CONTINUE;
        END IF;
        v_mem_in := v_mem_in + 1;
        INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
        SELECT v_user, v_id, e.o, e.v ->> 'kind', (e.v ->> 'embedding')::@vector@.vector
        FROM jsonb_array_elements(coalesce(v_row -> 'vectors', '[]')) WITH ORDINALITY AS e(v, o);
        INSERT INTO pgmem.memory_sources (user_id, memory_id, turn_id)
        SELECT v_user, v_id, coalesce((v_map ->> (s.t #>> '{}'))::bigint, (s.t #>> '{}')::bigint)
        FROM jsonb_array_elements(coalesce(v_row -> 'sources', '[]')) AS s(t)
        ON CONFLICT DO NOTHING;
    END LOOP;
    SELECT count(*) INTO v_hist_skip FROM unnest(p_rows) r WHERE r ->> 'kind' = 'history';
    FOR v_k IN SELECT DISTINCT r ->> 'kind' FROM unnest(p_rows) r WHERE coalesce(r ->> 'kind', '') NOT IN ('memory', 'turn', 'history') LOOP
        RAISE EXCEPTION 'unknown row kind %', quote_nullable(v_k) USING ERRCODE = 'PGM08';
    END LOOP;
    kind := 'memory'; imported := v_mem_in; skipped := v_mem_skip; RETURN NEXT;
    kind := 'turn'; imported := v_turn_in; skipped := v_turn_skip; RETURN NEXT;
    kind := 'history'; imported := 0; skipped := v_hist_skip; RETURN NEXT;
END
$function$
$def$); END $pgmem$;

