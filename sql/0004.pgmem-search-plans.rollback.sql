-- Undo 0004: search, create_space, set_retention and add_batch as 0003 left them (text copied from 0002 and 0003).
DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;

CREATE OR REPLACE FUNCTION pgmem.search(
    p_space text, p_embedding vector, p_k integer DEFAULT 10,
    p_agent_id text DEFAULT NULL, p_session_id text DEFAULT NULL, p_filter jsonb DEFAULT NULL,
    p_min_similarity double precision DEFAULT NULL, p_model text DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE
SET hnsw.ef_search = 40 SET hnsw.iterative_scan = 'relaxed_order' SET hnsw.max_scan_tuples = 20000
SET enable_sort = on
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
    v_scope record;
    v_threshold integer := coalesce(nullif(current_setting('pgmem.exact_search_max_rows', true), '')::integer, 5000);
    v_n bigint;
    v_rows pgmem.memory[];
    v_cast text;
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
    v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);

    -- Routing. A shared HNSW index post-filters: for a tenant (or filter) holding a small share of the
    -- space it returns too few rows. So count the matching rows, capped, and scan them exactly when few
    -- (a tenant's own size comes from pgmem.tenant_sizes when counted recently).
    IF v_space.index_kind <> 'exact' THEN
        v_n := pgmem._matching_rows(v_user, v_space, v_scope.o_sql, v_scope.o_filter, v_threshold,
                                    p_agent_id, p_session_id, p_created_after, p_created_before, p_filter, p_as_of);
    END IF;

    IF v_space.index_kind <> 'exact' AND v_n > v_threshold THEN
        v_cast := CASE v_space.index_kind WHEN 'hnsw_halfvec' THEN 'halfvec' ELSE 'vector' END || '(' || v_space.dims || ')';
        PERFORM set_config('hnsw.ef_search', least(1000, greatest(100, 2 * p_k))::text, true);
        PERFORM set_config('hnsw.max_scan_tuples', greatest(20000, 200 * p_k)::text, true);
        PERFORM set_config('enable_sort', 'off', true);
        -- relaxed_order may return rows slightly out of order: materialise, then re-sort exactly.
        EXECUTE format(
            -- The query is normalised first (cosine ignores length), so its halfvec copy neither overflows
            -- (components beyond +-65504) nor underflows to a zero vector.
            'WITH r AS MATERIALIZED (SELECT m, (m.embedding::%1$s) <=> (l2_normalize($9)::%1$s) AS distance FROM pgmem.memories m WHERE %2$s'
            || ' ORDER BY (m.embedding::%1$s) <=> (l2_normalize($9)::%1$s) LIMIT $10)'
            || ' SELECT array_agg(pgmem._to_memory(r.m, $11, greatest(-1, least(1, 1 - (((r.m).embedding) <=> $9))), %3$L::interval) ORDER BY ((r.m).embedding) <=> $9, (r.m).id) FROM r',
            v_cast, v_scope.o_sql, v_space.memory_ttl)
        INTO v_rows
        USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
              (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text,
              p_embedding, p_k, v_space.name;
        PERFORM set_config('enable_sort', 'on', true);
        IF coalesce(cardinality(v_rows), 0) >= p_k THEN
            RETURN QUERY SELECT (v_rows[i]).* FROM generate_subscripts(v_rows, 1) AS i
                WHERE p_min_similarity IS NULL OR (v_rows[i]).similarity >= p_min_similarity ORDER BY i;
            RETURN;
        END IF;
        -- The index gave fewer than k rows (a filter selective across the whole index): fall back to the
        -- exact scan, which returns min(k, matching rows).
    END IF;

    RETURN QUERY EXECUTE format(
        'SELECT %2$s FROM pgmem.memories m WHERE %1$s'
        || ' AND ($12::float8 IS NULL OR 1 - (m.embedding <=> $9) >= $12)'
        || ' ORDER BY m.embedding <=> $9, m.id LIMIT $10', v_scope.o_sql,
        pgmem._memory_columns('$11', 'greatest(-1, least(1, 1 - (m.embedding <=> $9)))', v_space.memory_ttl))
    USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text,
          p_embedding, p_k, v_space.name, p_min_similarity;
END
$$;
COMMENT ON FUNCTION pgmem.search(text, vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz) IS
    'Nearest memories of the current user that hold now (or at p_as_of), by cosine similarity (1 - cosine distance, clamped to [-1, 1]), highest first, at most k (1..1000): min(k, matching rows) whatever the tenant''s size. Routes to an exact scan when at most pgmem.exact_search_max_rows (default 5000) rows match, else HNSW with iterative scan (ef_search max(100, 2k), relaxed order re-sorted), falling back to exact when the index returns fewer than k.';

CREATE OR REPLACE FUNCTION pgmem.create_space(
    p_name text, p_model text, p_dims integer, p_distance text DEFAULT 'cosine',
    p_hnsw_m integer DEFAULT 16, p_hnsw_ef_construction integer DEFAULT 64, p_text_config regconfig DEFAULT 'english'
) RETURNS pgmem.spaces
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, public
AS $$
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
    -- pgvector's HNSW indexes vector up to 2,000 dimensions and halfvec up to 4,000; above that, exact scan.
    v_kind := CASE WHEN p_dims <= 2000 THEN 'hnsw_vector' WHEN p_dims <= 4000 THEN 'hnsw_halfvec' ELSE 'exact' END;
    INSERT INTO pgmem.spaces (name, model, dims, distance, text_config, index_kind, hnsw_m, hnsw_ef_construction)
    VALUES (p_name, p_model, p_dims, 'cosine', coalesce(p_text_config, 'english'), v_kind,
            CASE WHEN v_kind <> 'exact' THEN p_hnsw_m END, CASE WHEN v_kind <> 'exact' THEN p_hnsw_ef_construction END)
    RETURNING * INTO v_space;
    IF v_kind = 'hnsw_vector' THEN
        EXECUTE format('CREATE INDEX memories_space_%s_hnsw ON pgmem.memories USING hnsw ((embedding::vector(%s)) vector_cosine_ops) WITH (m = %s, ef_construction = %s) WHERE space_id = %s',
                       v_space.space_id, p_dims, p_hnsw_m, p_hnsw_ef_construction, v_space.space_id);
    ELSIF v_kind = 'hnsw_halfvec' THEN
        EXECUTE format('CREATE INDEX memories_space_%s_hnsw ON pgmem.memories USING hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops) WITH (m = %s, ef_construction = %s) WHERE space_id = %s',
                       v_space.space_id, p_dims, p_hnsw_m, p_hnsw_ef_construction, v_space.space_id);
    END IF;
    RETURN v_space;
END
$$;
COMMENT ON FUNCTION pgmem.create_space(text, text, integer, text, integer, integer, regconfig) IS
    'Register an embedding space (name, model, dims, cosine) and build its partial HNSW index: vector up to 2000 dims, halfvec (half precision) up to 4000, exact scan only above. p_text_config is the full-text configuration of its memories (default english: stemming, English stop words). Idempotent for identical arguments; a different model or dims for an existing name is error PGM09.';

CREATE OR REPLACE FUNCTION pgmem.set_retention(p_space text, p_memory_ttl interval, p_turn_ttl interval DEFAULT NULL) RETURNS pgmem.spaces
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem
AS $$
DECLARE
    v_space pgmem.spaces := pgmem.space(p_space);
BEGIN
    IF p_memory_ttl <= interval '0' OR p_turn_ttl <= interval '0' THEN
        RAISE EXCEPTION 'a time-to-live must be positive' USING ERRCODE = 'PGM08';
    END IF;
    UPDATE pgmem.spaces s SET memory_ttl = p_memory_ttl, turn_ttl = coalesce(p_turn_ttl, s.turn_ttl)
    WHERE s.space_id = v_space.space_id RETURNING * INTO v_space;
    RETURN v_space;
END
$$;
COMMENT ON FUNCTION pgmem.set_retention(text, interval, interval) IS
    'Schema owner and gateways: a space''s default time-to-live of memories (NULL: keep until deleted) and of turns (NULL: unchanged). Applies at once to every memory and turn without its own expires_at, counted from its created_at.';

DROP FUNCTION pgmem.add_batch(text, text[], vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], vector[], uuid[], text[]);
CREATE OR REPLACE FUNCTION pgmem.add_batch(
    p_space text, p_contents text[], p_embeddings vector[],
    p_agent_ids text[] DEFAULT NULL, p_session_ids text[] DEFAULT NULL, p_metadata jsonb[] DEFAULT NULL,
    p_expires_at timestamptz[] DEFAULT NULL, p_model text DEFAULT NULL, p_created_at timestamptz[] DEFAULT NULL,
    p_vector_items integer[] DEFAULT NULL, p_vector_kinds text[] DEFAULT NULL, p_vectors vector[] DEFAULT NULL,
    p_ids uuid[] DEFAULT NULL
) RETURNS TABLE (ordinal integer, id uuid, created boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, NULL, p_model);
    v_n integer := coalesce(cardinality(p_contents), 0);
    v_bad integer;
    v_created uuid[];
    v_known uuid[] := '{}';
    v_ids uuid[];
    v_flags boolean[];
BEGIN
    IF coalesce(cardinality(p_embeddings), 0) <> v_n
       OR (p_agent_ids IS NOT NULL AND cardinality(p_agent_ids) <> v_n)
       OR (p_session_ids IS NOT NULL AND cardinality(p_session_ids) <> v_n)
       OR (p_metadata IS NOT NULL AND cardinality(p_metadata) <> v_n)
       OR (p_expires_at IS NOT NULL AND cardinality(p_expires_at) <> v_n)
       OR (p_created_at IS NOT NULL AND cardinality(p_created_at) <> v_n)
       OR (p_ids IS NOT NULL AND cardinality(p_ids) <> v_n) THEN
        RAISE EXCEPTION 'batch arrays must all have % items', v_n USING ERRCODE = 'PGM08';
    END IF;
    IF v_n > 10000 THEN
        RAISE EXCEPTION 'a batch holds at most 10000 memories, got %', v_n USING ERRCODE = 'PGM08';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_embeddings, 1) AS i
    WHERE p_embeddings[i] IS NULL OR vector_dims(p_embeddings[i]) <> v_space.dims OR vector_norm(p_embeddings[i]) = 0
       OR (p_embeddings[i] <=> p_embeddings[i]) = 'NaN'::float8;
    IF v_bad IS NOT NULL THEN
        IF p_embeddings[v_bad] IS NULL OR vector_dims(p_embeddings[v_bad]) = v_space.dims THEN
            RAISE EXCEPTION 'item %: a zero or missing vector has no cosine similarity', v_bad - 1 USING ERRCODE = 'PGM08';
        END IF;
        RAISE EXCEPTION 'item %: expected % dimensions, got % (space "%", model "%")',
            v_bad - 1, v_space.dims, vector_dims(p_embeddings[v_bad]), v_space.name, v_space.model USING ERRCODE = 'PGM02';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_expires_at, 1) AS i WHERE p_expires_at[i] <= now();
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'item %: expires_at % is not in the future: the memory would be invisible at once', v_bad - 1, p_expires_at[v_bad]
            USING ERRCODE = 'PGM08';
    END IF;
    IF coalesce(cardinality(p_vector_items), 0) <> coalesce(cardinality(p_vector_kinds), 0)
       OR coalesce(cardinality(p_vector_items), 0) <> coalesce(cardinality(p_vectors), 0) THEN
        RAISE EXCEPTION 'extra vectors: items, kinds and vectors must have the same length' USING ERRCODE = 'PGM08';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_vector_items) AS e(item) WHERE e.item IS NULL OR e.item < 0 OR e.item >= v_n) THEN
        RAISE EXCEPTION 'extra vectors: item numbers must be from 0 to %', v_n - 1 USING ERRCODE = 'PGM08';
    END IF;
    -- Client ids (p_ids) this user has ever stored: a live memory, or a deleted one still in history.
    -- Such an item is not written again, so a retry after an ambiguous failure never duplicates.
    IF p_ids IS NOT NULL THEN
        SELECT coalesce(array_agg(DISTINCT x.id), '{}') INTO v_known FROM (
            SELECT k.id FROM pgmem.memories k WHERE k.user_id = v_user AND k.id = ANY (p_ids)
            UNION ALL
            SELECT h.memory_id FROM pgmem.history h WHERE h.user_id = v_user AND h.memory_id = ANY (p_ids)) x;
    END IF;
    PERFORM pgmem._expire_conflicts(v_user, v_space, ARRAY(SELECT pgmem.content_hash(c) FROM unnest(p_contents) c));
    -- seq follows item order (the order of turns), whatever order the rows are inserted in.
    WITH items AS MATERIALIZED (
        SELECT g.o, nextval('pgmem.memories_seq') AS seq
        FROM generate_series(1, v_n) AS g(o) LEFT JOIN unnest(v_known) AS kn(id) ON kn.id = p_ids[g.o]
        WHERE kn.id IS NULL
    ), ins AS (
        INSERT INTO pgmem.memories AS m (user_id, id, space_id, agent_id, session_id, content, embedding, metadata, expires_at, created_at, seq)
        SELECT v_user, coalesce(p_ids[o], gen_random_uuid()), v_space.space_id, p_agent_ids[o], p_session_ids[o],
               p_contents[o], p_embeddings[o], coalesce(p_metadata[o], '{}'), p_expires_at[o], coalesce(p_created_at[o], now()),
               items.seq
        FROM items
        -- Insert in content-hash order, not item order: concurrent batches holding the same texts in
        -- different orders then wait for each other instead of deadlocking.
        ORDER BY pgmem.content_hash(p_contents[o]), o
        -- Same content (memories_content_key), or a client id stored by a concurrent retry (memories_pkey).
        ON CONFLICT DO NOTHING
        RETURNING m.id
    )
    SELECT coalesce(array_agg(ins.id), '{}') INTO v_created FROM ins;
    -- Each item's memory: the one its client id names (stored before or now), else the one holding its content.
    SELECT array_agg(y.id ORDER BY y.o), array_agg(y.created ORDER BY y.o) INTO v_ids, v_flags
    FROM (
        SELECT x.o, x.id, x.created AND x.o = min(x.o) OVER (PARTITION BY x.id) AS created
        FROM (
            SELECT g.o, coalesce(kn.id, byid.id, m.id) AS id, byid.id IS NOT NULL OR c.id IS NOT NULL AS created
            FROM generate_series(1, v_n) AS g(o)
            LEFT JOIN unnest(v_known) AS kn(id) ON kn.id = p_ids[g.o]
            LEFT JOIN unnest(v_created) AS byid(id) ON byid.id = p_ids[g.o]
            LEFT JOIN pgmem.memories m
              ON m.user_id = v_user AND m.space_id = v_space.space_id AND m.content_hash = pgmem.content_hash(p_contents[g.o])
                 AND m.valid_to IS NULL
            LEFT JOIN unnest(v_created) AS c(id) ON c.id = m.id AND kn.id IS NULL AND byid.id IS NULL
        ) x
    ) y;
    IF p_vector_items IS NOT NULL THEN
        INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
        SELECT v_user, v_ids[e.item + 1], row_number() OVER (PARTITION BY e.item ORDER BY e.i), e.kind, e.emb
        FROM unnest(p_vector_items, p_vector_kinds, p_vectors) WITH ORDINALITY AS e(item, kind, emb, i)
        WHERE v_flags[e.item + 1];
    END IF;
    RETURN QUERY SELECT (i - 1)::integer, v_ids[i], v_flags[i] FROM generate_subscripts(v_ids, 1) AS i ORDER BY i;
END
$$;

DROP FUNCTION IF EXISTS pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, vector, integer, integer, interval);
DROP FUNCTION pgmem._build_knn();
DROP FUNCTION pgmem.as_user(text, anyelement);
DROP FUNCTION pgmem._knn_sql(pgmem.spaces, text);
COMMENT ON FUNCTION pgmem.add_batch(text, text[], vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], vector[], uuid[]) IS
    'Add up to 10000 memories in one statement, all or nothing. Returns one row per item (ordinal from 0) with its id and whether it was created; duplicates, within the batch or of stored memories, return the existing id. p_created_at (for imports) sets when each memory was made; default now(). Extra vectors: p_vector_items (item number from 0), p_vector_kinds, p_vectors, stored for created items only. p_ids: client-generated ids (idempotency keys); an item whose id this user already stored, even if since deleted, is not written again and returns that id with created = false, so a retry never duplicates.';
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmem FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgmem.add_batch(text, text[], vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], vector[], uuid[]) TO pgmem_agent;
