-- pgmem holds-now and limits: one rule for what holds now, a tolerance on min_similarity, versions kept by
-- import; and the fixes of a review of 0007 as an attacker (locks, retention, text configurations, edit, statistics)
-- depends: 0007.pgmem-api-only

-- * supersede refuses a valid_from in the future, and invalidate a valid_to in the future (more than 5 s
--   ahead of the server's clock; less counts as now): search, list,
--   context and stats show what holds now, and a fact starting later hid both the old and the new one until
--   then (expires_at is how a memory disappears later).
-- * search applies min_similarity with a tolerance of 1e-5 (float4 cosine of parallel vectors can be
--   0.99999996).
-- * import_user keeps the version of an exported memory (expected_version keeps working after a round trip).
-- Bodies otherwise as in migration 0007; owners, settings and grants are kept by CREATE OR REPLACE.

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
    -- A tolerance of 1e-5: pgvector computes cosine in float4, so a vector and a multiple of it can score
    -- 0.99999996 (x1000) and min_similarity = 1.0 would drop exactly parallel vectors.
    p_min_similarity := p_min_similarity - 1e-5;

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
    -- A client's clock may run a little ahead of the server's: up to 5 seconds counts as now.
    IF v_at > now() + interval '5 seconds' THEN
        RAISE EXCEPTION 'valid_from % is in the future: a fact holds from now or from a time past', v_at USING ERRCODE = 'PGM08',
            HINT = 'Supersede when the change happens; until then both facts would be hidden from search, list and context.';
    END IF;
    v_at := least(v_at, now());
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
    IF v_at > now() + interval '5 seconds' THEN
        RAISE EXCEPTION 'valid_to % is in the future: a fact stops holding now or at a time past', v_at USING ERRCODE = 'PGM08',
            HINT = 'For a memory that should disappear later, set its expires_at.';
    END IF;
    v_at := least(v_at, now());
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
                                         expires_at, valid_from, valid_to, superseded_by, version)
        VALUES (v_user, (v_row ->> 'id')::uuid, v_space.space_id, v_row ->> 'agent_id', v_row ->> 'session_id', v_row ->> 'content',
                (v_row ->> 'embedding')::@vector@.vector, coalesce(v_row -> 'metadata', '{}'), (v_row ->> 'created_at')::timestamptz,
                (v_row ->> 'expires_at')::timestamptz, (v_row ->> 'valid_from')::timestamptz, (v_row ->> 'valid_to')::timestamptz,
                (v_row ->> 'superseded_by')::uuid, coalesce((v_row ->> 'version')::integer, 1))
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

