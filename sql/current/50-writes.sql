-- pgmem current schema, part 50: writes. add and add_batch (with extra vectors and expiry of conflicting
-- facts), update, edit (literal replace), supersede, invalidate, delete and delete_all. Every write locks
-- the current row first (_lock_current) and sets pgmem.actor for the history trigger.

CREATE FUNCTION pgmem._store_vectors(p_user text, p_memory_id uuid, p_kinds text[], p_embeddings vector[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_i integer;
BEGIN
    IF coalesce(cardinality(p_kinds), 0) <> coalesce(cardinality(p_embeddings), 0) THEN
        RAISE EXCEPTION 'extra vectors: % kinds for % vectors', coalesce(cardinality(p_kinds), 0), coalesce(cardinality(p_embeddings), 0)
            USING ERRCODE = 'PGM08';
    END IF;
    IF cardinality(p_kinds) > 1000 THEN
        RAISE EXCEPTION 'a memory holds at most 1000 extra vectors' USING ERRCODE = 'PGM08';
    END IF;
    -- One INSERT ... VALUES per vector: Citus runs an INSERT ... SELECT from unnest as COPY, which
    -- row-level security refuses.
    FOR v_i IN 1 .. coalesce(cardinality(p_kinds), 0) LOOP
        INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
        VALUES (p_user, p_memory_id, v_i, p_kinds[v_i], p_embeddings[v_i]);
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem._store_vectors(text, uuid, text[], vector[]) IS 'Internal: store a memory''s extra vectors (kinds sentence, context).';

-- The extra vectors of a batch of n memories (add_batch, put_keyed), checked before any write: the three arrays
-- of one length, item numbers from 0 to n - 1, and as pgmem.add (_store_vectors) at most 1000 a memory, of
-- kinds sentence or context, none NULL.
CREATE FUNCTION pgmem._check_batch_vectors(
    p_n integer,
    p_items integer[],
    p_kinds text[],
    p_vectors @vector@.vector[]
) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_bad integer;
BEGIN
    IF coalesce(cardinality(p_items), 0) <> coalesce(cardinality(p_kinds), 0)
       OR coalesce(cardinality(p_items), 0) <> coalesce(cardinality(p_vectors), 0) THEN
        RAISE EXCEPTION 'extra vectors: items, kinds and vectors must have the same length' USING ERRCODE = 'PGM08';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_items) AS e(item) WHERE e.item IS NULL OR e.item < 0 OR e.item >= p_n) THEN
        RAISE EXCEPTION 'extra vectors: item numbers must be from 0 to %', p_n - 1 USING ERRCODE = 'PGM08';
    END IF;
    SELECT min(e.item) INTO v_bad FROM unnest(p_items) AS e(item) GROUP BY e.item HAVING count(*) > 1000;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'item %: a memory holds at most 1000 extra vectors', v_bad USING ERRCODE = 'PGM08';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_kinds) AS e(kind) WHERE e.kind IS NULL OR e.kind NOT IN ('sentence', 'context')) THEN
        RAISE EXCEPTION 'extra vectors: a kind is sentence or context' USING ERRCODE = 'PGM08';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_vectors) AS e(v) WHERE e.v IS NULL) THEN
        RAISE EXCEPTION 'extra vectors: an extra vector is NULL' USING ERRCODE = 'PGM08';
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._check_batch_vectors(integer, integer[], text[], vector[]) IS
    'Internal: raise PGM08 unless a batch of p_n memories'' extra vectors are well formed (same-length arrays, items 0..p_n-1, at most 1000 a memory, kinds sentence or context, no NULL).';

