-- pgmem exact-route plans: a small tenant's routing count and exact top-k are one statement, planned once per connection
-- depends: 0005.pgmem-expiry-stable

-- Why (bench/FINDINGS.md S10): a search of a small tenant (30 rows) took about 1.3-2 ms of server time where
-- hand-written pgvector SQL takes 0.3: its two statements, the capped count that routes it and the exact
-- scan, were dynamic SQL, parsed and planned on every call, and each read the tenant's rows. Migration 0004
-- did away with planning for the HNSW statement (pgmem._knn); this one does it for the exact route:
--   * pgmem._exact_ids is generated with pgmem._knn, by pgmem._build_knn(): one branch per indexed space and
--     TTL, static SQL of the scope without a metadata filter or as-of (agent, session and time range are
--     parameters), plan_cache_mode = force_generic_plan. One pass over the matching rows (at most the cap)
--     gives both their number and the ids of the k nearest by exact distance; when there are few enough,
--     search reads those k rows back by key with the statement the HNSW route uses, so both routes return
--     their rows the same way. Not generated for a space or TTL: o_rows is NULL and search takes the dynamic
--     statements, so a stale function costs speed, never rows.
--   * search's own static statements (reading the k rows back, the stored size) use their generic plans:
--     plan_cache_mode = force_generic_plan on the function. The read-back was planned again on every call
--     (0.2-0.3 ms), its custom plans costed below the generic one. Its dynamic statements (metadata filters,
--     as-of) are one-shot and still planned with the real values.
--   * the dynamic exact statement's text comes from one function, pgmem._exact_sql (as _knn_sql for HNSW).
--   * a plain search of a large tenant without a stored size scans up to the cap here (the count, with a
--     distance per row), then counts again where its size is stored: once a minute per large tenant.
-- Signatures do not change. Released migrations (0002-0005) stay as they are.

DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;

-- The exact statement of a space over a scope (pgmem._scope_sql's WHERE text, parameters $1..$8), with $9 the
-- query embedding, $10 k, $11 the space's name and $12 min_similarity: the k nearest rows as pgmem.memory,
-- in exact order (cosine distance, then id).
CREATE FUNCTION pgmem._exact_sql(p_space pgmem.spaces, p_scope text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT format('SELECT %2$s FROM pgmem.memories m WHERE %1$s'
                  ' AND ($12::float8 IS NULL OR 1 - (m.embedding <=> $9) >= $12)'
                  ' ORDER BY m.embedding <=> $9, m.id LIMIT $10', p_scope,
                  pgmem._memory_columns('$11', 'greatest(-1, least(1, 1 - (m.embedding <=> $9)))', p_space.memory_ttl))
$$;
COMMENT ON FUNCTION pgmem._exact_sql(pgmem.spaces, text) IS
    'Internal: the exact-scan statement of a space over a scope (pgmem._scope_sql''s WHERE text, $1..$8; $9 query embedding, $10 k, $11 space name, $12 min_similarity); returns pgmem.memory rows in exact order.';

-- Over a scope ($1..$8), with $9 the query embedding, $10 k and $11 a cap: the number of matching rows (at most
-- the cap) and the ids of the k nearest of them by exact cosine distance, then id (of the first cap rows only,
-- so meaningful when fewer than the cap match).
CREATE FUNCTION pgmem._exact_ids_sql(p_scope text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT format('SELECT count(*), coalesce((array_agg(c.id ORDER BY c.d, c.id))[1:$10], ''{}'')'
                  ' FROM (SELECT m.id, m.embedding <=> $9 AS d FROM pgmem.memories m WHERE %s LIMIT $11) c', p_scope)
$$;
COMMENT ON FUNCTION pgmem._exact_ids_sql(text) IS
    'Internal: one pass over the memories matching a scope (pgmem._scope_sql''s WHERE text, $1..$8), at most $11 of them: their number and the ids of the $10 nearest to $9 by exact cosine distance.';

CREATE OR REPLACE FUNCTION pgmem._build_knn() RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, public
AS $$
DECLARE
    v_space pgmem.spaces;
    v_body text := '';
    v_exact text := '';
    v_scope text;
    v_test text;
BEGIN
    -- Two sessions creating spaces at once would otherwise both replace the function ("tuple concurrently
    -- updated").
    PERFORM pg_advisory_xact_lock(hashtext('pgmem._build_knn'));
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
    p_keys text[], p_vals jsonb[], p_contains text, p_embedding vector, p_k integer, p_space_id integer, p_ttl interval
) RETURNS uuid[]
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET enable_sort = off
AS $knn$
BEGIN
    -- Generated by pgmem._build_knn() from pgmem.spaces: do not edit.
%s    RETURN NULL;  -- not generated for this space or TTL: the caller runs the same statement as dynamic SQL
END
$knn$;
$f$, v_body);
    COMMENT ON FUNCTION pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, vector, integer, integer, interval) IS
        'Internal, generated by pgmem._build_knn(): the ids of the k nearest memories of the current user in a space by its HNSW index (plain scope), or NULL when not generated for that space and TTL.';
    REVOKE EXECUTE ON FUNCTION pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, vector, integer, integer, interval) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, vector, integer, integer, interval) TO pgmem_agent;

    -- The exact route's statement (migration 0006), for the same spaces and TTLs.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION pgmem._exact_ids(
    p_user text, p_agent_id text, p_session_id text, p_created_after timestamptz, p_created_before timestamptz,
    p_keys text[], p_vals jsonb[], p_contains text, p_embedding vector, p_k integer, p_cap bigint,
    p_space_id integer, p_ttl interval, OUT o_rows bigint, OUT o_ids uuid[]
)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $exact$
BEGIN
    -- Generated by pgmem._build_knn() from pgmem.spaces: do not edit.