-- ---------------------------------------------------------------------------------------------------------
-- Found by a review of 0007 as an attacker with a psql prompt (tests/security/test_attacks.py, last part)
-- ---------------------------------------------------------------------------------------------------------
-- edit needs to know whether its text occurs once, and the count for its error (CASES.md C04): count
-- overlapping occurrences up to a cap, each found by one strpos over the rest of the content, so a long
-- repetitive text costs at most cap scans of it. count_occurrences stays as it is.
CREATE FUNCTION pgmem._occurrences_up_to(p_haystack text, p_needle text, p_cap integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_count integer := 0;
    v_pos integer;
    v_rest text := p_haystack;
BEGIN
    IF p_needle = '' THEN
        RAISE EXCEPTION 'the text to count must not be empty' USING ERRCODE = 'PGM08';
    END IF;
    LOOP
        v_pos := strpos(v_rest, p_needle);
        EXIT WHEN v_pos = 0;
        v_count := v_count + 1;
        EXIT WHEN v_count >= p_cap;
        v_rest := substr(v_rest, v_pos + 1);
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION pgmem._occurrences_up_to(text, text, integer) IS
    'Internal: the number of occurrences (overlapping ones count) of p_needle in p_haystack, at most p_cap.';
REVOKE EXECUTE ON FUNCTION pgmem._occurrences_up_to(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgmem._occurrences_up_to(text, text, integer) TO pgmem_api;

-- _expiry names its type schema-qualified: inlined into the view, it is parsed with the reader's
-- search_path, where a domain pg_temp.timestamptz could stand first.
CREATE OR REPLACE FUNCTION pgmem._expiry(p_expires_at timestamptz, p_created_at timestamptz, p_ttl interval) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT coalesce(p_expires_at, p_created_at + p_ttl, 'infinity'::pg_catalog.timestamptz) $$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._build_knn()
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgmem', 'pg_temp'
AS $function$
DECLARE
    v_space pgmem.spaces;
    v_body text := '';
    v_exact text := '';
    v_scope text;
    v_test text;
BEGIN
    -- Two sessions creating spaces at once would otherwise both replace the function ("tuple concurrently
    -- updated").
    -- (Serialised on a table lock only the schema owner can take: an advisory lock, which any role can take,
    -- let a login stall every space creation and, behind it, every tenant's writes.)
    LOCK TABLE pgmem.spaces IN SHARE ROW EXCLUSIVE MODE;
    FOR v_space IN SELECT * FROM pgmem.spaces s WHERE s.index_kind <> 'exact' ORDER BY s.space_id LOOP
        v_scope := (pgmem._scope_sql(v_space.space_id, NULL::jsonb, NULL::timestamptz)).o_sql;
        v_test := format('p_space_id = %s AND p_ttl IS NOT DISTINCT FROM %L::interval', v_space.space_id, v_space.memory_ttl);
        v_body := v_body || format(E'    IF %s THEN\n        RETURN (%s);\n    END IF;\n',
            v_test, pgmem._knn_sql(v_space, v_scope));
        v_exact := v_exact || format(E'    IF %s THEN\n        %s INTO o_rows, o_ids;\n        RETURN;\n    END IF;\n',
            v_test, pgmem._exact_ids_sql(v_scope));
    END LOOP;
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION pgmem._knn(
    p_user text, p_agent_id text, p_session_id text, p_created_after timestamptz, p_created_before timestamptz,
    p_keys text[], p_vals jsonb[], p_contains text, p_embedding @vector@.vector, p_k integer, p_space_id integer, p_ttl interval
) RETURNS uuid[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp SET plan_cache_mode = force_generic_plan SET enable_sort = off
AS $knn$
BEGIN
    -- Generated by pgmem._build_knn() from pgmem.spaces: do not edit.
%s    RETURN NULL;  -- not generated for this space or TTL: the caller runs the same statement as dynamic SQL
END
$knn$;
$f$, v_body);
    COMMENT ON FUNCTION pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, integer, interval) IS
        'Internal, generated by pgmem._build_knn(): the ids of the k nearest memories of the current user in a space by its HNSW index (plain scope), or NULL when not generated for that space and TTL.';
    REVOKE EXECUTE ON FUNCTION pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, integer, interval) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, integer, interval) TO pgmem_api;

    -- The exact route's statement (migration 0006), for the same spaces and TTLs.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION pgmem._exact_ids(
    p_user text, p_agent_id text, p_session_id text, p_created_after timestamptz, p_created_before timestamptz,
    p_keys text[], p_vals jsonb[], p_contains text, p_embedding @vector@.vector, p_k integer, p_cap bigint,
    p_space_id integer, p_ttl interval, OUT o_rows bigint, OUT o_ids uuid[]
)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp SET plan_cache_mode = force_generic_plan
AS $exact$
BEGIN
    -- Generated by pgmem._build_knn() from pgmem.spaces: do not edit.
%s    -- not generated for this space or TTL (o_rows NULL): the caller runs the dynamic statements
END
$exact$;
$f$, v_exact);
    COMMENT ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, bigint, integer, interval) IS
        'Internal, generated by pgmem._build_knn(): how many memories of the current user in a space match the plain scope (agent, session, time range), at most p_cap, and the ids of the k nearest of them by exact cosine distance; o_rows NULL when not generated for that space and TTL.';
    REVOKE EXECUTE ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, bigint, integer, interval) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, bigint, integer, interval) TO pgmem_api;
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.create_space(p_name text, p_model text, p_dims integer, p_distance text DEFAULT 'cosine'::text, p_hnsw_m integer DEFAULT 16, p_hnsw_ef_construction integer DEFAULT 64, p_text_config regconfig DEFAULT 'english'::regconfig)
 RETURNS pgmem.spaces
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgmem', 'pg_temp'
AS $function$
DECLARE
    v_space pgmem.spaces;
    v_kind text;