CREATE FUNCTION pgmem._expire_conflicts(p_user text, p_space pgmem.spaces, p_hashes bytea[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_now timestamptz := now();
    v_born_before timestamptz := now() - p_space.memory_ttl;
BEGIN
    SET LOCAL pgmem.event = 'EXPIRE';
    -- pgmem._expiry(...) <= now() with the times computed first: Citus refuses a STABLE expression on a
    -- column (or inside COALESCE) in a statement that writes a distributed table.
    DELETE FROM pgmem.memories m
    WHERE m.user_id = p_user AND m.space_id = p_space.space_id AND m.content_hash = ANY (p_hashes) AND m.valid_to IS NULL
      AND (m.expires_at <= v_now OR (m.expires_at IS NULL AND m.created_at <= v_born_before));
    SET LOCAL pgmem.event = '';
END
$$;
COMMENT ON FUNCTION pgmem._expire_conflicts(text, pgmem.spaces, bytea[]) IS
    'Internal: remove (EXPIRE) expired memories of a user and space whose content a new memory repeats, so the new one is stored and visible.';

CREATE FUNCTION pgmem._check_expiry(p_expires_at timestamptz) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF p_expires_at <= now() THEN
        RAISE EXCEPTION 'expires_at % is not in the future: the memory would be invisible at once', p_expires_at
            USING ERRCODE = 'PGM08';
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._check_expiry(timestamptz) IS 'Internal: an explicit expiry must lie in the future.';

CREATE FUNCTION pgmem.add(
    p_space text,
    p_content text,
    p_embedding vector,
    p_agent_id text DEFAULT NULL,
    p_session_id text DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}',
    p_expires_at timestamptz DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors vector[] DEFAULT NULL
) RETURNS TABLE (id uuid, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
BEGIN
    IF p_embedding IS NULL THEN
        RAISE EXCEPTION 'an embedding is required' USING ERRCODE = 'PGM08';
    END IF;
    PERFORM pgmem._check_expiry(p_expires_at);
    EXECUTE pg_catalog.format('SET LOCAL pgmem.actor = %L', coalesce(p_agent_id, ''));
    PERFORM pgmem._expire_conflicts(v_user, v_space, ARRAY[pgmem.content_hash(p_content)]);
    LOOP
        INSERT INTO pgmem.memories AS m (user_id, space_id, agent_id, session_id, content, embedding, metadata, expires_at)
        VALUES (v_user, v_space.space_id, p_agent_id, p_session_id, p_content, p_embedding, coalesce(p_metadata, '{}'), p_expires_at)
        ON CONFLICT (user_id, space_id, content_hash) WHERE valid_to IS NULL DO NOTHING
        RETURNING m.id INTO id;
        IF id IS NOT NULL THEN
            created := true;
            PERFORM pgmem._store_vectors(v_user, id, p_vector_kinds, p_vectors);
            SET LOCAL pgmem.actor = '';
            RETURN NEXT;
            RETURN;
        END IF;
        -- Identical content holds already (committed, possibly by a concurrent writer we waited for).
        SELECT m.id INTO id FROM pgmem.memories m
        WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.content_hash = pgmem.content_hash(p_content)
          AND m.valid_to IS NULL;
        IF id IS NOT NULL THEN
            created := false;
            SET LOCAL pgmem.actor = '';
            RETURN NEXT;
            RETURN;
        END IF;
        -- The conflicting row was deleted or superseded between the two statements: try again.
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem.add(text, text, vector, text, text, jsonb, timestamptz, text, text[], vector[]) IS
    'Add one memory for the current user, with optional extra vectors (kinds sentence, context). Identical content in the same space is not stored twice: the existing id comes back with created = false, also under concurrent writers.';

CREATE FUNCTION pgmem.add_batch(
    p_space text,
    p_contents text[],
    p_embeddings @vector@.vector[],
    p_agent_ids text[] DEFAULT NULL,
    p_session_ids text[] DEFAULT NULL,
    p_metadata jsonb[] DEFAULT NULL,
    p_expires_at timestamptz[] DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_created_at timestamptz[] DEFAULT NULL,
    p_vector_items integer[] DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors @vector@.vector[] DEFAULT NULL,
    p_ids uuid[] DEFAULT NULL,
    p_user_ids text[] DEFAULT NULL
) RETURNS TABLE(ordinal integer, id uuid, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_space pgmem.spaces := pgmem._checked_space(p_space, NULL, p_model);
    v_n integer := coalesce(cardinality(p_contents), 0);
    v_prev_user text := current_setting('pgmem.user_id', true);
    v_user text;
    v_sel integer[];
    v_bad integer;
    v_created uuid[];
    v_known uuid[];
    v_ids uuid[];
    v_flags boolean[];
    v_vec record;
    v_out_o integer[] := '{}';
    v_out_id uuid[] := '{}';
    v_out_created boolean[] := '{}';
    v_items integer[];
    v_seqs bigint[];
BEGIN
    IF p_user_ids IS NULL THEN
        v_user := pgmem._require_user();
    ELSIF cardinality(p_user_ids) <> v_n THEN
        RAISE EXCEPTION 'batch arrays must all have % items', v_n USING ERRCODE = 'PGM08';
    END IF;
    IF coalesce(cardinality(p_embeddings), 0) <> v_n
       OR (p_agent_ids IS NOT NULL AND cardinality(p_agent_ids) <> v_n)
       OR (p_session_ids IS NOT NULL AND cardinality(p_session_ids) <> v_n)
       OR (p_metadata IS NOT NULL AND cardinality(p_metadata) <> v_n)
       OR (p_expires_at IS NOT NULL AND cardinality(p_expires_at) <> v_n)
       OR (p_created_at IS NOT NULL AND cardinality(p_created_at) <> v_n)
       OR (p_ids IS NOT NULL AND cardinality(p_ids) <> v_n) THEN
        RAISE EXCEPTION 'batch arrays must all have % items', v_n USING ERRCODE = 'PGM08';
    END IF;
    -- Items are read as p_x[1..n]: an array of more dimensions or another lower bound (possible from SQL) would
    -- read as NULLs.
    IF true = ANY (ARRAY[
            array_ndims(p_contents) > 1 OR array_lower(p_contents, 1) <> 1, array_ndims(p_embeddings) > 1 OR array_lower(p_embeddings, 1) <> 1,
            array_ndims(p_agent_ids) > 1 OR array_lower(p_agent_ids, 1) <> 1, array_ndims(p_session_ids) > 1 OR array_lower(p_session_ids, 1) <> 1,
            array_ndims(p_metadata) > 1 OR array_lower(p_metadata, 1) <> 1, array_ndims(p_expires_at) > 1 OR array_lower(p_expires_at, 1) <> 1,
            array_ndims(p_created_at) > 1 OR array_lower(p_created_at, 1) <> 1, array_ndims(p_ids) > 1 OR array_lower(p_ids, 1) <> 1,
            array_ndims(p_user_ids) > 1 OR array_lower(p_user_ids, 1) <> 1, array_ndims(p_vector_items) > 1 OR array_lower(p_vector_items, 1) <> 1,
            array_ndims(p_vector_kinds) > 1 OR array_lower(p_vector_kinds, 1) <> 1, array_ndims(p_vectors) > 1 OR array_lower(p_vectors, 1) <> 1]) THEN
        RAISE EXCEPTION 'batch arrays must be one-dimensional and start at index 1' USING ERRCODE = 'PGM08';
    END IF;
    IF v_n > 10000 THEN
        RAISE EXCEPTION 'a batch holds at most 10000 memories, got %', v_n USING ERRCODE = 'PGM08';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_embeddings, 1) AS i
    WHERE p_embeddings[i] IS NULL OR @vector@.vector_dims(p_embeddings[i]) <> v_space.dims OR @vector@.vector_norm(p_embeddings[i]) = 0
       OR (p_embeddings[i] OPERATOR(@vector@.<=>) p_embeddings[i]) = 'NaN'::float8;
    IF v_bad IS NOT NULL THEN
        IF p_embeddings[v_bad] IS NULL OR @vector@.vector_dims(p_embeddings[v_bad]) = v_space.dims THEN
            RAISE EXCEPTION 'item %: a zero or missing vector has no cosine similarity', v_bad - 1 USING ERRCODE = 'PGM08';
        END IF;
        RAISE EXCEPTION 'item %: expected % dimensions, got % (space "%", model "%")',
            v_bad - 1, v_space.dims, @vector@.vector_dims(p_embeddings[v_bad]), v_space.name, v_space.model USING ERRCODE = 'PGM02';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_expires_at, 1) AS i WHERE p_expires_at[i] <= now();
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'item %: expires_at % is not in the future: the memory would be invisible at once', v_bad - 1, p_expires_at[v_bad]
            USING ERRCODE = 'PGM08';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_user_ids, 1) AS i
    WHERE p_user_ids[i] IS NULL OR p_user_ids[i] = '' OR length(p_user_ids[i]) > 256;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'item %: user id must be a non-empty text of at most 256 characters', v_bad - 1 USING ERRCODE = 'PGM08';
    END IF;
    PERFORM pgmem._check_batch_vectors(v_n, p_vector_items, p_vector_kinds, p_vectors);

    -- One pass per user, users in sorted order: two concurrent batches for the same users then take their
    -- locks in the same order (as items are inserted in content-hash order within a user). Each pass acts
    -- as its user (pgmem.act_as: a gateway may name any user, a bound login only its own), so row-level
    -- security checks every row as for a call of that user alone.
    FOR v_user, v_sel IN
        SELECT coalesce(p_user_ids[g.o], v_user), array_agg(g.o ORDER BY g.o)
        FROM generate_series(1, v_n) AS g(o) GROUP BY 1 ORDER BY 1
    LOOP
        IF p_user_ids IS NOT NULL THEN
            PERFORM pgmem.act_as(v_user);
        END IF;
        -- Client ids (p_ids) this user has ever stored: a live memory, or a deleted one still in history.
        -- Such an item is not written again, so a retry after an ambiguous failure never duplicates.
        v_known := '{}';
        IF p_ids IS NOT NULL THEN
            SELECT coalesce(array_agg(DISTINCT x.id), '{}') INTO v_known FROM (
                SELECT k.id FROM pgmem.memories k WHERE k.user_id = v_user AND k.id IN (SELECT p_ids[o] FROM unnest(v_sel) AS o)
                UNION ALL
                SELECT h.memory_id FROM pgmem.history h WHERE h.user_id = v_user AND h.memory_id IN (SELECT p_ids[o] FROM unnest(v_sel) AS o)) x;
        END IF;
        PERFORM pgmem._expire_conflicts(v_user, v_space, ARRAY(SELECT pgmem.content_hash(p_contents[o]) FROM unnest(v_sel) AS o));
        -- seq follows item order (the order of turns), whatever order the rows are inserted in. The items and
        -- their seqs are arrays, not a CTE the INSERT reads: on a Citus cluster such a CTE is a subplan whose
        -- result goes to every worker, and the write then commits on all of them with two-phase commit.
        v_items := ARRAY(SELECT g.o FROM unnest(v_sel) AS g(o) LEFT JOIN unnest(v_known) AS kn(id) ON kn.id = p_ids[g.o]
                         WHERE kn.id IS NULL ORDER BY g.o);
        v_seqs := ARRAY(SELECT nextval('pgmem.memories_seq') FROM generate_series(1, cardinality(v_items)) AS g(i) ORDER BY g.i);
        WITH ins AS (
            INSERT INTO pgmem.memories AS m (user_id, id, space_id, agent_id, session_id, content, embedding, metadata, expires_at, created_at, seq)
            SELECT v_user, coalesce(p_ids[o], gen_random_uuid()), v_space.space_id, p_agent_ids[o], p_session_ids[o],
                   p_contents[o], p_embeddings[o], coalesce(p_metadata[o], '{}'), p_expires_at[o], coalesce(p_created_at[o], now()),
                   items.seq
            FROM unnest(v_items, v_seqs) AS items(o, seq)
            -- Insert in content-hash order, not item order: concurrent batches holding the same texts in
            -- different orders then wait for each other instead of deadlocking.
            ORDER BY pgmem.content_hash(p_contents[o]), o
            -- Same content (memories_content_key), or a client id stored by a concurrent retry (memories_pkey).
            ON CONFLICT DO NOTHING
            RETURNING m.id, m.seq
        )
        SELECT coalesce(array_agg(ins.id ORDER BY ins.seq), '{}') INTO v_created FROM ins;  -- seq: item order
        IF cardinality(v_created) = cardinality(v_sel) THEN
            -- Every item is a new memory (the common case): ids come from RETURNING, in item order. The
            -- general mapping below costs about 1.1 ms a call (bench/FINDINGS.md I3).
            v_ids := v_created;
            v_flags := array_fill(true, ARRAY[cardinality(v_sel)]);
        ELSE
            -- Each item's memory: the one its client id names (stored before or now), else the one holding
            -- its content; created only for the first item of the batch that made it.
            SELECT array_agg(y.id ORDER BY y.o), array_agg(y.created ORDER BY y.o) INTO v_ids, v_flags
            FROM (
                SELECT x.o, x.id, x.created AND x.o = min(x.o) OVER (PARTITION BY x.id) AS created
                FROM (
                    SELECT g.o, coalesce(kn.id, byid.id, m.id) AS id, byid.id IS NOT NULL OR c.id IS NOT NULL AS created
                    FROM unnest(v_sel) AS g(o)
                    LEFT JOIN unnest(v_known) AS kn(id) ON kn.id = p_ids[g.o]
                    LEFT JOIN unnest(v_created) AS byid(id) ON byid.id = p_ids[g.o]
                    LEFT JOIN pgmem.memories m
                      ON m.user_id = v_user AND m.space_id = v_space.space_id AND m.content_hash = pgmem.content_hash(p_contents[g.o])
                         AND m.valid_to IS NULL
                    LEFT JOIN unnest(v_created) AS c(id) ON c.id = m.id AND kn.id IS NULL AND byid.id IS NULL
                ) x
            ) y;
        END IF;
        IF p_vector_items IS NOT NULL THEN
            -- Row by row (INSERT ... VALUES): Citus runs an INSERT ... SELECT from unnest as COPY, which
            -- row-level security refuses.
            FOR v_vec IN
                SELECT s.id, row_number() OVER (PARTITION BY e.item ORDER BY e.i) AS n, e.kind, e.emb
                FROM unnest(p_vector_items, p_vector_kinds, p_vectors) WITH ORDINALITY AS e(item, kind, emb, i)
                JOIN unnest(v_sel, v_ids, v_flags) AS s(o, id, created) ON s.o = e.item + 1
                WHERE s.created
            LOOP
                INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
                VALUES (v_user, v_vec.id, v_vec.n, v_vec.kind, v_vec.emb);
            END LOOP;
        END IF;
        v_out_o := v_out_o || v_sel;
        v_out_id := v_out_id || v_ids;
        v_out_created := v_out_created || v_flags;
    END LOOP;
    IF p_user_ids IS NOT NULL THEN
        EXECUTE pg_catalog.format('SET LOCAL pgmem.user_id = %L', coalesce(v_prev_user, ''));  -- the caller's identity again
    END IF;
    RETURN QUERY SELECT (r.o - 1)::integer, r.id, r.created FROM unnest(v_out_o, v_out_id, v_out_created) AS r(o, id, created) ORDER BY r.o;