%s    -- not generated for this space or TTL (o_rows NULL): the caller runs the dynamic statements
END
$exact$;
$f$, v_exact);
    COMMENT ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, vector, integer, bigint, integer, interval) IS
        'Internal, generated by pgmem._build_knn(): how many memories of the current user in a space match the plain scope (agent, session, time range), at most p_cap, and the ids of the k nearest of them by exact cosine distance; o_rows NULL when not generated for that space and TTL.';
    REVOKE EXECUTE ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, vector, integer, bigint, integer, interval) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, vector, integer, bigint, integer, interval) TO pgmem_agent;
END
$$;
COMMENT ON FUNCTION pgmem._build_knn() IS
    'Internal: (re)writes the generated statements of search from pgmem.spaces: pgmem._knn (HNSW route, migration 0004) and pgmem._exact_ids (exact route, migration 0006); called by create_space and set_retention, and by migrations 0004 and 0006.';

DO $pgmem$ BEGIN PERFORM pgmem._build_knn(); END $pgmem$;  -- DO, not SELECT: yoyo prints a SELECT's rows

CREATE OR REPLACE FUNCTION pgmem.search(
    p_space text, p_embedding vector, p_k integer DEFAULT 10,
    p_agent_id text DEFAULT NULL, p_session_id text DEFAULT NULL, p_filter jsonb DEFAULT NULL,
    p_min_similarity double precision DEFAULT NULL, p_model text DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE
SET hnsw.ef_search = 100 SET hnsw.iterative_scan = 'relaxed_order' SET hnsw.max_scan_tuples = 20000
SET enable_sort = on SET plan_cache_mode = force_generic_plan
AS $$
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
                   m.version, greatest(-1, least(1, 1 - (m.embedding <=> p_embedding))),
                   m.valid_from, m.valid_to, m.superseded_by
            -- unnest + join, not id = ANY(...): the cached generic plan of the latter scanned
            -- memories_user_space_created_idx instead of the primary key (1.5 ms instead of 0.3).
            FROM unnest(v_ids) AS u(id) JOIN pgmem.memories m ON m.user_id = v_user AND m.id = u.id
            WHERE p_min_similarity IS NULL OR 1 - (m.embedding <=> p_embedding) >= p_min_similarity
            ORDER BY m.embedding <=> p_embedding, m.id;
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
$$;
COMMENT ON FUNCTION pgmem.search(text, vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz) IS
    'Nearest memories of the current user that hold now (or at p_as_of), by cosine similarity (1 - cosine distance, clamped to [-1, 1]), highest first, at most k (1..1000): min(k, matching rows) whatever the tenant''s size. Routes to an exact scan when at most pgmem.exact_search_max_rows (default 5000) rows match (for searches without a metadata filter or as-of: one generated statement, planned once per connection, that counts and finds the k nearest), else HNSW with iterative scan (ef_search max(pgmem.hnsw_ef_search, default 100, 2k); the index''s order re-sorted exactly), falling back to exact when the index returns fewer than k.';

-- Privileges: the statement texts are read by search, which runs as its caller; the generated function is
-- granted by _build_knn itself.
REVOKE EXECUTE ON FUNCTION pgmem._exact_sql(pgmem.spaces, text), pgmem._exact_ids_sql(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgmem._exact_sql(pgmem.spaces, text), pgmem._exact_ids_sql(text) TO pgmem_agent;