BEGIN
    SELECT * INTO v_space FROM pgmem.spaces s WHERE s.name = p_name;
    IF FOUND THEN
        IF v_space.model <> p_model OR v_space.dims <> p_dims OR v_space.distance <> coalesce(p_distance, 'cosine') THEN
            RAISE EXCEPTION 'space "%" is bound to model "%" with % dimensions; it cannot be re-created for model "%" with % dimensions',
                p_name, v_space.model, v_space.dims, p_model, p_dims USING ERRCODE = 'PGM09';
        END IF;
        RETURN v_space;
    END IF;
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'space name must match ^[a-z0-9][a-z0-9_.-]{0,62}$, got %', quote_nullable(p_name) USING ERRCODE = 'PGM08';
    END IF;
    IF p_model IS NULL OR p_model = '' OR length(p_model) > 200 THEN
        RAISE EXCEPTION 'model name must be a non-empty text of at most 200 characters' USING ERRCODE = 'PGM08';
    END IF;
    IF p_dims IS NULL OR p_dims < 1 OR p_dims > 16000 THEN
        RAISE EXCEPTION 'dims must be between 1 and 16000 (pgvector''s limit), got %', p_dims USING ERRCODE = 'PGM08';
    END IF;
    IF coalesce(p_distance, 'cosine') <> 'cosine' THEN
        RAISE EXCEPTION 'distance must be ''cosine'', got %', quote_literal(p_distance) USING ERRCODE = 'PGM08';
    END IF;
    IF p_hnsw_m NOT BETWEEN 2 AND 100 OR p_hnsw_ef_construction NOT BETWEEN 4 AND 1000
       OR p_hnsw_ef_construction < 2 * p_hnsw_m THEN
        RAISE EXCEPTION 'HNSW needs 2 <= m <= 100 and 2*m <= ef_construction <= 1000' USING ERRCODE = 'PGM08';
    END IF;
    -- Only pg_catalog's configurations: one in a temporary (or a droppable) schema broke the space for every
    -- tenant once its session ended, and tokenised their text with the creator's rules meanwhile.
    IF (SELECT c.cfgnamespace FROM pg_catalog.pg_ts_config c WHERE c.oid = coalesce(p_text_config, 'english'))
       <> 'pg_catalog'::regnamespace THEN
        RAISE EXCEPTION 'text search configuration % is not one of pg_catalog''s', p_text_config USING ERRCODE = 'PGM08',
            HINT = 'SELECT cfgname FROM pg_ts_config WHERE cfgnamespace = ''pg_catalog''::regnamespace lists them.';
    END IF;
    -- pgvector's HNSW indexes vector up to 2,000 dimensions and halfvec up to 4,000; above that, exact scan.
    v_kind := CASE WHEN p_dims <= 2000 THEN 'hnsw_vector' WHEN p_dims <= 4000 THEN 'hnsw_halfvec' ELSE 'exact' END;
    INSERT INTO pgmem.spaces (name, model, dims, distance, text_config, index_kind, hnsw_m, hnsw_ef_construction)
    VALUES (p_name, p_model, p_dims, 'cosine', coalesce(p_text_config, 'english'), v_kind,
            CASE WHEN v_kind <> 'exact' THEN p_hnsw_m END, CASE WHEN v_kind <> 'exact' THEN p_hnsw_ef_construction END)
    RETURNING * INTO v_space;
    IF v_kind = 'hnsw_vector' THEN
        EXECUTE format('CREATE INDEX memories_space_%s_hnsw ON pgmem.memories USING hnsw ((embedding::@vector@.vector(%s)) @vector@.vector_cosine_ops) WITH (m = %s, ef_construction = %s) WHERE space_id = %s',
                       v_space.space_id, p_dims, p_hnsw_m, p_hnsw_ef_construction, v_space.space_id);
    ELSIF v_kind = 'hnsw_halfvec' THEN
        EXECUTE format('CREATE INDEX memories_space_%s_hnsw ON pgmem.memories USING hnsw ((embedding::@vector@.halfvec(%s)) @vector@.halfvec_cosine_ops) WITH (m = %s, ef_construction = %s) WHERE space_id = %s',
                       v_space.space_id, p_dims, p_hnsw_m, p_hnsw_ef_construction, v_space.space_id);
    END IF;
    IF v_kind <> 'exact' THEN
        -- The index keeps no statistics of the embeddings (every tenant's vectors).
        EXECUTE format('ALTER INDEX pgmem.memories_space_%s_hnsw ALTER COLUMN 1 SET STATISTICS 0', v_space.space_id);
        PERFORM pgmem._build_knn();  -- the new space's HNSW statement, planned once per connection
    END IF;
    RETURN v_space;
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.edit(p_id uuid, p_needle text, p_replacement text, p_embedding @vector@.vector, p_expected_version integer DEFAULT NULL::integer, p_agent_id text DEFAULT NULL::text, p_model text DEFAULT NULL::text, p_vector_kinds text[] DEFAULT NULL::text[], p_vectors @vector@.vector[] DEFAULT NULL::@vector@.vector[])
 RETURNS SETOF pgmem.memory
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pgmem', 'pg_temp'
AS $function$
DECLARE
    v_user text := pgmem._require_user();
    v_row pgmem.memories;
    v_space pgmem.spaces;
    v_count integer;
    v_first integer;
BEGIN
    IF p_needle IS NULL OR p_needle = '' THEN
        RAISE EXCEPTION 'the text to replace must not be empty' USING ERRCODE = 'PGM08';
    END IF;
    IF p_replacement IS NULL THEN
        RAISE EXCEPTION 'the replacement must not be NULL (use '''' to delete the text)' USING ERRCODE = 'PGM08';
    END IF;
    IF p_embedding IS NULL THEN
        RAISE EXCEPTION 'an edit changes content, so the embedding of the new content is required' USING ERRCODE = 'PGM08';
    END IF;
    v_row := pgmem._lock_current(v_user, p_id);
    SELECT * INTO v_space FROM pgmem.spaces s WHERE s.space_id = v_row.space_id;
    PERFORM pgmem._checked_space(v_space.name, p_embedding, p_model);
    IF p_expected_version IS NOT NULL AND p_expected_version <> v_row.version THEN
        RAISE EXCEPTION 'memory % is at version %, not %', p_id, v_row.version, p_expected_version USING ERRCODE = 'PGM04';
    END IF;
    v_count := pgmem._occurrences_up_to(v_row.content, p_needle, 100);
    IF v_count = 0 THEN
        RAISE EXCEPTION 'the text to replace does not occur in memory %', p_id USING ERRCODE = 'PGM06';
    ELSIF v_count > 1 THEN
        RAISE EXCEPTION 'the text to replace occurs % times in memory % (overlapping occurrences count); give a longer, unique text',
            CASE WHEN v_count >= 100 THEN 'at least 100' ELSE v_count::text END, p_id
            USING ERRCODE = 'PGM05';
    END IF;
    v_first := strpos(v_row.content, p_needle);
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    PERFORM set_config('pgmem.event', 'EDIT', true);
    UPDATE pgmem.memories m SET
        content = substr(m.content, 1, v_first - 1) || p_replacement || substr(m.content, v_first + char_length(p_needle)),
        embedding = p_embedding
    WHERE m.user_id = v_user AND m.id = p_id
    RETURNING * INTO v_row;
    DELETE FROM pgmem.memory_vectors v WHERE v.user_id = v_user AND v.memory_id = p_id;
    PERFORM pgmem._store_vectors(v_user, p_id, p_vector_kinds, p_vectors);
    PERFORM set_config('pgmem.actor', '', true);
    PERFORM set_config('pgmem.event', '', true);
    RETURN NEXT pgmem._to_memory(v_row, v_space.name, NULL, v_space.memory_ttl);
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._memories_history()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pgmem', 'pg_temp'
AS $function$
DECLARE
    v_trusted boolean := current_user = 'pgmem_api';
    v_actor text := CASE WHEN v_trusted THEN nullif(current_setting('pgmem.actor', true), '') END;
    v_event text;
    v_ttl interval;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pgmem.history (user_id, memory_id, event, new_content, new_metadata, actor_agent_id)
        VALUES (NEW.user_id, NEW.id, 'ADD', NEW.content, NEW.metadata, NEW.agent_id);
    ELSIF TG_OP = 'UPDATE' THEN
        v_event := CASE
            WHEN NEW.superseded_by IS NOT NULL AND OLD.superseded_by IS NULL THEN 'SUPERSEDE'
            WHEN NEW.valid_to IS NOT NULL AND OLD.valid_to IS NULL THEN 'INVALIDATE'
            WHEN v_trusted AND current_setting('pgmem.event', true) = 'EDIT' AND NEW.content IS DISTINCT FROM OLD.content THEN 'EDIT'
            ELSE 'UPDATE' END;
        INSERT INTO pgmem.history (user_id, memory_id, event, old_content, new_content, old_metadata, new_metadata, actor_agent_id, related_id)
        VALUES (NEW.user_id, NEW.id, v_event, OLD.content, NEW.content, OLD.metadata, NEW.metadata, v_actor,
                CASE WHEN v_event = 'SUPERSEDE' THEN NEW.superseded_by END);
    ELSE
        SELECT s.memory_ttl INTO v_ttl FROM pgmem.spaces s WHERE s.space_id = OLD.space_id;
        IF pgmem._expiry(OLD.expires_at, OLD.created_at, v_ttl) <= now() THEN
            INSERT INTO pgmem.history (user_id, memory_id, event, actor_agent_id)
            VALUES (OLD.user_id, OLD.id, 'EXPIRE', NULL);  -- expiry is no agent's act
        ELSE
            INSERT INTO pgmem.history (user_id, memory_id, event, old_content, old_metadata, actor_agent_id)
            VALUES (OLD.user_id, OLD.id, 'DELETE', OLD.content, OLD.metadata, v_actor);
        END IF;
    END IF;
    RETURN NULL;
END
$function$
$def$); END $pgmem$;


-- Space-wide settings are the owner's: a TTL applies to every tenant of the space at once (a gateway set one
-- microsecond and every tenant's memories expired). Space creation waits at most 5 s for its locks.
REVOKE EXECUTE ON FUNCTION pgmem.set_retention(text, interval, interval) FROM pgmem_gateway;
ALTER FUNCTION pgmem.create_space(text, text, integer, text, integer, integer, regconfig) SET lock_timeout = '5s';
ALTER FUNCTION pgmem.set_retention(text, interval, interval) SET lock_timeout = '5s';

-- No statistics of embeddings on the HNSW indexes made so far, and those gathered removed.
DO $pgmem$
DECLARE
    v_index regclass;
    v_name text;
    v_att text;
BEGIN
    FOR v_index, v_name, v_att IN
        SELECT c.oid::regclass, c.relname::text, a.attname::text FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = 1
        WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'i' AND c.relname LIKE 'memories_space_%_hnsw'
    LOOP
        EXECUTE pg_catalog.format('ALTER INDEX %s ALTER COLUMN 1 SET STATISTICS 0', v_index);
        IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
            DELETE FROM pg_catalog.pg_statistic s WHERE s.starelid = v_index;
        ELSIF to_regprocedure('pg_catalog.pg_clear_attribute_stats(text, text, text, boolean)') IS NOT NULL THEN
            EXECUTE 'SELECT pg_catalog.pg_clear_attribute_stats($1, $2, $3, false)' USING 'pgmem', v_name, v_att;
        ELSE
            RAISE WARNING 'pgmem: statistics of index % gathered before this migration remain until a superuser removes them', v_index
                USING HINT = pg_catalog.format('DELETE FROM pg_statistic WHERE starelid = %L::regclass;', v_index);
        END IF;
    END LOOP;
END
$pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._build_knn(); END $pgmem$;
COMMENT ON FUNCTION pgmem.set_retention(text, interval, interval) IS
    'Schema owner only (a space''s TTL applies to every user of it): a space''s default time-to-live of memories (NULL: keep until deleted) and of turns (NULL: unchanged). Applies at once to every memory and turn without its own expires_at, counted from its created_at.';