END
$$;
COMMENT ON FUNCTION pgmem.add_batch(text, text[], vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], vector[], uuid[], text[]) IS
    'Add up to 10000 memories in one statement, all or nothing. Returns one row per item (ordinal from 0) with its id and whether it was created; duplicates, within the batch or of stored memories, return the existing id. p_created_at (for imports) sets when each memory was made; default now(). Extra vectors: p_vector_items (item number from 0), p_vector_kinds, p_vectors, stored for created items only. p_ids: client-generated ids (idempotency keys); an item whose id its user already stored, even if since deleted, is not written again and returns that id with created = false, so a retry never duplicates. p_user_ids: the user of each item (a gateway writing for many users in one statement; each user''s items are written acting as that user, as pgmem.act_as allows); default: all for the current user.';

-- Internal: lock a memory that is live and holds now, or raise PGM03 (missing, expired) / PGM04 (no longer holds).
CREATE FUNCTION pgmem._lock_current(p_user text, p_id uuid) RETURNS pgmem.memories
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_row pgmem.memories;
BEGIN
    SELECT m.* INTO v_row FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
    WHERE m.user_id = p_user AND m.id = p_id AND pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()
    FOR UPDATE OF m;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'memory % not found', p_id USING ERRCODE = 'PGM03';
    END IF;
    IF v_row.valid_to IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PGM04',
            MESSAGE = format('memory %s no longer holds: %s at %s', p_id,
                CASE WHEN v_row.superseded_by IS NULL THEN 'invalidated' ELSE 'superseded by ' || v_row.superseded_by END, v_row.valid_to),
            HINT = 'Only a memory that still holds can be changed; its history and chain stay readable.';
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION pgmem._lock_current(text, uuid) IS 'Internal: lock one live memory that still holds (FOR UPDATE), else PGM03 / PGM04.';

