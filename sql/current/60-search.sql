-- pgmem current schema, part 60: search. The routing cache (tenant_sizes) and the count that chooses
-- between an exact scan and the HNSW index (_matching_rows); the statements of each route (_knn_sql,
-- _exact_sql, _exact_ids_sql) and the functions generated from them per space (_build_knn writes _knn and
-- _exact_ids); pgmem.search and pgmem.search_hybrid. What runs for one call of Memory.search is
-- pgmem.search below, and the statements it names, all in this file and 40-filters-scope.sql.

-- ---------------------------------------------------------------------------------------------------------
-- Routing cache. Search routes each query to an exact scan (few matching rows) or the HNSW index (many), from
-- a capped count of the matching rows. For a large tenant that count read thousands of rows on every call
-- (6.4 of 10 ms per search of a 30,000-row tenant, bench/search.py). A tenant's own size is kept here for
-- pgmem.route_cache_seconds (default 60): either route returns correct results, so a size a minute old costs
-- speed at worst, never rows (the HNSW route falls back to exact when it finds fewer than k). A filtered
-- search (agent, session, time range, metadata filter; not as-of) keeps its scope's count the same way, under
-- its scope key (_scope_key): counting up to 5,001 rows through a metadata filter was most of such a search of
-- a large tenant (LangGraph's store filters every search by its namespace). Rows of other scopes older than
-- the cache are removed when a scope's count is stored.
-- ---------------------------------------------------------------------------------------------------------
CREATE TABLE pgmem.tenant_sizes (
    user_id     text        NOT NULL,
    space_id    integer     NOT NULL,
    rows        bigint      NOT NULL,
    complete    boolean     NOT NULL,
    counted_at  timestamptz NOT NULL,
    scope       text        NOT NULL DEFAULT '',
    CONSTRAINT tenant_sizes_pkey PRIMARY KEY (user_id, space_id, scope),
    CONSTRAINT tenant_sizes_space_fkey FOREIGN KEY (space_id) REFERENCES pgmem.spaces (space_id)
);
COMMENT ON TABLE pgmem.tenant_sizes IS
    'Routing cache: the users with more memories in a space than an exact scan should take (rows: at least that many; complete = false), counted by search at most every pgmem.route_cache_seconds (default 60); scope = '''' for the whole space, else pgmem._scope_key of a filtered search''s scope (the rows matching it). Smaller tenants and scopes are counted on each search instead (cheap), so that their searches stay reads.';
ALTER TABLE pgmem.tenant_sizes ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.tenant_sizes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_sizes_tenant ON pgmem.tenant_sizes
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));


CREATE TYPE pgmem.hybrid_hit AS (
    id          uuid,
    user_id     text,
    space       text,
    agent_id    text,
    session_id  text,
    content     text,
    metadata    jsonb,
    created_at  timestamptz,
    updated_at  timestamptz,
    expires_at  timestamptz,
    version     integer,
    similarity  double precision,
    score       double precision,
    text_score  double precision,
    vector_score double precision
);
COMMENT ON TYPE pgmem.hybrid_hit IS
    'A hybrid search result: the memory, its cosine similarity to the query, the fused score, the raw BM25 text score and the raw vector score (best sentence + context cosine, in [-2, 2]).';

-- The key of a search's scope in pgmem.tenant_sizes: '' for the whole space, else a SHA-256 of the scope's
-- arguments (times as epoch seconds, so that the session's TimeZone does not change the key; jsonb prints a
-- filter with its keys in one order).
CREATE FUNCTION pgmem._scope_key(
    p_agent_id text,
    p_session_id text,
    p_created_after timestamptz,
    p_created_before timestamptz,
    p_filter jsonb
) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT CASE WHEN p_agent_id IS NULL AND p_session_id IS NULL AND p_created_after IS NULL AND p_created_before IS NULL
                     AND (p_filter IS NULL OR p_filter = '{}'::jsonb) THEN ''
                ELSE encode(sha256(convert_to(jsonb_build_array(p_agent_id, p_session_id, extract(epoch FROM p_created_after),
                                                                extract(epoch FROM p_created_before), p_filter)::text, 'UTF8')), 'hex')
           END
$$;
COMMENT ON FUNCTION pgmem._scope_key(text, text, timestamptz, timestamptz, jsonb) IS
    'Internal: the key of a search scope in pgmem.tenant_sizes: the empty text for a whole space, else the hex SHA-256 of its agent, session, time range (epoch seconds) and metadata filter.';

-- Matching rows for routing, capped at p_threshold + 1. Without filters (the tenant's whole space as it holds
-- now) the cached size serves while fresh; with filters it serves when the tenant is small (a subset is
-- smaller still); otherwise the rows are counted, and a tenant's own count is stored for the next searches.
CREATE FUNCTION pgmem._matching_rows(
    p_user text,
    p_space pgmem.spaces,
    p_sql text,
    p_filter_params pgmem.compiled_filter,
    p_threshold integer,
    p_agent_id text,
    p_session_id text,
    p_created_after timestamptz,
    p_created_before timestamptz,
    p_filter jsonb,
    p_as_of timestamptz
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_cacheable boolean := p_as_of IS NULL;  -- an as-of scope is counted each time
    v_key text := pgmem._scope_key(p_agent_id, p_session_id, p_created_after, p_created_before, p_filter);
    v_fresh interval := make_interval(secs => coalesce(nullif(current_setting('pgmem.route_cache_seconds', true), '')::integer, 60));
    v_cached pgmem.tenant_sizes;
    v_n bigint;
    v_lock_timeout text := current_setting('lock_timeout');
BEGIN
    IF v_cacheable THEN
        SELECT * INTO v_cached FROM pgmem.tenant_sizes t
        WHERE t.user_id = p_user AND t.space_id = p_space.space_id AND t.scope = v_key;
        IF FOUND AND v_cached.counted_at > now() - v_fresh AND (v_cached.complete OR v_cached.rows > p_threshold) THEN
            RETURN v_cached.rows;
        END IF;
    END IF;
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM pgmem.memories m WHERE %s LIMIT %s) c', p_sql, p_threshold + 1)
    INTO v_n
    USING p_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          p_filter_params.keys, p_filter_params.vals, NULL::text;
    -- Only a large tenant's size is stored: storing makes the search a write whose commit waits for the WAL
    -- flush (2.6 -> 8.0 ms for a small tenant, bench/FINDINGS.md S6), while a small tenant's count is cheap.
    -- A stored size that no longer holds (the tenant shrank) is removed.
    IF v_cacheable AND current_setting('transaction_read_only') = 'off' AND (v_n > p_threshold OR v_cached.user_id IS NOT NULL) THEN
        -- Best effort: a read-only transaction (a standby) or a concurrent refresh just skips the store.
        BEGIN
            PERFORM set_config('lock_timeout', '20ms', true);
            IF v_n > p_threshold THEN
                INSERT INTO pgmem.tenant_sizes AS t (user_id, space_id, scope, rows, complete, counted_at)
                VALUES (p_user, p_space.space_id, v_key, v_n, false, now())
                ON CONFLICT (user_id, space_id, scope) DO UPDATE
                    SET rows = EXCLUDED.rows, complete = EXCLUDED.complete, counted_at = EXCLUDED.counted_at;
            ELSE
                DELETE FROM pgmem.tenant_sizes t WHERE t.user_id = p_user AND t.space_id = p_space.space_id AND t.scope = v_key;
            END IF;
            IF v_key <> '' THEN  -- the tenant's counts of other filtered scopes that are no longer fresh
                DELETE FROM pgmem.tenant_sizes t
                WHERE t.user_id = p_user AND t.space_id = p_space.space_id AND t.scope <> '' AND t.scope <> v_key
                  AND t.counted_at <= now() - v_fresh;
            END IF;
            PERFORM set_config('lock_timeout', v_lock_timeout, true);
        EXCEPTION WHEN lock_not_available OR read_only_sql_transaction OR insufficient_privilege THEN
            NULL;  -- the block's own setting of lock_timeout is undone with it
        END;
    END IF;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION pgmem._matching_rows(text, pgmem.spaces, text, pgmem.compiled_filter, integer, text, text, timestamptz, timestamptz, jsonb, timestamptz) IS
    'Internal: how many memories match a search''s scope, capped at p_threshold + 1, for routing; the count of a large tenant''s space, or of a filtered scope of it (not as-of) holding more than p_threshold rows, comes from pgmem.tenant_sizes while fresh (pgmem.route_cache_seconds, default 60).';

-- The HNSW statement of a space over a scope (slots $1..$10, defined in 40-filters-scope.sql): the ids of
-- the k nearest rows by the index, in no particular order.
CREATE FUNCTION pgmem._knn_sql(p_space pgmem.spaces, p_scope text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    -- The query is normalised first (cosine ignores length), so its halfvec copy neither overflows
    -- (components beyond +-65504) nor underflows to a zero vector.
    SELECT format('SELECT array_agg(h.id) FROM (SELECT m.id FROM pgmem.memories m WHERE %2$s'
                  ' ORDER BY (m.embedding::%1$s) OPERATOR(@vector@.<=>) (@vector@.l2_normalize($9)::%1$s) LIMIT $10) h',
                  CASE p_space.index_kind WHEN 'hnsw_halfvec' THEN '@vector@.halfvec' ELSE '@vector@.vector' END || '(' || p_space.dims || ')',
                  p_scope)
$$;
COMMENT ON FUNCTION pgmem._knn_sql(pgmem.spaces, text) IS
    'Internal: the HNSW statement of a space over a scope (pgmem._scope_sql''s WHERE text, $1..$8; $9 query embedding, $10 k); returns the ids of the k nearest rows by the index (uuid[], unordered).';

-- The exact statement of a space over a scope (slots $1..$12, defined in 40-filters-scope.sql): the k
-- nearest rows as pgmem.memory, in exact order (cosine distance, then id).
CREATE FUNCTION pgmem._exact_sql(p_space pgmem.spaces, p_scope text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT format('SELECT %2$s FROM pgmem.memories m WHERE %1$s'
                  ' AND ($12::float8 IS NULL OR 1 - (m.embedding OPERATOR(@vector@.<=>) $9) >= $12)'
                  ' ORDER BY m.embedding OPERATOR(@vector@.<=>) $9, m.id LIMIT $10', p_scope,
                  pgmem._memory_columns('$11', 'greatest(-1, least(1, 1 - (m.embedding OPERATOR(@vector@.<=>) $9)))', p_space.memory_ttl))
$$;
COMMENT ON FUNCTION pgmem._exact_sql(pgmem.spaces, text) IS
    'Internal: the exact-scan statement of a space over a scope (pgmem._scope_sql''s WHERE text, $1..$8; $9 query embedding, $10 k, $11 space name, $12 min_similarity); returns pgmem.memory rows in exact order.';

-- Over a scope (slots $1..$11, defined in 40-filters-scope.sql; $11 the cap): the number of matching rows (at most
-- the cap) and the ids of the k nearest of them by exact cosine distance, then id (of the first cap rows only,
-- so meaningful when fewer than the cap match).
CREATE FUNCTION pgmem._exact_ids_sql(p_scope text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT format('SELECT count(*), coalesce((array_agg(c.id ORDER BY c.d, c.id))[1:$10], ''{}'')'
                  ' FROM (SELECT m.id, m.embedding OPERATOR(@vector@.<=>) $9 AS d FROM pgmem.memories m WHERE %s LIMIT $11) c', p_scope)
$$;
COMMENT ON FUNCTION pgmem._exact_ids_sql(text) IS
    'Internal: one pass over the memories matching a scope (pgmem._scope_sql''s WHERE text, $1..$8), at most $11 of them: their number and the ids of the $10 nearest to $9 by exact cosine distance.';

-- Writes pgmem._knn: one branch per indexed space, each the static HNSW statement of its plain scope (memories
-- that hold now, any agent, session and created_at range, no metadata filter), for the space's current
-- TTL. Static SQL in PL/pgSQL keeps its plan per connection; force_generic_plan keeps the plan generic
-- (a custom plan would be chosen each time: the generic plan's row estimate for a LIMIT under optional
-- filters looks worse on paper, bench/FINDINGS.md S7). enable_sort = off: the generic plan must be the
-- index scan, never a sort of the tenant's rows.
CREATE FUNCTION pgmem._build_knn() RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_space pgmem.spaces;
    v_body text := '';
    v_exact text := '';
    v_scope text;
    v_test text;
    v_plans text := 'force_generic_plan';
    v_distributed boolean := false;
BEGIN
    -- On a Citus cluster whose pgmem.memories is distributed (pgmem distribute), Citus cannot plan these
    -- statements generically (their parameters decide the shard), so each call gets a custom plan there.
    -- Read from the schema, never from the caller's session: a gateway's SET pgmem.cluster = 'citus' made
    -- every tenant's searches custom-planned (migration 0023). pg_dist_partition exists only with Citus.
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p'
                || ' WHERE p.logicalrelid = pg_catalog.to_regclass(''pgmem.memories''))' INTO v_distributed;
    END IF;
    IF v_distributed THEN
        v_plans := 'force_custom_plan';
    END IF;
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
SET search_path = pg_catalog, pgmem, pg_temp SET plan_cache_mode = %2$s SET enable_sort = off
AS $knn$
BEGIN
    -- Generated by pgmem._build_knn() from pgmem.spaces: do not edit.
%1$s    RETURN NULL;  -- not generated for this space or TTL: the caller runs the same statement as dynamic SQL
END
$knn$;
$f$, v_body, v_plans);
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
SET search_path = pg_catalog, pgmem, pg_temp SET plan_cache_mode = %2$s
AS $exact$
BEGIN
    -- Generated by pgmem._build_knn() from pgmem.spaces: do not edit.
%1$s    -- not generated for this space or TTL (o_rows NULL): the caller runs the dynamic statements
END
$exact$;
$f$, v_exact, v_plans);
    COMMENT ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, bigint, integer, interval) IS
        'Internal, generated by pgmem._build_knn(): how many memories of the current user in a space match the plain scope (agent, session, time range), at most p_cap, and the ids of the k nearest of them by exact cosine distance; o_rows NULL when not generated for that space and TTL.';
    REVOKE EXECUTE ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, bigint, integer, interval) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, bigint, integer, interval) TO pgmem_api;
END
$$;
COMMENT ON FUNCTION pgmem._build_knn() IS
    'Internal: (re)writes the generated statements of search from pgmem.spaces: pgmem._knn (HNSW route, migration 0004) and pgmem._exact_ids (exact route, migration 0006); called by create_space and set_retention, and by migrations 0004 and 0006.';

CREATE FUNCTION pgmem.search(
    p_space text,
    p_embedding @vector@.vector,
    p_k integer DEFAULT 10,
    p_agent_id text DEFAULT NULL,
    p_session_id text DEFAULT NULL,
    p_filter jsonb DEFAULT NULL,
    p_min_similarity double precision DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL,
    p_created_before timestamptz DEFAULT NULL,
    p_as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = relaxed_order
SET hnsw.max_scan_tuples = 20000
SET enable_sort = on
SET plan_cache_mode = force_generic_plan
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
    v_threshold integer := coalesce(nullif(current_setting('pgmem.exact_search_max_rows', true), '')::integer, 5000);
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
    -- A search of a large tenant (or of a large filtered scope of it) whose count is cached
    -- (pgmem.tenant_sizes) needs no count at all.
    IF v_space.index_kind <> 'exact' THEN
        IF p_as_of IS NULL THEN
            SELECT t.rows, t.rows > v_threshold
                   AND t.counted_at > now() - make_interval(secs => coalesce(nullif(current_setting('pgmem.route_cache_seconds', true), '')::integer, 60))
            INTO v_stored, v_fresh_large
            FROM pgmem.tenant_sizes t WHERE t.user_id = v_user AND t.space_id = v_space.space_id
              AND t.scope = pgmem._scope_key(p_agent_id, p_session_id, p_created_after, p_created_before, p_filter);
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
                v_n := NULL;  -- a large scope without a stored count: counted again just below, which stores it
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
        IF current_setting('pgmem.cluster', true) = 'citus' THEN
            -- On a Citus cluster the shard's query runs on a worker, where this function's own settings
            -- (SET clauses, set_config) do not reach: SET LOCAL does (citus.propagate_set_commands = 'local').
            EXECUTE pg_catalog.format('SET LOCAL hnsw.ef_search = %s', v_ef);
            EXECUTE pg_catalog.format('SET LOCAL hnsw.max_scan_tuples = %s', greatest(20000, 200 * p_k));
            SET LOCAL hnsw.iterative_scan = relaxed_order;
            SET LOCAL enable_sort = off;
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
$$;
COMMENT ON FUNCTION pgmem.search(text, vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz) IS
    'Nearest memories of the current user that hold now (or at p_as_of), by cosine similarity (1 - cosine distance, clamped to [-1, 1]), highest first, at most k (1..1000): min(k, matching rows) whatever the tenant''s size. Routes to an exact scan when at most pgmem.exact_search_max_rows (default 5000) rows match (for searches without a metadata filter or as-of: one generated statement, planned once per connection, that counts and finds the k nearest), else HNSW with iterative scan (ef_search max(pgmem.hnsw_ef_search, default 100, 2k); the index''s order re-sorted exactly), falling back to exact when the index returns fewer than k.';

-- The ids of the memories a search's scope selects, at most p_cap of them (NULL: all), in no particular order:
-- search_hybrid's candidates on the exact route, and its routing count. Without a metadata filter or as-of the
-- statement is static (pgmem._scope_sql's plain scope with the space and its TTL as parameters), so PL/pgSQL
-- plans it once per connection; otherwise it is pgmem._scope_sql's text, run as dynamic SQL (slots $1..$8,
-- 40-filters-scope.sql; $11 the cap).
CREATE FUNCTION pgmem._scope_ids(
    p_user text,
    p_space pgmem.spaces,
    p_agent_id text,
    p_session_id text,
    p_created_after timestamptz,
    p_created_before timestamptz,
    p_filter jsonb,
    p_as_of timestamptz,
    p_cap integer
) RETURNS uuid[]
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_scope record;
    v_ids uuid[];
BEGIN
    IF p_as_of IS NULL AND (p_filter IS NULL OR p_filter = '{}'::jsonb) THEN
        RETURN ARRAY(
            SELECT m.id FROM pgmem.memories m
            WHERE m.user_id = p_user AND m.space_id = p_space.space_id
              AND pgmem._expiry(m.expires_at, m.created_at, p_space.memory_ttl) > now()
              AND m.valid_to IS NULL AND m.valid_from <= now()
              AND (p_agent_id IS NULL OR m.agent_id = p_agent_id) AND (p_session_id IS NULL OR m.session_id = p_session_id)
              AND (p_created_after IS NULL OR m.created_at >= p_created_after)
              AND (p_created_before IS NULL OR m.created_at < p_created_before)
            LIMIT p_cap);
    END IF;
    v_scope := pgmem._scope_sql(p_space.space_id, p_filter, p_as_of);
    EXECUTE format('SELECT ARRAY(SELECT m.id FROM pgmem.memories m WHERE %s LIMIT $11)', v_scope.o_sql) INTO v_ids
    USING p_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text, NULL::@vector@.vector, NULL::integer, p_cap;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION pgmem._scope_ids(text, pgmem.spaces, text, text, timestamptz, timestamptz, jsonb, timestamptz, integer) IS
    'Internal: the ids of the current user''s memories in a space that a search''s scope selects (agent, session, time range, metadata filter, now or as-of), at most p_cap (NULL: all), unordered.';

-- The constants of the hybrid score, in one place (docs/recall.md, "step by step"): the session window's
-- weights, Okapi BM25's k1 and b, the floor the fusion measures the vector score from (a percentile of the
-- candidates' vector scores, shrunk towards 0 when the candidates are few), and the default weights of the fusion (a NULL argument takes its default; search_hybrid
-- passes a vector weight of 0 when there is no query embedding, text mode).
CREATE FUNCTION pgmem._hybrid_formula(
    p_text_weight double precision,
    p_vector_weight double precision,
    p_speaker_weight double precision,
    p_session_weight double precision,
    OUT next_wt double precision,
    OUT prev_wt double precision,
    OUT far_wt double precision,
    OUT k1 double precision,
    OUT b double precision,
    OUT vector_floor double precision,
    OUT vector_floor_n double precision,
    OUT text_wt double precision,
    OUT vector_wt double precision,
    OUT speaker_wt double precision,
    OUT session_wt double precision
)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT 0.6::float8,  -- window: a term of a memory counts this much for the next memory of its session,
           0.4::float8,  -- this much for the previous one,
           0.2::float8,  -- and this much two memories away on either side (fully for its own memory)
           1.2::float8, 0.5::float8,  -- Okapi BM25 k1 and b
           0.1::float8,  -- the vector score counts from the candidates' 10th percentile,
           20::float8,   -- times n / (n + 20) for n candidates: fully over many, hardly over a few (docs/recall.md)
           coalesce(p_text_weight, 0.4), coalesce(p_vector_weight, 0.6),
           coalesce(p_speaker_weight, 0.2), coalesce(p_session_weight, 0.4)
$$;
COMMENT ON FUNCTION pgmem._hybrid_formula(double precision, double precision, double precision, double precision) IS
    'Internal: the constants of pgmem.search_hybrid''s score (session-window weights 0.6 next / 0.4 previous / 0.2 two away, BM25 k1 1.2 and b 0.5, the vector score measured from the candidates'' 10th percentile times n / (n + 20) for n candidates) and its fusion weights, each NULL argument replaced by its default (text 0.4, vector 0.6, speaker 0.2, session 0.4).';

-- The p_k memories of a user and space with the highest BM25 over their own text (k1 1.2, b 0.5; the statistics of
-- every memory of the user that holds: pgmem.term_stats) for the query's lexemes, from the postings
-- (pgmem.memory_terms), best first (ties by id), by a threshold algorithm in rounds. Each round reads every query
-- term's postings in impact order (one range scan of memory_terms_impact_idx a term): all of them for a term held
-- by at most p_max_depth memories, the first B for a longer one (B = max(p_k, 10), then 4 times more, up to
-- 4 p_k); scores the memories read from the terms read, and in full (their other terms by primary key) the
-- max(p_k, 4 p_exact) of them that could reach furthest. It stops when its first p_exact are exact: no memory read
-- could still beat the p_exact-th, and no memory unread could either (the sum over the terms of idf times the
-- next unread impact times max(1, avgdl / 20), pgmem._term_impact's bound); or when B reaches its cap, with what
-- it has (o_exact false). What it reads depends on the query's terms and the caps, not on the user's size, but
-- for terms held by up to p_max_depth memories.
CREATE FUNCTION pgmem._text_top(
    p_user text,
    p_space_id integer,
    p_lexemes text[],
    p_k integer,
    p_exact integer,
    p_max_depth integer,
    OUT o_ids uuid[],
    OUT o_scores double precision[],
    OUT o_rounds integer,
    OUT o_depth integer,
    OUT o_exact boolean
)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n double precision;
    v_avgdl double precision;
    v_phi double precision;
    v_lex text[];
    v_idf double precision[];
    v_df bigint[];
    v_fix integer := greatest(p_k, 4 * p_exact);  -- memories scored in full by primary key per round, at most
    v_exact integer := least(p_exact, p_k);
    v_cap integer := greatest(least(4 * p_k, p_max_depth), 1);  -- the depth of a long list, at most
    v_b integer := least(greatest(p_k, 10), greatest(least(4 * p_k, p_max_depth), 1));
    v_tau double precision;
    v_kth double precision;
    v_open boolean;
    v_unsure boolean;
BEGIN
    SELECT s.docs, greatest(s.total_len::float8 / nullif(s.docs, 0), 1) INTO v_n, v_avgdl
    FROM pgmem.term_stats s WHERE s.user_id = p_user AND s.space_id = p_space_id AND s.lexeme = '';
    IF coalesce(v_n, 0) <= 0 OR cardinality(p_lexemes) = 0 THEN
        RETURN;
    END IF;
    v_phi := greatest(1.0, v_avgdl / 20.0);
    -- Okapi idf, ln(1 + (N - df + 0.5) / (df + 0.5)), of each query term the user holds.
    SELECT array_agg(s.lexeme ORDER BY s.lexeme), array_agg(ln(1 + (v_n - s.docs + 0.5) / (s.docs + 0.5)) ORDER BY s.lexeme),
           array_agg(s.docs ORDER BY s.lexeme)
    INTO v_lex, v_idf, v_df
    FROM pgmem.term_stats s
    WHERE s.user_id = p_user AND s.space_id = p_space_id AND s.lexeme = ANY (p_lexemes) AND s.lexeme <> '' AND s.docs > 0;
    IF v_lex IS NULL THEN
        RETURN;
    END IF;
    o_rounds := 0;
    LOOP
        o_rounds := o_rounds + 1;
        WITH q AS (  -- each term's depth this round: B, or all of its postings when it has at most p_max_depth
            SELECT q.lexeme, q.idf, CASE WHEN q.df <= p_max_depth THEN q.df ELSE v_b END AS depth
            FROM unnest(v_lex, v_idf, v_df) AS q(lexeme, idf, df)),
        top AS MATERIALIZED (  -- the first depth + 1 postings of each term, impact first (ties by memory id)
            SELECT q.lexeme, q.idf, q.depth, p.memory_id, p.tf, p.dl, p.impact, p.rn
            FROM q CROSS JOIN LATERAL (
                SELECT t.memory_id, t.tf, t.dl, t.impact, row_number() OVER (ORDER BY t.impact DESC, t.memory_id) AS rn
                FROM pgmem.memory_terms t
                WHERE t.user_id = p_user AND t.space_id = p_space_id AND t.lexeme = q.lexeme
                ORDER BY t.impact DESC, t.memory_id LIMIT q.depth + 1) p),
        bound AS MATERIALIZED (  -- the most an unread posting of each term can add (0: the term is read to its end)
            SELECT q.lexeme, coalesce(max(q.idf * v_phi * t.impact) FILTER (WHERE t.rn = t.depth + 1), 0) AS ub
            FROM q LEFT JOIN top t USING (lexeme) GROUP BY q.lexeme),
        seen AS MATERIALIZED (  -- the memories read: their score from the terms read, and the most the others could add
            SELECT t.memory_id, sum(t.idf * t.tf * 2.2 / (t.tf + 1.2 * (0.5 + 0.5 * t.dl / v_avgdl))) AS lo,
                   count(*) = cardinality(v_lex) AS complete,
                   (SELECT sum(x.ub) FROM bound x) - sum(b.ub) AS rest
            FROM top t JOIN bound b USING (lexeme) WHERE t.rn <= t.depth GROUP BY t.memory_id),
        kth AS (SELECT coalesce((SELECT s.lo FROM seen s ORDER BY s.lo DESC LIMIT 1 OFFSET v_exact - 1), 0) AS lo),
        fix AS MATERIALIZED (  -- exact scores of the memories read that could still enter the top k, by primary key
            SELECT c.memory_id, sum(q.idf * t.tf * 2.2 / (t.tf + 1.2 * (0.5 + 0.5 * t.dl / v_avgdl))) AS s
            FROM (SELECT s.memory_id FROM seen s, kth WHERE NOT s.complete AND s.lo + s.rest > kth.lo
                  ORDER BY s.lo + s.rest DESC, s.memory_id LIMIT v_fix) c
            CROSS JOIN LATERAL (
                SELECT t.lexeme, t.tf, t.dl FROM pgmem.memory_terms t
                WHERE t.user_id = p_user AND t.memory_id = c.memory_id AND t.lexeme = ANY (v_lex)) t
            JOIN q USING (lexeme)
            GROUP BY c.memory_id),
        best AS (
            SELECT s.memory_id, coalesce(f.s, s.lo) AS s FROM seen s LEFT JOIN fix f USING (memory_id)
            ORDER BY 2 DESC, 1 LIMIT p_k)
        SELECT array_agg(b.memory_id ORDER BY b.s DESC, b.memory_id), array_agg(b.s ORDER BY b.s DESC, b.memory_id),
               (SELECT sum(x.ub) FROM bound x), (SELECT bool_or(x.ub > 0) FROM bound x),
               (SELECT count(*) FROM seen s, kth WHERE NOT s.complete AND s.lo + s.rest > kth.lo) > v_fix
        INTO o_ids, o_scores, v_tau, v_open, v_unsure
        FROM best b;
        v_kth := o_scores[v_exact];
        o_depth := v_b;
        -- Exact when no unread posting can matter (every term read to its end, or the p_exact-th score reaches
        -- what an unseen memory could score) and every memory read that could beat it was scored in full.
        o_exact := NOT v_unsure AND (NOT v_open OR (cardinality(o_ids) >= v_exact AND v_kth >= v_tau));
        EXIT WHEN o_exact OR v_b >= v_cap;
        v_b := least(v_b * 4, v_cap);
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem._text_top(text, integer, text[], integer, integer, integer) IS
    'Internal: the p_k memories of a user and space (that hold; expired ones included until purged) with the highest BM25 of their own text for the lexemes p_lexemes (k1 1.2, b 0.5, the user''s statistics in pgmem.term_stats), best first, ties by id, with their scores; a threshold algorithm over pgmem.memory_terms in impact order: terms held by at most p_max_depth memories read in full, longer ones to at most 4 p_k postings; o_exact: the first p_exact are exact (else the best of what was read), after o_rounds rounds reading o_depth postings of a long term. NULL arrays when no memory holds a term.';

-- Hybrid recall. Candidates: every memory of the scope when at most pgmem.exact_search_max_rows match, else
-- the best full-text matches (from the postings, pgmem._text_top, for a search of the whole space) united with
-- the nearest vectors (HNSW); then three static statements score them
-- (planned once per connection, generic plans): (1) one pass over the candidates (the user's rows hash-joined on
-- the exact route, by primary key from the pools) with their session window and own cosine; (2) BM25F, the
-- extra vectors (best sentence, context) of the candidates best by BM25 or nearest by own cosine, the speaker
-- match (once per distinct speaker), the fusion and the session boost over those rows, with hash joins; (3) the
-- k best read back. Every constant of the score is in pgmem._hybrid_formula (docs/recall.md).
CREATE FUNCTION pgmem.search_hybrid(
    p_space text,
    p_query text,
    p_embedding @vector@.vector DEFAULT NULL,
    p_k integer DEFAULT 10,
    p_agent_id text DEFAULT NULL,
    p_session_id text DEFAULT NULL,
    p_filter jsonb DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL,
    p_created_before timestamptz DEFAULT NULL,
    p_text_weight double precision DEFAULT NULL,
    p_vector_weight double precision DEFAULT NULL,
    p_speaker_weight double precision DEFAULT NULL,
    p_session_weight double precision DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_as_of timestamptz DEFAULT NULL,
    p_min_score double precision DEFAULT NULL
) RETURNS SETOF pgmem.hybrid_hit
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET hnsw.ef_search = 40
SET hnsw.iterative_scan = relaxed_order
SET hnsw.max_scan_tuples = 20000
SET enable_sort = on
SET enable_nestloop = on
SET enable_indexscan = on
SET plan_cache_mode = force_generic_plan
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
    v_threshold integer := coalesce(nullif(current_setting('pgmem.exact_search_max_rows', true), '')::integer, 5000);
    v_scope record;
    v_lexemes text[];
    v_tsquery tsquery;
    v_pool integer := greatest(100, 4 * p_k);
    v_large boolean := false;
    v_ids uuid[];
    v_near uuid[];
    v_cast text;
    v_f record;
    v_c_pos bigint[]; v_c_id uuid[]; v_c_sess text[]; v_c_dl float8[]; v_c_speaker text[]; v_c_sim float8[];
    v_c_created timestamptz[];
    v_t_pos bigint[]; v_t_idx bigint[]; v_t_n bigint[]; v_t_lexeme text[]; v_t_tf float8[];
    v_h_id uuid[]; v_h_score float8[]; v_h_bs float8[]; v_h_ds float8[]; v_h_sim float8[];
BEGIN
    -- White space as Python's str.strip() sees it (pgmem.validation.check_query), not only ' '.
    -- Sizes first: each distinct term of the query is matched against every candidate (25,000 terms took 9 s of
    -- CPU on 3,000 memories), and a text past 1 MB of lexemes fails in to_tsvector. The length is content's.
    IF char_length(p_query) > 100000 THEN
        RAISE EXCEPTION 'query text has % characters; the limit is 100000', char_length(p_query) USING ERRCODE = 'PGM08';
    END IF;
    IF p_query IS NULL OR p_query ~ '^[[:space:]\u001c-\u001f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$' THEN
        RAISE EXCEPTION 'query text is empty or only white space' USING ERRCODE = 'PGM08';
    END IF;
    IF p_k IS NULL OR p_k < 1 OR p_k > 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, got %', p_k USING ERRCODE = 'PGM08';
    END IF;
    -- NULL: the weight of the formula (below).
    IF NOT (coalesce(p_text_weight, 0) >= 0 AND coalesce(p_vector_weight, 0) >= 0 AND coalesce(p_speaker_weight, 0) >= 0
            AND coalesce(p_session_weight, 0) >= 0
            AND coalesce(p_text_weight, 0) + coalesce(p_vector_weight, 0) + coalesce(p_speaker_weight, 0)
                + coalesce(p_session_weight, 0) < 'Infinity') THEN
        RAISE EXCEPTION 'weights must be finite and >= 0' USING ERRCODE = 'PGM08';
    END IF;
    IF p_min_score IS NOT NULL AND (p_min_score = 'NaN' OR p_min_score IN ('Infinity', '-Infinity')) THEN
        RAISE EXCEPTION 'min_score must be a finite number, got %', p_min_score USING ERRCODE = 'PGM08';
    END IF;
    -- Query terms: the distinct lexemes of the query in the space's configuration (stop words and
    -- punctuation drop out; a query of only those has no text side). Matched as an OR of lexemes.
    v_lexemes := ARRAY(SELECT DISTINCT x.lexeme FROM unnest(to_tsvector(v_space.text_config, p_query)) x ORDER BY 1);
    IF cardinality(v_lexemes) > 256 THEN
        RAISE EXCEPTION 'query text has % distinct terms; the limit is 256 distinct terms', cardinality(v_lexemes)
            USING ERRCODE = 'PGM08', HINT = 'Stop words and repeated words do not count; search with the question, not a document.';
    END IF;
    IF cardinality(v_lexemes) > 0 THEN
        v_tsquery := array_to_string(ARRAY(
            SELECT '''' || replace(replace(l, '\', '\\'), '''', '''''') || '''' FROM unnest(v_lexemes) l), ' | ')::tsquery;
    END IF;

    -- Routing, as pgmem.search: a large tenant (or a large filtered scope of it) whose count is cached goes to
    -- the pools at once; otherwise the scope's ids, capped at the threshold + 1, are both the count and the
    -- exact route's candidates.
    IF v_space.index_kind <> 'exact' THEN
        IF p_as_of IS NULL THEN
            SELECT t.rows > v_threshold
                   AND t.counted_at > now() - make_interval(secs => coalesce(nullif(current_setting('pgmem.route_cache_seconds', true), '')::integer, 60))
            INTO v_large
            FROM pgmem.tenant_sizes t WHERE t.user_id = v_user AND t.space_id = v_space.space_id
              AND t.scope = pgmem._scope_key(p_agent_id, p_session_id, p_created_after, p_created_before, p_filter);
            v_large := coalesce(v_large, false);
        END IF;
        IF NOT v_large THEN
            v_ids := pgmem._scope_ids(v_user, v_space, p_agent_id, p_session_id, p_created_after, p_created_before,
                                      p_filter, p_as_of, v_threshold + 1);
            IF cardinality(v_ids) > v_threshold THEN
                v_large := true;
                v_ids := NULL;
                IF p_as_of IS NULL THEN  -- stores the scope's count (pgmem.tenant_sizes) for the next searches
                    v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
                    PERFORM pgmem._matching_rows(v_user, v_space, v_scope.o_sql, v_scope.o_filter, v_threshold,
                                                 p_agent_id, p_session_id, p_created_after, p_created_before, p_filter, p_as_of);
                END IF;
            END IF;
        END IF;
    END IF;
    IF v_large THEN
        -- Many rows: candidate pools, the best full-text matches and the nearest vectors (HNSW). (The full-text
        -- pool reads the tenant's rows by (user_id, space_id): under row-level security the GIN index of fts is
        -- never used, as @@ is not leakproof; bench/FINDINGS.md H4.)
        IF v_scope IS NULL THEN
            v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
        END IF;
        v_cast := CASE v_space.index_kind WHEN 'hnsw_halfvec' THEN '@vector@.halfvec' ELSE '@vector@.vector' END || '(' || v_space.dims || ')';
        PERFORM set_config('hnsw.ef_search', least(1000, v_pool)::text, true);
        PERFORM set_config('hnsw.max_scan_tuples', greatest(20000, 200 * p_k)::text, true);
        -- The full-text pool. A filtered scope's by a bitmap scan of the tenant's rows (pages in physical order, each
        -- read once: 0.6x the time of the index scan in created_at order that the generic plan picks,
        -- bench/FINDINGS.md H6), equal text ranks newest first, as the final order breaks ties.
        IF p_as_of IS NULL AND p_agent_id IS NULL AND p_session_id IS NULL AND p_created_after IS NULL
           AND p_created_before IS NULL AND (p_filter IS NULL OR p_filter = '{}'::jsonb)
           AND EXISTS (SELECT 1 FROM pgmem.term_stats s
                       WHERE s.user_id = v_user AND s.space_id = v_space.space_id AND s.lexeme = '') THEN
            -- The whole space: the v_pool best by BM25 over the user's own texts, from the postings, whatever the
            -- user's size (pgmem._text_top, exact), less those expired and not yet purged. (No statistics: a
            -- Citus cluster, which keeps no postings, pgmem._memories_terms; ts_rank below.)
            v_ids := (pgmem._text_top(v_user, v_space.space_id, v_lexemes, v_pool, p_k, 20 * v_pool)).o_ids;
            v_ids := ARRAY(SELECT m.id FROM unnest(v_ids) AS c(id) JOIN pgmem.memories m ON m.user_id = v_user AND m.id = c.id
                           WHERE pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl) > now() AND m.valid_from <= now());
            -- With the memory before and after each in its session: a reply is found by the words of the turn it
            -- answers (the session window of step 2), and the window of a match is whole.
            v_ids := v_ids || ARRAY(
                SELECT n.id
                FROM unnest(v_ids) AS c(id) JOIN pgmem.memories m ON m.user_id = v_user AND m.id = c.id
                CROSS JOIN LATERAL (
                    (SELECT x.id FROM pgmem.memories x
                     WHERE x.user_id = v_user AND x.session_id = m.session_id AND (x.created_at, x.seq) > (m.created_at, m.seq)
                       AND x.space_id = v_space.space_id AND x.valid_to IS NULL AND x.valid_from <= now()
                       AND pgmem._expiry(x.expires_at, x.created_at, v_space.memory_ttl) > now()
                     ORDER BY x.created_at, x.seq LIMIT 1)
                    UNION ALL
                    (SELECT x.id FROM pgmem.memories x
                     WHERE x.user_id = v_user AND x.session_id = m.session_id AND (x.created_at, x.seq) < (m.created_at, m.seq)
                       AND x.space_id = v_space.space_id AND x.valid_to IS NULL AND x.valid_from <= now()
                       AND pgmem._expiry(x.expires_at, x.created_at, v_space.memory_ttl) > now()
                     ORDER BY x.created_at DESC, x.seq DESC LIMIT 1)) n
                WHERE m.session_id IS NOT NULL);
        ELSE
            -- A filtered scope: its rows that hold a query term, ranked by ts_rank.
            PERFORM set_config('enable_indexscan', 'off', true);
            EXECUTE format('SELECT array(SELECT m.id FROM pgmem.memories m WHERE %1$s AND m.fts @@ $14'
                           || ' ORDER BY ts_rank(m.fts, $14) DESC, m.created_at DESC, m.id LIMIT %2$s)', v_scope.o_sql, v_pool)
            INTO v_ids
            USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
                  (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text, p_embedding,
                  NULL::integer, NULL::text, NULL::float8, v_lexemes, v_tsquery;
            PERFORM set_config('enable_indexscan', 'on', true);
        END IF;
        IF p_embedding IS NOT NULL THEN  -- united with the nearest vectors (HNSW)
            -- Pass 1: HNSW. The scan of the shared index stops after hnsw.max_scan_tuples entries: when other
            -- tenants' vectors lie nearer the query than this user's, it returns fewer rows than asked (none at
            -- worst), and the user's nearest memories would be missing whatever their text. Then pass 2: the
            -- scope's nearest rows by an exact scan (the index off: a scan of the user's rows and a sort).
            PERFORM set_config('enable_sort', 'off', true);
            FOR v_pass IN 1 .. 2 LOOP
                EXECUTE format('SELECT array(SELECT m.id FROM pgmem.memories m WHERE %1$s'
                               || ' ORDER BY (m.embedding::%3$s) OPERATOR(@vector@.<=>) (@vector@.l2_normalize($9)::%3$s)'
                               || ' LIMIT %2$s)', v_scope.o_sql, v_pool, v_cast)
                INTO v_near
                USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
                      (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text, p_embedding;
                EXIT WHEN coalesce(cardinality(v_near), 0) >= v_pool;
                PERFORM set_config('enable_indexscan', 'off', true);
                PERFORM set_config('enable_sort', 'on', true);
            END LOOP;
            PERFORM set_config('enable_indexscan', 'on', true);
            PERFORM set_config('enable_sort', 'on', true);
            v_ids := ARRAY(SELECT DISTINCT x FROM unnest(v_ids || v_near) AS x);
        END IF;
        IF cardinality(v_ids) < p_k THEN
            v_ids := NULL;  -- the pools hold fewer than k rows (a selective filter): score every matching row
        END IF;
    END IF;
    IF v_ids IS NULL THEN  -- an exact space, or pools too small
        v_ids := pgmem._scope_ids(v_user, v_space, p_agent_id, p_session_id, p_created_after, p_created_before,
                                  p_filter, p_as_of, NULL);
    END IF;

    -- Every constant of the score (text mode: no vector weight).
    SELECT * INTO v_f FROM pgmem._hybrid_formula(p_text_weight, CASE WHEN p_embedding IS NULL THEN 0 ELSE p_vector_weight END,
                                                 p_speaker_weight, p_session_weight);

    -- 1. The candidates in one pass, numbered by session and place in it: each one's own cosine, its window's
    --    document length, and the query terms it holds (one row per term). Two forms of one statement, the same
    --    rows, written twice so that each keeps its own cached plan: on the exact route every memory of the scope is a candidate, so the memories are read by the
    --    user's rows and hash-joined to the candidates (one bitmap scan); from the pools (a few hundred of a large
    --    tenant's rows) a nested loop over their ids, by primary key.
    IF NOT v_large THEN
        PERFORM set_config('enable_nestloop', 'off', true);
        WITH u AS MATERIALIZED (  -- each cosine computed once; fts: only the query's lexemes (fts has no weights, so
                                  -- the query's lexemes marked A and the A ones kept are exactly those, positions kept)
            SELECT m.id, coalesce(m.session_id, m.id::text) AS sess, m.created_at, m.seq, m.fts_len,
                   ts_filter(setweight(m.fts, 'A', v_lexemes), '{a}') AS fts, coalesce(m.metadata ->> 'speaker', '') AS speaker,
                   1 - (m.embedding OPERATOR(@vector@.<=>) p_embedding) AS sim
            FROM unnest(v_ids) AS c(id)
            JOIN pgmem.memories m ON m.user_id = v_user AND m.id = c.id),
        w AS MATERIALIZED (  -- pos: the candidate's number, by session and place in it; idx: its place in its session (of n)
            SELECT u.*, row_number() OVER (ORDER BY u.sess, u.created_at, u.seq) AS pos,
                   row_number() OVER s AS idx, count(*) OVER (PARTITION BY u.sess) AS n,
                   u.fts_len + v_f.next_wt * coalesce(lag(u.fts_len, 1) OVER s, 0) + v_f.prev_wt * coalesce(lead(u.fts_len, 1) OVER s, 0)
                       + v_f.far_wt * coalesce(lag(u.fts_len, 2) OVER s, 0) + v_f.far_wt * coalesce(lead(u.fts_len, 2) OVER s, 0) AS dl
            FROM u
            WINDOW s AS (PARTITION BY u.sess ORDER BY u.created_at, u.seq))
        SELECT c.pos, c.id, c.sess, c.dl, c.speaker, c.sim, c.created_at, h.pos, h.idx, h.n, h.lexeme, h.tf
        INTO v_c_pos, v_c_id, v_c_sess, v_c_dl, v_c_speaker, v_c_sim, v_c_created, v_t_pos, v_t_idx, v_t_n, v_t_lexeme, v_t_tf
        FROM (SELECT array_agg(w.pos) AS pos, array_agg(w.id) AS id, array_agg(w.sess) AS sess, array_agg(w.dl) AS dl,
                     array_agg(w.speaker) AS speaker, array_agg(w.sim) AS sim, array_agg(w.created_at) AS created_at FROM w) c,
             (SELECT array_agg(w.pos) AS pos, array_agg(w.idx) AS idx, array_agg(w.n) AS n, array_agg(x.lexeme) AS lexeme,
                     array_agg(coalesce(array_length(x.positions, 1), 1)::float8) AS tf
              FROM w CROSS JOIN LATERAL unnest(w.fts) AS x) h;
        PERFORM set_config('enable_nestloop', 'on', true);
    ELSE
        WITH u AS MATERIALIZED (  -- each cosine computed once; fts: only the query's lexemes (fts has no weights, so
                                  -- the query's lexemes marked A and the A ones kept are exactly those, positions kept)
            SELECT m.id, coalesce(m.session_id, m.id::text) AS sess, m.created_at, m.seq, m.fts_len,
                   ts_filter(setweight(m.fts, 'A', v_lexemes), '{a}') AS fts, coalesce(m.metadata ->> 'speaker', '') AS speaker,
                   1 - (m.embedding OPERATOR(@vector@.<=>) p_embedding) AS sim
            FROM unnest(v_ids) AS c(id)
            JOIN pgmem.memories m ON m.user_id = v_user AND m.id = c.id),
        w AS MATERIALIZED (  -- pos: the candidate's number, by session and place in it; idx: its place in its session (of n)
            SELECT u.*, row_number() OVER (ORDER BY u.sess, u.created_at, u.seq) AS pos,
                   row_number() OVER s AS idx, count(*) OVER (PARTITION BY u.sess) AS n,
                   u.fts_len + v_f.next_wt * coalesce(lag(u.fts_len, 1) OVER s, 0) + v_f.prev_wt * coalesce(lead(u.fts_len, 1) OVER s, 0)
                       + v_f.far_wt * coalesce(lag(u.fts_len, 2) OVER s, 0) + v_f.far_wt * coalesce(lead(u.fts_len, 2) OVER s, 0) AS dl
            FROM u
            WINDOW s AS (PARTITION BY u.sess ORDER BY u.created_at, u.seq))
        SELECT c.pos, c.id, c.sess, c.dl, c.speaker, c.sim, c.created_at, h.pos, h.idx, h.n, h.lexeme, h.tf
        INTO v_c_pos, v_c_id, v_c_sess, v_c_dl, v_c_speaker, v_c_sim, v_c_created, v_t_pos, v_t_idx, v_t_n, v_t_lexeme, v_t_tf
        FROM (SELECT array_agg(w.pos) AS pos, array_agg(w.id) AS id, array_agg(w.sess) AS sess, array_agg(w.dl) AS dl,
                     array_agg(w.speaker) AS speaker, array_agg(w.sim) AS sim, array_agg(w.created_at) AS created_at FROM w) c,
             (SELECT array_agg(w.pos) AS pos, array_agg(w.idx) AS idx, array_agg(w.n) AS n, array_agg(x.lexeme) AS lexeme,
                     array_agg(coalesce(array_length(x.positions, 1), 1)::float8) AS tf
              FROM w CROSS JOIN LATERAL unnest(w.fts) AS x) h;
    END IF;

    -- 2. Scores, over those rows only, with hash joins (a nested loop would rescan the per-candidate aggregates
    --    for every candidate: the generic plan, planned once per connection, cannot count them). The vector score
    --    (best of the own and the sentence cosines, plus the context cosine; else the own cosine again) reads
    --    the extra vectors of the v_pool candidates best by BM25 and the v_pool nearest by their own cosine only
    --    (4.4 cosines and an index scan each); the others score with their own cosine (docs/recall.md).
    PERFORM set_config('enable_nestloop', 'off', true);
    SELECT array_agg(r.id ORDER BY r.score DESC, r.created_at DESC, r.id), array_agg(r.score ORDER BY r.score DESC, r.created_at DESC, r.id),
           array_agg(r.bs ORDER BY r.score DESC, r.created_at DESC, r.id), array_agg(r.ds ORDER BY r.score DESC, r.created_at DESC, r.id),
           array_agg(r.sim ORDER BY r.score DESC, r.created_at DESC, r.id)
    INTO v_h_id, v_h_score, v_h_bs, v_h_ds, v_h_sim
    FROM (
        WITH f AS MATERIALIZED (SELECT v_f.next_wt AS next_wt, v_f.prev_wt AS prev_wt, v_f.far_wt AS far_wt, v_f.k1 AS k1,
                                       v_f.b AS b, v_f.text_wt AS text_wt, v_f.vector_wt AS vector_wt,
                                       v_f.speaker_wt AS speaker_wt, v_f.session_wt AS session_wt),
        u AS MATERIALIZED (
            SELECT * FROM unnest(v_c_pos, v_c_id, v_c_sess, v_c_dl, v_c_speaker, v_c_sim, v_c_created)
                          AS u(pos, id, sess, dl, speaker, sim, created_at)),
        st AS MATERIALIZED (SELECT count(*)::float8 AS n, greatest(avg(u.dl), 1) AS avgdl FROM u),
        spread AS MATERIALIZED (  -- a term counts for its own memory and, less, for its neighbours in the session
            SELECT h.pos + o.off AS tpos, h.lexeme, h.tf * o.wt AS tf
            FROM unnest(v_t_pos, v_t_idx, v_t_n, v_t_lexeme, v_t_tf) AS h(pos, idx, n, lexeme, tf) CROSS JOIN f
            CROSS JOIN LATERAL (VALUES (0, 1.0::float8), (1, f.next_wt), (-1, f.prev_wt),
                                       (2, f.far_wt), (-2, f.far_wt)) AS o(off, wt)
            WHERE h.idx + o.off BETWEEN 1 AND h.n),
        tfe AS MATERIALIZED (
            SELECT s.tpos, s.lexeme, sum(s.tf) AS tf FROM spread s GROUP BY s.tpos, s.lexeme),
        df AS MATERIALIZED (SELECT tfe.lexeme, count(*)::float8 AS df FROM tfe GROUP BY tfe.lexeme),
        bm AS MATERIALIZED (  -- Okapi BM25, idf ln(1 + (N - df + 0.5) / (df + 0.5)), statistics over the candidates
            SELECT tfe.tpos, sum(ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5))
                                 * tfe.tf * (f.k1 + 1) / (tfe.tf + f.k1 * ((1 - f.b) + f.b * u.dl / st.avgdl))) AS s
            FROM tfe JOIN df USING (lexeme) JOIN u ON u.pos = tfe.tpos CROSS JOIN st CROSS JOIN f GROUP BY tfe.tpos),
        near AS MATERIALIZED (  -- the candidates whose extra vectors are read
            SELECT r.pos, r.id FROM (
                SELECT u.pos, u.id, bm.s, row_number() OVER (ORDER BY u.sim DESC, u.id) AS by_sim,
                       row_number() OVER (ORDER BY bm.s DESC NULLS LAST, u.id) AS by_text
                FROM u LEFT JOIN bm ON bm.tpos = u.pos WHERE p_embedding IS NOT NULL) r
            WHERE r.by_sim <= v_pool OR (r.s > 0 AND r.by_text <= v_pool)),
        xv AS MATERIALIZED (  -- their best sentence vector, and their context vector (the first by n)
            SELECT c.pos, e.sentence, e.context
            FROM near c CROSS JOIN LATERAL (
                SELECT max(v.sim) FILTER (WHERE v.kind = 'sentence') AS sentence,
                       (min(ARRAY[v.n, v.sim]) FILTER (WHERE v.kind = 'context'))[2] AS context
                FROM (SELECT x.n::float8 AS n, x.kind, 1 - (x.embedding OPERATOR(@vector@.<=>) p_embedding) AS sim
                      FROM pgmem.memory_vectors x WHERE x.user_id = v_user AND x.memory_id = c.id) v) e),
        sp AS MATERIALIZED (  -- speaker match: a lexeme of metadata.speaker is a query term; once per distinct speaker
            SELECT d.speaker, (EXISTS (SELECT 1 FROM unnest(to_tsvector(v_space.text_config, d.speaker)) AS x
                                       WHERE x.lexeme = ANY (v_lexemes)))::integer::float8 AS spk
            FROM (SELECT DISTINCT u.speaker FROM u) d),
        raw AS (
            SELECT u.id, u.sess, u.created_at, u.sim,
                   coalesce(greatest(u.sim, coalesce(xv.sentence, -1)) + coalesce(xv.context, u.sim), 0) AS ds,
                   coalesce(bm.s, 0) AS bs, sp.spk
            FROM u JOIN sp ON sp.speaker = u.speaker LEFT JOIN bm ON bm.tpos = u.pos LEFT JOIN xv ON xv.pos = u.pos),
        vfloor AS MATERIALIZED (  -- the vector score the fusion counts from: the candidates' 10th percentile,
                                  -- shrunk towards 0 when they are few (a percentile of three scores is no statistic)
            SELECT percentile_cont(v_f.vector_floor) WITHIN GROUP (ORDER BY r.ds) * count(*) / (count(*) + v_f.vector_floor_n)
                   AS ds
            FROM raw r),
        fused AS (
            SELECT r.*, f.text_wt * coalesce(r.bs / nullif(max(r.bs) OVER (), 0), 0)
                      + f.vector_wt * coalesce(greatest(r.ds - fl.ds, 0) / nullif(max(r.ds) OVER () - fl.ds, 0), 0)
                      + f.speaker_wt * r.spk AS fu
            FROM raw r CROSS JOIN f CROSS JOIN vfloor fl),
        ranked AS (
            SELECT x.*, x.fu + f.session_wt * max(x.fu) OVER (PARTITION BY x.sess) AS score FROM fused x CROSS JOIN f)
        SELECT * FROM ranked x
        WHERE p_min_score IS NULL OR x.score >= p_min_score
        ORDER BY x.score DESC, x.created_at DESC, x.id
        LIMIT p_k) r;
    PERFORM set_config('enable_nestloop', 'on', true);

    -- 3. The k best, read back by primary key, in score order.
    RETURN QUERY
    SELECT m.id, m.user_id, v_space.name, m.agent_id, m.session_id, m.content, m.metadata, m.created_at, m.updated_at,
           nullif(pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl), 'infinity'), m.version,
           CASE WHEN p_embedding IS NULL THEN NULL ELSE greatest(-1, least(1, h.sim)) END, h.score, h.bs,
           CASE WHEN p_embedding IS NULL THEN NULL ELSE h.ds END
    FROM unnest(v_h_id, v_h_score, v_h_bs, v_h_ds, v_h_sim) WITH ORDINALITY AS h(id, score, bs, ds, sim, ord)
    JOIN pgmem.memories m ON m.user_id = v_user AND m.id = h.id
    ORDER BY h.ord;
END
$$;
COMMENT ON FUNCTION pgmem.search_hybrid(text, text, vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text, timestamptz, double precision) IS
    'Hybrid recall for the current user over the memories that hold now (or at p_as_of): BM25 over the query''s lexemes (each memory''s text plus a +-2 window of its session, per-user statistics) fused with vector similarity (best sentence + context, counted from the candidates'' 10th percentile times n / (n + 20); read for the max(100, 4k) candidates best by BM25 or nearest by own cosine; the others their own cosine twice), + speaker match (metadata.speaker named in the query) + session boost; min(k, matching rows), highest score first, without those scoring below p_min_score. Without p_embedding: full-text only. NULL weights take the formula''s defaults (0.4 text, 0.6 vector, 0.2 speaker, 0.4 session). Same filters and routing as pgmem.search: exact over <= pgmem.exact_search_max_rows rows, else candidate pools (the best full-text matches: by BM25 over the user''s postings and statistics, pgmem._text_top, for a search of the whole space, by ts_rank over the scope''s rows for a filtered one; + HNSW, by an exact scan when the index returns fewer than the pool: other tenants'' vectors never empty it). Method: docs/recall.md. The query text is at most 100000 characters and 256 distinct terms (PGM08).';
