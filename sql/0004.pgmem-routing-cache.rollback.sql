-- Undo 0004: search and hybrid search count a tenant's rows on every call again (their 0003 bodies).
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
    -- space it returns too few rows. So count the matching rows, capped, and scan them exactly when few.
    IF v_space.index_kind <> 'exact' THEN
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM pgmem.memories m WHERE %s LIMIT %s) c', v_scope.o_sql, v_threshold + 1)
        INTO v_n
        USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
              (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text;
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

CREATE OR REPLACE FUNCTION pgmem.search_hybrid(
    p_space text, p_query text, p_embedding vector DEFAULT NULL, p_k integer DEFAULT 10,
    p_agent_id text DEFAULT NULL, p_session_id text DEFAULT NULL, p_filter jsonb DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_text_weight double precision DEFAULT 0.4, p_vector_weight double precision DEFAULT 0.6,
    p_speaker_weight double precision DEFAULT 0.2, p_session_weight double precision DEFAULT 0.4,
    p_model text DEFAULT NULL, p_as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgmem.hybrid_hit
LANGUAGE plpgsql VOLATILE
SET hnsw.ef_search = 40 SET hnsw.iterative_scan = 'relaxed_order' SET hnsw.max_scan_tuples = 20000
SET enable_sort = on
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
    v_scope record;
    v_threshold integer := coalesce(nullif(current_setting('pgmem.exact_search_max_rows', true), '')::integer, 5000);
    v_lexemes text[];
    v_tsquery tsquery;
    v_n bigint;
    v_pool integer := greatest(100, 4 * p_k);
    v_ids uuid[];
    v_cast text;
    v_cand text;
    v_rows pgmem.hybrid_hit[];
    v_exact boolean;
BEGIN
    -- White space as Python's str.strip() sees it (pgmem.validation.check_query), not only ' '.
    IF p_query IS NULL OR p_query ~ '^[[:space:]\u001c-\u001f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$' THEN
        RAISE EXCEPTION 'query text is empty or only white space' USING ERRCODE = 'PGM08';
    END IF;
    IF p_k IS NULL OR p_k < 1 OR p_k > 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, got %', p_k USING ERRCODE = 'PGM08';
    END IF;
    IF NOT (p_text_weight >= 0 AND p_vector_weight >= 0 AND p_speaker_weight >= 0 AND p_session_weight >= 0
            AND p_text_weight + p_vector_weight + p_speaker_weight + p_session_weight < 'Infinity') THEN
        RAISE EXCEPTION 'weights must be finite and >= 0' USING ERRCODE = 'PGM08';
    END IF;
    -- Query terms: the distinct lexemes of the query in the space's configuration (stop words and
    -- punctuation drop out; a query of only those has no text side). Matched as an OR of lexemes.
    v_lexemes := ARRAY(SELECT DISTINCT x.lexeme FROM unnest(to_tsvector(v_space.text_config, p_query)) x ORDER BY 1);
    IF cardinality(v_lexemes) > 0 THEN
        v_tsquery := array_to_string(ARRAY(
            SELECT '''' || replace(replace(l, '\', '\\'), '''', '''''') || '''' FROM unnest(v_lexemes) l), ' | ')::tsquery;
    END IF;
    v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM pgmem.memories m WHERE %s LIMIT %s) c', v_scope.o_sql, v_threshold + 1)
    INTO v_n
    USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text;
    v_exact := v_n <= v_threshold OR v_space.index_kind = 'exact';

    FOR pass IN 1..2 LOOP
        IF v_exact THEN
            -- Few rows: score every matching row (BM25 statistics over all of them).
            v_cand := 'SELECT m.* FROM pgmem.memories m WHERE ' || v_scope.o_sql;
        ELSE
            -- Many rows: candidate pools, the best full-text matches (GIN) and the nearest vectors (HNSW).
            v_cast := CASE v_space.index_kind WHEN 'hnsw_halfvec' THEN 'halfvec' ELSE 'vector' END || '(' || v_space.dims || ')';
            PERFORM set_config('hnsw.ef_search', least(1000, v_pool)::text, true);
            PERFORM set_config('hnsw.max_scan_tuples', greatest(20000, 200 * p_k)::text, true);
            PERFORM set_config('enable_sort', 'off', true);
            EXECUTE format(
                'SELECT array(SELECT c.id FROM (SELECT m.id FROM pgmem.memories m WHERE %1$s AND m.fts @@ $14'
                || ' ORDER BY ts_rank(m.fts, $14) DESC LIMIT %2$s) c'
                || CASE WHEN p_embedding IS NULL THEN '' ELSE
                   ' UNION SELECT d.id FROM (SELECT m.id FROM pgmem.memories m WHERE %1$s'
                   || ' ORDER BY (m.embedding::%3$s) <=> (l2_normalize($9)::%3$s) LIMIT %2$s) d' END || ')',
                v_scope.o_sql, v_pool, v_cast)
            INTO v_ids
            USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
                  (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text, p_embedding,
                  NULL::integer, NULL::text, NULL::float8, v_lexemes, v_tsquery;
            PERFORM set_config('enable_sort', 'on', true);
            v_cand := 'SELECT m.* FROM pgmem.memories m WHERE m.user_id = $1 AND m.id = ANY($12::uuid[])';
        END IF;
        EXECUTE $q$
        WITH u AS MATERIALIZED ($q$ || v_cand || $q$),
        w AS (
            SELECT u.id, coalesce(u.session_id, u.id::text) AS sess, u.fts_len AS len,
                   row_number() OVER (PARTITION BY coalesce(u.session_id, u.id::text) ORDER BY u.created_at, u.seq) AS idx
            FROM u),
        wl AS (  -- BM25F document length over a window of +-2 memories of the same session
            SELECT w.*, w.len + 0.6 * coalesce(lag(w.len, 1) OVER s, 0) + 0.4 * coalesce(lead(w.len, 1) OVER s, 0)
                          + 0.2 * coalesce(lag(w.len, 2) OVER s, 0) + 0.2 * coalesce(lead(w.len, 2) OVER s, 0) AS dl
            FROM w WINDOW s AS (PARTITION BY w.sess ORDER BY w.idx)),
        st AS (SELECT count(*)::float8 AS n, greatest(avg(wl.dl), 1) AS avgdl FROM wl),
        hit AS MATERIALIZED (  -- each matching memory's fts is unnested once
            SELECT wl.sess, wl.idx, x.lexeme, coalesce(array_length(x.positions, 1), 1)::float8 AS tf
            FROM u JOIN wl ON wl.id = u.id CROSS JOIN LATERAL unnest(u.fts) AS x
            WHERE u.fts @@ $14 AND x.lexeme = ANY($13)),
        spread AS (  -- a term counts for its own memory and, less, for its neighbours in the session
            SELECT h.sess, h.idx + o.off AS tidx, h.lexeme, h.tf * o.wt AS tf
            FROM hit h CROSS JOIN (VALUES (0, 1.0::float8), (1, 0.6), (-1, 0.4), (2, 0.2), (-2, 0.2)) AS o(off, wt)),
        tfe AS (
            SELECT wl.id, s.lexeme, sum(s.tf) AS tf, max(wl.dl) AS dl
            FROM spread s JOIN wl ON wl.sess = s.sess AND wl.idx = s.tidx
            GROUP BY wl.id, s.lexeme),
        df AS (SELECT tfe.lexeme, count(*)::float8 AS df FROM tfe GROUP BY tfe.lexeme),
        bm AS (  -- Okapi BM25, k1 = 1.2, b = 0.5
            SELECT tfe.id, sum(ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5))
                               * tfe.tf * 2.2 / (tfe.tf + 1.2 * (0.5 + 0.5 * tfe.dl / st.avgdl))) AS s
            FROM tfe JOIN df USING (lexeme) CROSS JOIN st GROUP BY tfe.id),
        dn AS MATERIALIZED (  -- best of the memory's own and sentence vectors, plus its context vector (else its own)
            SELECT u.id, 1 - (u.embedding <=> $9) AS sim,
                   greatest(1 - (u.embedding <=> $9),
                            coalesce((SELECT max(1 - (v.embedding <=> $9)) FROM pgmem.memory_vectors v
                                      WHERE v.user_id = $1 AND v.memory_id = u.id AND v.kind = 'sentence'), -1))
                 + coalesce((SELECT 1 - (v.embedding <=> $9) FROM pgmem.memory_vectors v
                             WHERE v.user_id = $1 AND v.memory_id = u.id AND v.kind = 'context' ORDER BY v.n LIMIT 1),
                            1 - (u.embedding <=> $9)) AS s
            FROM u),
        raw AS (
            SELECT u.*, wl.sess, coalesce(bm.s, 0) AS bs, coalesce(dn.s, 0) AS ds, dn.sim,
                   (EXISTS (SELECT 1 FROM unnest(to_tsvector($15::regconfig, coalesce(u.metadata ->> 'speaker', ''))) AS x
                            WHERE x.lexeme = ANY($13)))::integer::float8 AS spk
            FROM u JOIN wl ON wl.id = u.id JOIN dn ON dn.id = u.id LEFT JOIN bm ON bm.id = u.id),
        fused AS (
            SELECT r.*, $16 * coalesce(r.bs / nullif(max(r.bs) OVER (), 0), 0)
                      + $17 * coalesce(greatest(r.ds, 0) / nullif(max(greatest(r.ds, 0)) OVER (), 0), 0)
                      + $18 * r.spk AS f
            FROM raw r),
        ranked AS (
            SELECT f.*, f.f + $19 * max(f.f) OVER (PARTITION BY f.sess) AS score FROM fused f
            ORDER BY score DESC, f.created_at DESC, f.id LIMIT $10)
        SELECT coalesce(array_agg(ROW(r.id, r.user_id, $11, r.agent_id, r.session_id, r.content, r.metadata, r.created_at,
                                      r.updated_at, nullif(pgmem._expiry(r.expires_at, r.created_at, $20), 'infinity'), r.version, CASE WHEN $9 IS NULL THEN NULL ELSE greatest(-1, least(1, r.sim)) END, r.score, r.bs,
                                      CASE WHEN $9 IS NULL THEN NULL ELSE r.ds END)::pgmem.hybrid_hit
                                  ORDER BY r.score DESC, r.created_at DESC, r.id), '{}')
        FROM ranked r
        $q$
        INTO v_rows
        USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
              (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text, p_embedding,
              p_k, v_space.name, v_ids, v_lexemes, v_tsquery, v_space.text_config,
              p_text_weight, CASE WHEN p_embedding IS NULL THEN 0 ELSE p_vector_weight END, p_speaker_weight, p_session_weight,
              v_space.memory_ttl;
        -- The pools can hold fewer than k rows (a selective filter): then score every matching row.
        EXIT WHEN v_exact OR cardinality(v_rows) >= p_k;
        v_exact := true;
    END LOOP;
    RETURN QUERY SELECT (v_rows[i]).* FROM generate_subscripts(v_rows, 1) AS i ORDER BY i;
END
$$;
COMMENT ON FUNCTION pgmem.search_hybrid(text, text, vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text, timestamptz) IS
    'Hybrid recall for the current user over the memories that hold now (or at p_as_of): BM25 over the query''s lexemes (each memory''s text plus a +-2 window of its session, per-user statistics) fused with vector similarity (best sentence + context), + speaker match (metadata.speaker named in the query) + session boost; min(k, matching rows), highest score first. Without p_embedding: full-text only. Same filters and routing as pgmem.search: exact over <= pgmem.exact_search_max_rows rows, else candidate pools (GIN + HNSW). Method: docs/recall.md.';

DROP FUNCTION pgmem._matching_rows(text, pgmem.spaces, text, pgmem.compiled_filter, integer, text, text, timestamptz, timestamptz, jsonb, timestamptz);
DROP TABLE pgmem.tenant_sizes;