CREATE FUNCTION pgmem.update(
    p_id uuid,
    p_content text DEFAULT NULL,
    p_embedding @vector@.vector DEFAULT NULL,
    p_metadata jsonb DEFAULT NULL,
    p_replace_metadata boolean DEFAULT false,
    p_expected_version integer DEFAULT NULL,
    p_agent_id text DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors @vector@.vector[] DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_row pgmem.memories := pgmem._lock_current(v_user, p_id);
    v_space pgmem.spaces;
    v_changed boolean;
BEGIN
    SELECT * INTO v_space FROM pgmem.spaces s WHERE s.space_id = v_row.space_id;
    PERFORM pgmem._checked_space(v_space.name, p_embedding, p_model);
    IF p_expected_version IS NOT NULL AND p_expected_version <> v_row.version THEN
        RAISE EXCEPTION 'memory % is at version %, not %', p_id, v_row.version, p_expected_version USING ERRCODE = 'PGM04';
    END IF;
    IF p_content IS NOT NULL AND p_content IS DISTINCT FROM v_row.content AND p_embedding IS NULL THEN
        RAISE EXCEPTION 'new content for memory % needs its embedding in the same call', p_id USING ERRCODE = 'PGM08';
    END IF;
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'metadata must be a JSON object' USING ERRCODE = 'PGM08';
    END IF;
    v_changed := p_content IS NOT NULL AND p_content IS DISTINCT FROM v_row.content;
    -- An update that changes nothing writes nothing: no new version (a writer holding the old one would get a
    -- spurious PGM04), no history event.
    IF NOT v_changed AND (p_embedding IS NULL OR p_embedding OPERATOR(@vector@.=) v_row.embedding)
       AND (p_metadata IS NULL OR v_row.metadata = CASE WHEN p_replace_metadata THEN p_metadata ELSE v_row.metadata || p_metadata END) THEN
        RETURN NEXT pgmem._to_memory(v_row, v_space.name, NULL, v_space.memory_ttl);
        RETURN;
    END IF;
    EXECUTE pg_catalog.format('SET LOCAL pgmem.actor = %L', coalesce(p_agent_id, ''));
    SET LOCAL pgmem.event = 'UPDATE';
    UPDATE pgmem.memories m SET
        content = coalesce(p_content, m.content),
        embedding = coalesce(p_embedding, m.embedding),
        metadata = CASE WHEN p_metadata IS NULL THEN m.metadata
                        WHEN p_replace_metadata THEN p_metadata
                        ELSE m.metadata || p_metadata END
    WHERE m.user_id = v_user AND m.id = p_id
    RETURNING * INTO v_row;
    IF v_changed THEN
        DELETE FROM pgmem.memory_vectors v WHERE v.user_id = v_user AND v.memory_id = p_id;
        PERFORM pgmem._store_vectors(v_user, p_id, p_vector_kinds, p_vectors);
    ELSIF p_vectors IS NOT NULL AND p_content IS NULL THEN  -- (given with the unchanged content: they are its own)
        RAISE EXCEPTION 'extra vectors are replaced only together with new content' USING ERRCODE = 'PGM08';
    END IF;
    SET LOCAL pgmem.actor = '';
    SET LOCAL pgmem.event = '';
    RETURN NEXT pgmem._to_memory(v_row, v_space.name, NULL, v_space.memory_ttl);
END
$$;
COMMENT ON FUNCTION pgmem.update(uuid, text, vector, jsonb, boolean, integer, text, text, text[], vector[]) IS
    'Update a memory that still holds: content (with its new embedding), metadata merged into the old (top-level keys) unless p_replace_metadata; an update that changes nothing writes nothing (same version, no history). p_expected_version makes it optimistic (PGM04 on mismatch; also when the memory was superseded or invalidated). Returns the new row; PGM03 when not found or expired.';

CREATE FUNCTION pgmem.edit(
    p_id uuid,
    p_needle text,
    p_replacement text,
    p_embedding @vector@.vector,
    p_expected_version integer DEFAULT NULL,
    p_agent_id text DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors @vector@.vector[] DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
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
    EXECUTE pg_catalog.format('SET LOCAL pgmem.actor = %L', coalesce(p_agent_id, ''));
    SET LOCAL pgmem.event = 'EDIT';
    UPDATE pgmem.memories m SET
        content = substr(m.content, 1, v_first - 1) || p_replacement || substr(m.content, v_first + char_length(p_needle)),
        embedding = p_embedding
    WHERE m.user_id = v_user AND m.id = p_id
    RETURNING * INTO v_row;
    DELETE FROM pgmem.memory_vectors v WHERE v.user_id = v_user AND v.memory_id = p_id;
    PERFORM pgmem._store_vectors(v_user, p_id, p_vector_kinds, p_vectors);
    SET LOCAL pgmem.actor = '';
    SET LOCAL pgmem.event = '';
    RETURN NEXT pgmem._to_memory(v_row, v_space.name, NULL, v_space.memory_ttl);
END
$$;
COMMENT ON FUNCTION pgmem.edit(uuid, text, text, vector, integer, text, text, text[], vector[]) IS
    'Replace the one occurrence of p_needle in a memory that still holds by p_replacement, both literal text (no %, _, \ or regex meaning; case-sensitive), with the new content''s embedding in the same statement. Errors: empty needle PGM08, absent PGM06, ambiguous (count, overlapping included) PGM05, superseded PGM04.';

CREATE FUNCTION pgmem.supersede(
    p_id uuid,
    p_content text,
    p_embedding @vector@.vector,
    p_metadata jsonb DEFAULT NULL,
    p_valid_from timestamptz DEFAULT NULL,
    p_agent_id text DEFAULT NULL,
    p_expected_version integer DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors @vector@.vector[] DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
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
    EXECUTE pg_catalog.format('SET LOCAL pgmem.actor = %L', coalesce(p_agent_id, ''));
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
    SET LOCAL pgmem.event = 'SUPERSEDE';
    UPDATE pgmem.memories m SET valid_to = v_at, superseded_by = v_new WHERE m.user_id = v_user AND m.id = p_id;
    SET LOCAL pgmem.event = '';
    SET LOCAL pgmem.actor = '';
    SELECT * INTO v_row FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = v_new;
    RETURN NEXT pgmem._to_memory(v_row, v_space.name, NULL, v_space.memory_ttl);
END
$$;
COMMENT ON FUNCTION pgmem.supersede(uuid, text, vector, jsonb, timestamptz, text, integer, text, text[], vector[]) IS
    'Replace a fact without losing it: the memory p_id stops holding at p_valid_from (default now) and points to its successor, a new memory with p_content (metadata: the old merged with p_metadata; same session and expiry) holding from then on. Returns the successor. Search shows only what holds now unless asked as of a past time; pgmem.chain lists the whole line. Errors: PGM03 not found, PGM04 already superseded or version mismatch.';

CREATE FUNCTION pgmem.invalidate(
    p_id uuid,
    p_valid_to timestamptz DEFAULT NULL,
    p_agent_id text DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
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
    EXECUTE pg_catalog.format('SET LOCAL pgmem.actor = %L', coalesce(p_agent_id, ''));
    SET LOCAL pgmem.event = 'INVALIDATE';
    UPDATE pgmem.memories m SET valid_to = v_at WHERE m.user_id = v_user AND m.id = p_id RETURNING * INTO v_row;
    SET LOCAL pgmem.event = '';
    SET LOCAL pgmem.actor = '';
    RETURN NEXT (SELECT pgmem._to_memory(v_row, s.name, NULL, s.memory_ttl) FROM pgmem.spaces s WHERE s.space_id = v_row.space_id);
END
$$;
COMMENT ON FUNCTION pgmem.invalidate(uuid, timestamptz, text) IS
    'Mark a fact as no longer holding from p_valid_to (default now), without a successor and without deleting it. Returns the memory.';

CREATE FUNCTION pgmem.delete(p_id uuid, p_agent_id text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_found boolean;
BEGIN
    EXECUTE pg_catalog.format('SET LOCAL pgmem.actor = %L', coalesce(p_agent_id, ''));
    DELETE FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = p_id;
    v_found := FOUND;
    SET LOCAL pgmem.actor = '';
    RETURN v_found;
END
$$;
COMMENT ON FUNCTION pgmem.delete(uuid, text) IS 'Delete one memory of the current user; true when it existed. History keeps a DELETE event with the old content.';

CREATE FUNCTION pgmem.delete_all(
    p_space text DEFAULT NULL,
    p_agent_id text DEFAULT NULL,
    p_session_id text DEFAULT NULL,
    p_filter jsonb DEFAULT NULL,
    p_confirm boolean DEFAULT false,
    p_actor text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space record;
    v_scope record;
    v_n bigint;
    v_total bigint := 0;
BEGIN
    IF p_agent_id IS NULL AND p_session_id IS NULL AND (p_filter IS NULL OR p_filter = '{}'::jsonb) AND NOT coalesce(p_confirm, false) THEN
        RAISE EXCEPTION 'refusing to delete every memory of user % without a scope', quote_literal(v_user)
            USING ERRCODE = 'PGM10', HINT = 'Name an agent, a session or a filter, or confirm deleting everything.';
    END IF;
    EXECUTE pg_catalog.format('SET LOCAL pgmem.actor = %L', coalesce(p_actor, ''));
    FOR v_space IN SELECT s.space_id FROM pgmem.spaces s WHERE p_space IS NULL OR s.name = p_space LOOP
        v_scope := pgmem._scope_sql(v_space.space_id, p_filter);
        EXECUTE 'DELETE FROM pgmem.memories m WHERE ' || v_scope.o_sql
        USING v_user, p_agent_id, p_session_id, NULL::timestamptz, NULL::timestamptz,
              (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_total := v_total + v_n;
    END LOOP;
    IF p_space IS NOT NULL AND NOT FOUND THEN
        PERFORM pgmem.space(p_space);
    END IF;
    SET LOCAL pgmem.actor = '';
    RETURN v_total;
END
$$;
COMMENT ON FUNCTION pgmem.delete_all(text, text, text, jsonb, boolean, text) IS
    'Delete the current user''s memories in a scope (space, agent, session, metadata filter); returns how many. With no agent, session or filter it refuses (PGM10) unless p_confirm.';

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
$$;;
COMMENT ON FUNCTION pgmem._occurrences_up_to(text, text, integer) IS
    'Internal: the number of occurrences (overlapping ones count) of p_needle in p_haystack, at most p_cap.';

-- ---------------------------------------------------------------------------------------------------------
-- Keyed memories: one live memory per (user, space, key), the key kept in metadata "pgmem:key" (so export,
-- import and backups carry it). For stores whose callers name their items (LangGraph's namespace and key).
-- ---------------------------------------------------------------------------------------------------------
-- Two concurrent puts of a user's keys in a space serialise on that tenant's row of pgmem.key_locks, locked
-- FOR UPDATE until the caller's transaction ends. The row is the tenant's own (RLS) and only the API's role
-- writes the table, so no other login can take or hold it. (An advisory lock on a hash of (user, key), used
-- before, let any role that knew a user's id and key stall that user's puts: advisory locks are one namespace
-- per database, callable by every role.) One lock per (user, space): a user's puts wait for each other, other
-- tenants' never do, and no two calls can deadlock on it. No foreign key to pgmem.spaces (drop_space deletes a
-- space's rows): on a Citus cluster a new table referencing the reference table spaces becomes a Citus-local
-- table, which refuses the sub-select of the tenant policy.
CREATE TABLE pgmem.key_locks (
    user_id   text    NOT NULL,
    space_id  integer NOT NULL,
    CONSTRAINT key_locks_pkey PRIMARY KEY (user_id, space_id)
);
COMMENT ON TABLE pgmem.key_locks IS
    'One row per (user, space) that has used pgmem.put_keyed: the row its calls lock FOR UPDATE, so that two puts of one key never both add a memory. Written only by pgmem_api (inside put_keyed), read by nobody else; holds no data.';
ALTER TABLE pgmem.key_locks ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.key_locks FORCE ROW LEVEL SECURITY;
CREATE POLICY key_locks_tenant ON pgmem.key_locks
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

-- Puts of one tenant in a space wait for each other on its row of pgmem.key_locks (above), keys in call order.
-- No unique index: pgmem.supersede writes the successor (with the old metadata) before the old memory stops
-- holding, and add, add_batch and import_user may write the key too; a put of the key deletes such extras.
CREATE FUNCTION pgmem.put_keyed(
    p_space text,
    p_keys text[],
    p_contents text[],
    p_embeddings @vector@.vector[],
    p_metadata jsonb[] DEFAULT NULL,
    p_session_ids text[] DEFAULT NULL,
    p_expires_at timestamptz[] DEFAULT NULL,
    p_ttls interval[] DEFAULT NULL,
    p_alt_contents text[] DEFAULT NULL,
    p_agent_id text DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_vector_items integer[] DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors @vector@.vector[] DEFAULT NULL
) RETURNS TABLE (ordinal integer, id uuid, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, NULL, p_model);
    v_n integer := coalesce(cardinality(p_keys), 0);
    v_bad integer;
    v_i integer;
    v_key text;
    v_content text;
    v_meta jsonb;
    v_cur pgmem.memories;
    v_first boolean;
    v_id uuid;
    v_changed boolean;
    v_expires timestamptz;
    v_embedding @vector@.vector;
    v_session text;
    v_vec record;
BEGIN
    -- Items are read as p_x[1..n]: an array of more dimensions or another lower bound (possible from SQL) would
    -- read as NULLs, turning a write into a delete of the key or a memory without one.
    IF true = ANY (ARRAY[
            array_ndims(p_keys) > 1 OR array_lower(p_keys, 1) <> 1, array_ndims(p_contents) > 1 OR array_lower(p_contents, 1) <> 1,
            array_ndims(p_embeddings) > 1 OR array_lower(p_embeddings, 1) <> 1, array_ndims(p_metadata) > 1 OR array_lower(p_metadata, 1) <> 1,
            array_ndims(p_session_ids) > 1 OR array_lower(p_session_ids, 1) <> 1, array_ndims(p_expires_at) > 1 OR array_lower(p_expires_at, 1) <> 1,
            array_ndims(p_ttls) > 1 OR array_lower(p_ttls, 1) <> 1, array_ndims(p_alt_contents) > 1 OR array_lower(p_alt_contents, 1) <> 1,
            array_ndims(p_vector_items) > 1 OR array_lower(p_vector_items, 1) <> 1, array_ndims(p_vector_kinds) > 1 OR array_lower(p_vector_kinds, 1) <> 1,
            array_ndims(p_vectors) > 1 OR array_lower(p_vectors, 1) <> 1]) THEN
        RAISE EXCEPTION 'batch arrays must be one-dimensional and start at index 1' USING ERRCODE = 'PGM08';
    END IF;
    IF coalesce(cardinality(p_contents), 0) <> v_n OR coalesce(cardinality(p_embeddings), 0) <> v_n
       OR (p_metadata IS NOT NULL AND cardinality(p_metadata) <> v_n)
       OR (p_session_ids IS NOT NULL AND cardinality(p_session_ids) <> v_n)
       OR (p_expires_at IS NOT NULL AND cardinality(p_expires_at) <> v_n)
       OR (p_ttls IS NOT NULL AND cardinality(p_ttls) <> v_n)
       OR (p_alt_contents IS NOT NULL AND cardinality(p_alt_contents) <> v_n) THEN
        RAISE EXCEPTION 'batch arrays must all have % items', v_n USING ERRCODE = 'PGM08';
    END IF;
    IF v_n > 10000 THEN
        RAISE EXCEPTION 'a batch holds at most 10000 memories, got %', v_n USING ERRCODE = 'PGM08';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_keys, 1) AS i
    WHERE p_keys[i] IS NULL OR p_keys[i] = '' OR char_length(p_keys[i]) > 1024;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'item %: a key is a non-empty text of at most 1024 characters', v_bad - 1 USING ERRCODE = 'PGM08';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_keys, 1) AS i
    WHERE p_contents[i] IS NOT NULL AND p_embeddings[i] IS NULL;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'item %: an embedding is required (a NULL content deletes the key)', v_bad - 1 USING ERRCODE = 'PGM08';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_metadata, 1) AS i
    WHERE p_metadata[i] IS NOT NULL AND jsonb_typeof(p_metadata[i]) <> 'object';
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'item %: metadata must be a JSON object', v_bad - 1 USING ERRCODE = 'PGM08';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_expires_at, 1) AS i WHERE p_expires_at[i] <= now();
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'item %: expires_at % is not in the future: the memory would be invisible at once', v_bad - 1, p_expires_at[v_bad]
            USING ERRCODE = 'PGM08';
    END IF;
    SELECT min(i) INTO v_bad FROM generate_subscripts(p_ttls, 1) AS i
    WHERE p_ttls[i] <= interval '0' OR (p_ttls[i] IS NOT NULL AND p_expires_at[i] IS NOT NULL);
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'item %: a ttl is positive, and an item has a ttl or an expires_at, not both', v_bad - 1 USING ERRCODE = 'PGM08';
    END IF;
    IF p_ttls IS NOT NULL THEN
        BEGIN  -- now() + ttl past PostgreSQL's last timestamp fails with a raw "timestamp out of range"
            PERFORM max(now() + t.ttl) FROM unnest(p_ttls) AS t(ttl);
        EXCEPTION WHEN datetime_field_overflow THEN
            RAISE EXCEPTION 'a ttl must end within 294276 AD, the last year a PostgreSQL timestamp holds (''infinity'': never)'
                USING ERRCODE = 'PGM08';
        END;
    END IF;
    PERFORM pgmem._check_batch_vectors(v_n, p_vector_items, p_vector_kinds, p_vectors);

    -- The tenant's lock row (pgmem.key_locks), made on first use, held until the caller's transaction ends.
    INSERT INTO pgmem.key_locks AS l (user_id, space_id) VALUES (v_user, v_space.space_id) ON CONFLICT DO NOTHING;
    PERFORM 1 FROM pgmem.key_locks l WHERE l.user_id = v_user AND l.space_id = v_space.space_id FOR UPDATE OF l;
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    FOR v_i IN 1 .. v_n LOOP
        v_key := p_keys[v_i];
        v_cur := NULL;
        v_first := true;
        -- The key's memories: expired ones go (EXPIRE), the newest live one is kept, extra copies are deleted.
        FOR v_cur IN
            SELECT m.* FROM pgmem.memories m
            WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.metadata ? 'pgmem:key'
              AND m.metadata ->> 'pgmem:key' = v_key AND m.valid_to IS NULL
            ORDER BY pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl) > now() DESC, m.updated_at DESC, m.id
            FOR UPDATE OF m
        LOOP
            IF v_first AND pgmem._expiry(v_cur.expires_at, v_cur.created_at, v_space.memory_ttl) > now() THEN
                v_first := false;
                v_id := v_cur.id;
            ELSE
                DELETE FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = v_cur.id;
            END IF;
        END LOOP;
        IF v_first THEN
            v_id := NULL;
        END IF;
        IF p_contents[v_i] IS NULL THEN  -- delete the key
            IF v_id IS NOT NULL THEN
                DELETE FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = v_id;
            END IF;
            ordinal := v_i - 1; id := NULL; created := false;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v_id IS NOT NULL THEN
            SELECT m.* INTO v_cur FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = v_id;
        END IF;
        v_meta := coalesce(p_metadata[v_i], '{}') || jsonb_build_object('pgmem:key', v_key);
        -- The item's values as scalars: Citus refuses now() inside COALESCE in a statement it routes, and its
        -- router crashed (13.2) on an array element (p_embeddings[v_i]) in an UPDATE's SET list.
        v_expires := coalesce(p_expires_at[v_i], now() + p_ttls[v_i]);
        v_embedding := p_embeddings[v_i];
        v_session := p_session_ids[v_i];
        -- The content, unless another memory that holds has it: then the alternative content (or an error).
        v_content := p_contents[v_i];
        PERFORM pgmem._expire_conflicts(v_user, v_space,
                                        ARRAY[pgmem.content_hash(v_content), pgmem.content_hash(coalesce(p_alt_contents[v_i], v_content))]);
        IF EXISTS (SELECT 1 FROM pgmem.memories m WHERE m.user_id = v_user AND m.space_id = v_space.space_id
                   AND m.content_hash = pgmem.content_hash(v_content) AND m.valid_to IS NULL
                   AND m.id IS DISTINCT FROM v_id) THEN
            v_content := p_alt_contents[v_i];
            IF v_content IS NULL OR EXISTS (
                    SELECT 1 FROM pgmem.memories m WHERE m.user_id = v_user AND m.space_id = v_space.space_id
                    AND m.content_hash = pgmem.content_hash(v_content) AND m.valid_to IS NULL AND m.id IS DISTINCT FROM v_id) THEN
                RAISE EXCEPTION 'item %: another memory holds the content of key %', v_i - 1, v_key
                    USING ERRCODE = 'unique_violation', CONSTRAINT = 'memories_content_key';
            END IF;
        END IF;
        IF v_id IS NOT NULL THEN
            -- Same embedding, other content: the text moved between its two forms (own line or not); keep it.
            IF v_content IS DISTINCT FROM v_cur.content AND p_embeddings[v_i] OPERATOR(@vector@.=) v_cur.embedding THEN
                v_content := v_cur.content;
            END IF;
            v_changed := v_content IS DISTINCT FROM v_cur.content;
            PERFORM set_config('pgmem.event', 'UPDATE', true);
            UPDATE pgmem.memories m SET content = v_content, embedding = v_embedding, metadata = v_meta,
                   session_id = v_session, expires_at = v_expires
            WHERE m.user_id = v_user AND m.id = v_id;
            PERFORM set_config('pgmem.event', '', true);
            IF v_changed THEN
                DELETE FROM pgmem.memory_vectors mv WHERE mv.user_id = v_user AND mv.memory_id = v_id;
            END IF;
            created := false;
        ELSE
            -- A concurrent writer may have stored the same text since the check: then the alternative.
            FOREACH v_content IN ARRAY ARRAY[v_content, p_alt_contents[v_i]] LOOP
                CONTINUE WHEN v_content IS NULL;
                INSERT INTO pgmem.memories AS m (user_id, space_id, agent_id, session_id, content, embedding, metadata, expires_at)
                VALUES (v_user, v_space.space_id, p_agent_id, v_session, v_content, v_embedding, v_meta, v_expires)
                ON CONFLICT (user_id, space_id, content_hash) WHERE valid_to IS NULL DO NOTHING
                RETURNING m.id INTO v_id;
                EXIT WHEN v_id IS NOT NULL;
            END LOOP;
            IF v_id IS NULL THEN
                RAISE EXCEPTION 'item %: another memory holds the content of key %', v_i - 1, v_key
                    USING ERRCODE = 'unique_violation', CONSTRAINT = 'memories_content_key';
            END IF;
            v_changed := true;
            created := true;
        END IF;
        IF v_changed AND p_vector_items IS NOT NULL THEN
            -- Row by row (INSERT ... VALUES): Citus runs an INSERT ... SELECT from unnest as COPY, which
            -- row-level security refuses.
            FOR v_vec IN
                SELECT row_number() OVER (ORDER BY e.i) AS n, e.kind, e.emb
                FROM unnest(p_vector_items, p_vector_kinds, p_vectors) WITH ORDINALITY AS e(item, kind, emb, i)
                WHERE e.item = v_i - 1
            LOOP
                INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
                VALUES (v_user, v_id, v_vec.n, v_vec.kind, v_vec.emb);
            END LOOP;
        END IF;
        ordinal := v_i - 1; id := v_id;
        RETURN NEXT;
    END LOOP;
    PERFORM set_config('pgmem.actor', '', true);
END
$$;
COMMENT ON FUNCTION pgmem.put_keyed(text, text[], text[], vector[], jsonb[], text[], timestamptz[], interval[], text[], text, text, integer[], text[], vector[]) IS
    'Upsert up to 10000 memories of the current user by key (metadata "pgmem:key"), in order, all or nothing: a key''s live memory is updated in place (content, embedding, metadata replaced, session, own expiry (p_expires_at, or now() + p_ttls: from the write itself); id, created_at and history stay), else one is added; a NULL content deletes the key. Two concurrent calls of one user in one space wait for each other (one memory per key) on that tenant''s row of pgmem.key_locks, which no other login can lock. When another memory holds the content, p_alt_contents[i] is stored instead (unique_violation on memories_content_key when it is NULL or held too). Expired and extra memories of the key are removed. Extra vectors (p_vector_items from 0) replace the old ones when the content changes. Returns (ordinal from 0, id or NULL for a delete, created). Arrays are one-dimensional from index 1; at most 1000 extra vectors a memory; a ttl ends by 294276 AD.';

-- Moves the own expiry of live memories: now() + ttl (NULL: the space's memory_ttl after created_at again).
CREATE FUNCTION pgmem.set_expiry(
    p_ids uuid[],
    p_ttls interval[],
    p_agent_id text DEFAULT NULL
) RETURNS TABLE (id uuid, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_now timestamptz := now();
    v_id uuid;
    v_ttl interval;
    v_space_id integer;
    v_old timestamptz;
    v_created timestamptz;
    v_space_ttl interval;
    v_new timestamptz;
BEGIN
    IF coalesce(cardinality(p_ids), 0) <> coalesce(cardinality(p_ttls), 0) THEN
        RAISE EXCEPTION 'ids and ttls must have the same length' USING ERRCODE = 'PGM08';
    END IF;
    IF cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'at most 10000 memories a call, got %', cardinality(p_ids) USING ERRCODE = 'PGM08';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_ttls) AS t(ttl) WHERE t.ttl <= interval '0') THEN
        RAISE EXCEPTION 'a ttl must be positive' USING ERRCODE = 'PGM08';
    END IF;
    BEGIN  -- now() + ttl past PostgreSQL's last timestamp fails with a raw "timestamp out of range"
        PERFORM max(v_now + t.ttl) FROM unnest(p_ttls) AS t(ttl);
    EXCEPTION WHEN datetime_field_overflow THEN
        RAISE EXCEPTION 'a ttl must end within 294276 AD, the last year a PostgreSQL timestamp holds (''infinity'': never)'
            USING ERRCODE = 'PGM08';
    END;
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    PERFORM set_config('pgmem.event', 'UPDATE', true);
    -- One memory at a time, in id order (so two calls on the same memories never deadlock), the last ttl of an
    -- id given twice. Row by row with the new expiry computed first: Citus refuses STABLE functions over columns
    -- in an UPDATE it routes.
    FOR v_id, v_ttl IN
        SELECT DISTINCT ON (x.id) x.id, x.ttl FROM unnest(p_ids, p_ttls) WITH ORDINALITY AS x(id, ttl, o)
        WHERE x.id IS NOT NULL ORDER BY x.id, x.o DESC
    LOOP
        SELECT m.space_id, m.expires_at, m.created_at INTO v_space_id, v_old, v_created
        FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = v_id AND m.valid_to IS NULL
        FOR UPDATE OF m;
        CONTINUE WHEN NOT FOUND;
        SELECT s.memory_ttl INTO v_space_ttl FROM pgmem.spaces s WHERE s.space_id = v_space_id;
        CONTINUE WHEN pgmem._expiry(v_old, v_created, v_space_ttl) <= v_now;
        v_new := v_now + v_ttl;
        UPDATE pgmem.memories m SET expires_at = v_new WHERE m.user_id = v_user AND m.id = v_id;
        id := v_id;
        expires_at := nullif(pgmem._expiry(v_new, v_created, v_space_ttl), 'infinity');
        RETURN NEXT;
    END LOOP;
    PERFORM set_config('pgmem.event', '', true);
    PERFORM set_config('pgmem.actor', '', true);
END
$$;
COMMENT ON FUNCTION pgmem.set_expiry(uuid[], interval[], text) IS
    'Set the own expiry of memories of the current user that are live and hold to now() + ttl (NULL ttl: none of its own, the space''s memory_ttl applies), e.g. a time-to-live refreshed on read. Others (missing, expired, superseded, another user''s) are skipped. An UPDATE in their history. Returns (id, effective expires_at) of those changed. Error PGM08 for a ttl that is not positive or ends after 294276 AD.';
