-- Undo 0003: back to the schema of 0002. What only 0003 knows is lost: turns, sources, retention settings,
-- drops: every turn, source link and superseded memory version
-- and superseded or invalidated memories (only the memories that hold stay, as in 0002).
DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;

DROP FUNCTION pgmem.purge(integer), pgmem.schedule_purge(text), pgmem.erase_user(text), pgmem.export_user(boolean),
    pgmem.import_user(jsonb[]), pgmem.context(text, text, text, vector, integer, integer, double precision, integer, text, jsonb, text),
    pgmem.token_count(text), pgmem.sources(uuid),
    pgmem.consolidate(text, text, bigint[], text[], vector[], jsonb[], text, text, integer[], text[], vector[]),
    pgmem.pending_turns(text, text, integer), pgmem.recent_turns(text, text, integer),
    pgmem._turns(text, pgmem.spaces, text, boolean, integer),
    pgmem.append_turn(text, text, text, text, text, vector, jsonb, timestamptz, text, timestamptz),
    pgmem._require_maintainer(text), pgmem.set_retention(text, interval, interval),
    pgmem.chain(uuid), pgmem.invalidate(uuid, timestamptz, text),
    pgmem.supersede(uuid, text, vector, jsonb, timestamptz, text, integer, text, text[], vector[]),
    pgmem.history(uuid),
    pgmem.list(text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text, timestamptz),
    pgmem.search(text, vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz),
    pgmem.search_hybrid(text, text, vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text, timestamptz);
DROP FUNCTION pgmem._matching_rows(text, pgmem.spaces, text, pgmem.compiled_filter, integer, text, text, timestamptz, timestamptz, jsonb, timestamptz);
DROP TABLE pgmem.tenant_sizes;
DROP TYPE pgmem.turn;
DROP TABLE pgmem.memory_sources, pgmem.turns;
DROP INDEX pgmem.history_expire_idx;

-- Data back to 0002's shape, as the owner past RLS and without history events.
ALTER TABLE pgmem.memories NO FORCE ROW LEVEL SECURITY;
ALTER TABLE pgmem.history NO FORCE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memories DISABLE TRIGGER USER;
DELETE FROM pgmem.memories WHERE valid_to IS NOT NULL;
ALTER TABLE pgmem.memories ENABLE TRIGGER USER;
DELETE FROM pgmem.history WHERE event NOT IN ('ADD', 'UPDATE', 'EDIT', 'DELETE');
ALTER TABLE pgmem.memories FORCE ROW LEVEL SECURITY;
ALTER TABLE pgmem.history FORCE ROW LEVEL SECURITY;
ALTER TABLE pgmem.history DROP CONSTRAINT history_event_check;
ALTER TABLE pgmem.history DROP COLUMN related_id;
ALTER TABLE pgmem.history ADD CONSTRAINT history_event_check CHECK (event IN ('ADD', 'UPDATE', 'EDIT', 'DELETE'));


CREATE OR REPLACE VIEW pgmem.memories_view AS
SELECT m.user_id, m.agent_id, m.session_id, m.content,
       date_trunc('second', now() - m.created_at) AS age,
       m.metadata, s.name AS space, m.id, m.created_at, m.version
FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
WHERE m.user_id = (SELECT pgmem.current_user_id()) AND (m.expires_at IS NULL OR m.expires_at > now());

DO $pgmem$
BEGIN
    IF current_setting('server_version_num')::integer >= 150000 THEN
        EXECUTE 'ALTER VIEW pgmem.memories_view SET (security_invoker = true)';
    END IF;
END
$pgmem$;



ALTER TYPE pgmem.memory DROP ATTRIBUTE valid_from, DROP ATTRIBUTE valid_to, DROP ATTRIBUTE superseded_by;

CREATE OR REPLACE FUNCTION pgmem._to_memory(m pgmem.memories, p_space text, p_similarity double precision DEFAULT NULL) RETURNS pgmem.memory
LANGUAGE sql STABLE
AS $$
    SELECT ROW(m.id, m.user_id, p_space, m.agent_id, m.session_id, m.content, m.metadata,
               m.created_at, m.updated_at, m.expires_at, m.version, p_similarity)::pgmem.memory
$$;
COMMENT ON FUNCTION pgmem._to_memory(pgmem.memories, text, double precision) IS 'Internal: a memories row as the API''s pgmem.memory.';

DROP FUNCTION pgmem._scope_sql(integer, jsonb);

CREATE FUNCTION pgmem._scope_sql(p_space_id integer, p_filter jsonb, OUT o_sql text, OUT o_filter pgmem.compiled_filter)
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    o_filter := pgmem._compile_filter(p_filter, 6, 7);
    o_sql := format('m.user_id = $1 AND m.space_id = %s AND (m.expires_at IS NULL OR m.expires_at > now())'
        || ' AND ($2::text IS NULL OR m.agent_id = $2) AND ($3::text IS NULL OR m.session_id = $3)'
        || ' AND ($4::timestamptz IS NULL OR m.created_at >= $4) AND ($5::timestamptz IS NULL OR m.created_at < $5)'
        || ' AND ($8::text IS NULL OR strpos(m.content, $8) > 0) AND (%s)', p_space_id, o_filter.sql);
END
$$;
COMMENT ON FUNCTION pgmem._scope_sql(integer, jsonb) IS 'Internal: SQL for the rows of one user and space matching agent, session, time range, content substring and metadata filter.';

DROP FUNCTION pgmem._scope_sql(integer, jsonb, timestamptz), pgmem._lock_current(text, uuid),
    pgmem._to_memory(pgmem.memories, text, double precision, interval), pgmem._memory_columns(text, text, interval),
    pgmem._check_expiry(timestamptz), pgmem._expire_conflicts(text, pgmem.spaces, bytea[]);

DROP INDEX pgmem.memories_content_key, pgmem.memories_user_superseded_by_idx, pgmem.memories_expires_at_idx;
ALTER TABLE pgmem.memories ADD CONSTRAINT memories_content_key UNIQUE (user_id, space_id, content_hash);
ALTER TABLE pgmem.memories DROP CONSTRAINT memories_validity_check, DROP CONSTRAINT memories_superseded_by_check;

CREATE OR REPLACE FUNCTION pgmem._memories_before_write() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgmem, public
AS $$
DECLARE
    v_space pgmem.spaces;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.user_id <> OLD.user_id OR NEW.id <> OLD.id OR NEW.space_id <> OLD.space_id THEN
            RAISE EXCEPTION 'a memory''s user_id, id and space cannot change' USING ERRCODE = 'PGM08';
        END IF;
        IF NEW.content IS DISTINCT FROM OLD.content AND NEW.embedding = OLD.embedding THEN
            RAISE EXCEPTION 'content of memory % changed without a new embedding', OLD.id
                USING ERRCODE = 'PGM08', HINT = 'Pass the embedding of the new content in the same statement.';
        END IF;
        NEW.version := OLD.version + 1;
        NEW.updated_at := now();
        NEW.created_at := OLD.created_at;
        NEW.seq := OLD.seq;
        IF NEW.content IS NOT DISTINCT FROM OLD.content THEN
            NEW.fts := OLD.fts;
            NEW.fts_len := OLD.fts_len;
        END IF;
        IF NEW.embedding = OLD.embedding THEN
            RETURN NEW;
        END IF;
    END IF;
    SELECT * INTO v_space FROM pgmem.spaces s WHERE s.space_id = NEW.space_id;
    IF TG_OP = 'INSERT' OR NEW.content IS DISTINCT FROM OLD.content THEN
        NEW.fts := to_tsvector(v_space.text_config, NEW.content)
                   || to_tsvector(v_space.text_config, to_char(NEW.created_at AT TIME ZONE 'UTC', 'FMDD FMMonth YYYY'));
        NEW.fts_len := (SELECT coalesce(sum(coalesce(array_length(x.positions, 1), 1)), 0) FROM unnest(NEW.fts) x);
    END IF;
    IF vector_dims(NEW.embedding) <> v_space.dims THEN
        RAISE EXCEPTION 'expected % dimensions, got % (space "%", model "%")',
            v_space.dims, vector_dims(NEW.embedding), v_space.name, v_space.model USING ERRCODE = 'PGM02';
    END IF;
    -- <=> of a vector with itself is NaN for a zero vector and for one whose float4 sum of squares
    -- underflows to 0 or overflows (components below ~1e-23 or above ~1e19): no cosine similarity either.
    IF vector_norm(NEW.embedding) = 0 OR (NEW.embedding <=> NEW.embedding) = 'NaN'::float8 THEN
        RAISE EXCEPTION 'a zero vector (or one whose float4 squared norm underflows or overflows) has no cosine similarity' USING ERRCODE = 'PGM08';
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION pgmem._memories_before_write() IS 'Trigger: validates a memory row, keeps version, updated_at and the full-text vector.';

CREATE OR REPLACE FUNCTION pgmem._memories_history() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgmem
AS $$
DECLARE
    v_actor text := nullif(current_setting('pgmem.actor', true), '');
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pgmem.history (user_id, memory_id, event, new_content, new_metadata, actor_agent_id)
        VALUES (NEW.user_id, NEW.id, 'ADD', NEW.content, NEW.metadata, coalesce(v_actor, NEW.agent_id));
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO pgmem.history (user_id, memory_id, event, old_content, new_content, old_metadata, new_metadata, actor_agent_id)
        VALUES (NEW.user_id, NEW.id, coalesce(nullif(current_setting('pgmem.event', true), ''), 'UPDATE'),
                OLD.content, NEW.content, OLD.metadata, NEW.metadata, v_actor);
    ELSE
        INSERT INTO pgmem.history (user_id, memory_id, event, old_content, old_metadata, actor_agent_id)
        VALUES (OLD.user_id, OLD.id, 'DELETE', OLD.content, OLD.metadata, v_actor);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION pgmem._memories_history() IS 'Trigger: appends one history event per inserted, updated or deleted memory.';

CREATE OR REPLACE FUNCTION pgmem.add(
    p_space text, p_content text, p_embedding vector,
    p_agent_id text DEFAULT NULL, p_session_id text DEFAULT NULL, p_metadata jsonb DEFAULT '{}',
    p_expires_at timestamptz DEFAULT NULL, p_model text DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL, p_vectors vector[] DEFAULT NULL
) RETURNS TABLE (id uuid, created boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
BEGIN
    IF p_embedding IS NULL THEN
        RAISE EXCEPTION 'an embedding is required' USING ERRCODE = 'PGM08';
    END IF;
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    LOOP
        INSERT INTO pgmem.memories AS m (user_id, space_id, agent_id, session_id, content, embedding, metadata, expires_at)
        VALUES (v_user, v_space.space_id, p_agent_id, p_session_id, p_content, p_embedding, coalesce(p_metadata, '{}'), p_expires_at)
        ON CONFLICT ON CONSTRAINT memories_content_key DO NOTHING
        RETURNING m.id INTO id;
        IF id IS NOT NULL THEN
            created := true;
            PERFORM pgmem._store_vectors(v_user, id, p_vector_kinds, p_vectors);
            PERFORM set_config('pgmem.actor', '', true);
            RETURN NEXT;
            RETURN;
        END IF;
        -- Identical content exists (committed, possibly by a concurrent writer we waited for).
        SELECT m.id INTO id FROM pgmem.memories m
        WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.content_hash = pgmem.content_hash(p_content);
        IF id IS NOT NULL THEN
            created := false;
            PERFORM set_config('pgmem.actor', '', true);
            RETURN NEXT;
            RETURN;
        END IF;
        -- The conflicting row was deleted between the two statements: try again.
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem.add(text, text, vector, text, text, jsonb, timestamptz, text, text[], vector[]) IS
    'Add one memory for the current user, with optional extra vectors (kinds sentence, context). Identical content in the same space is not stored twice: the existing id comes back with created = false, also under concurrent writers.';

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
COMMENT ON FUNCTION pgmem.add_batch(text, text[], vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], vector[], uuid[]) IS
    'Add up to 10000 memories in one statement, all or nothing. Returns one row per item (ordinal from 0) with its id and whether it was created; duplicates, within the batch or of stored memories, return the existing id. p_created_at (for imports) sets when each memory was made; default now(). Extra vectors: p_vector_items (item number from 0), p_vector_kinds, p_vectors, stored for created items only. p_ids: client-generated ids (idempotency keys); an item whose id this user already stored, even if since deleted, is not written again and returns that id with created = false, so a retry never duplicates.';

CREATE OR REPLACE FUNCTION pgmem.get(p_id uuid) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    RETURN QUERY
    SELECT (pgmem._to_memory(m, s.name)).* FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
    WHERE m.user_id = v_user AND m.id = p_id AND (m.expires_at IS NULL OR m.expires_at > now());
END
$$;
COMMENT ON FUNCTION pgmem.get(uuid) IS 'One memory of the current user by id: one row, or none when it does not exist, has expired or belongs to another user.';

CREATE OR REPLACE FUNCTION pgmem.update(
    p_id uuid, p_content text DEFAULT NULL, p_embedding vector DEFAULT NULL, p_metadata jsonb DEFAULT NULL,
    p_replace_metadata boolean DEFAULT false, p_expected_version integer DEFAULT NULL,
    p_agent_id text DEFAULT NULL, p_model text DEFAULT NULL, p_vector_kinds text[] DEFAULT NULL, p_vectors vector[] DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_row pgmem.memories;
    v_space pgmem.spaces;
    v_changed boolean;
BEGIN
    SELECT * INTO v_row FROM pgmem.memories m
    WHERE m.user_id = v_user AND m.id = p_id AND (m.expires_at IS NULL OR m.expires_at > now())
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'memory % not found', p_id USING ERRCODE = 'PGM03';
    END IF;
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
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    PERFORM set_config('pgmem.event', 'UPDATE', true);
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
    ELSIF p_vectors IS NOT NULL THEN
        RAISE EXCEPTION 'extra vectors are replaced only together with new content' USING ERRCODE = 'PGM08';
    END IF;
    PERFORM set_config('pgmem.actor', '', true);
    PERFORM set_config('pgmem.event', '', true);
    RETURN NEXT pgmem._to_memory(v_row, v_space.name);
END
$$;
COMMENT ON FUNCTION pgmem.update(uuid, text, vector, jsonb, boolean, integer, text, text, text[], vector[]) IS
    'Update a memory: content (with its new embedding), metadata merged into the old (top-level keys) unless p_replace_metadata. p_expected_version makes it optimistic (PGM04 on mismatch). Returns the new row; PGM03 when not found.';

CREATE OR REPLACE FUNCTION pgmem.edit(
    p_id uuid, p_needle text, p_replacement text, p_embedding vector,
    p_expected_version integer DEFAULT NULL, p_agent_id text DEFAULT NULL, p_model text DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL, p_vectors vector[] DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE
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
    SELECT * INTO v_row FROM pgmem.memories m
    WHERE m.user_id = v_user AND m.id = p_id AND (m.expires_at IS NULL OR m.expires_at > now())
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'memory % not found', p_id USING ERRCODE = 'PGM03';
    END IF;
    SELECT * INTO v_space FROM pgmem.spaces s WHERE s.space_id = v_row.space_id;
    PERFORM pgmem._checked_space(v_space.name, p_embedding, p_model);
    IF p_expected_version IS NOT NULL AND p_expected_version <> v_row.version THEN
        RAISE EXCEPTION 'memory % is at version %, not %', p_id, v_row.version, p_expected_version USING ERRCODE = 'PGM04';
    END IF;
    v_count := pgmem.count_occurrences(v_row.content, p_needle);
    IF v_count = 0 THEN
        RAISE EXCEPTION 'the text to replace does not occur in memory %', p_id USING ERRCODE = 'PGM06';
    ELSIF v_count > 1 THEN
        RAISE EXCEPTION 'the text to replace occurs % times in memory % (overlapping occurrences count); give a longer, unique text', v_count, p_id
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
    RETURN NEXT pgmem._to_memory(v_row, v_space.name);
END
$$;
COMMENT ON FUNCTION pgmem.edit(uuid, text, text, vector, integer, text, text, text[], vector[]) IS
    'Replace the one occurrence of p_needle in a memory by p_replacement, both literal text (no %, _, \ or regex meaning; case-sensitive), with the new content''s embedding in the same statement. Errors: empty needle PGM08, absent PGM06, ambiguous (count, overlapping included) PGM05.';

CREATE OR REPLACE FUNCTION pgmem.stats(p_space text DEFAULT NULL) RETURNS TABLE (
    space text, memories bigint, agents bigint, sessions bigint, oldest timestamptz, newest timestamptz
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    IF p_space IS NOT NULL THEN
        PERFORM pgmem.space(p_space);
    END IF;
    RETURN QUERY
    SELECT s.name, count(m.id), count(DISTINCT m.agent_id), count(DISTINCT m.session_id), min(m.created_at), max(m.created_at)
    FROM pgmem.spaces s
    LEFT JOIN pgmem.memories m
      ON m.space_id = s.space_id AND m.user_id = v_user AND (m.expires_at IS NULL OR m.expires_at > now())
    WHERE p_space IS NULL OR s.name = p_space
    GROUP BY s.name ORDER BY s.name;
END
$$;
COMMENT ON FUNCTION pgmem.stats(text) IS 'Per space: the current user''s live memories, distinct agents and sessions, oldest and newest created_at.';

CREATE OR REPLACE FUNCTION pgmem.session_tail(p_space text, p_session_id text, p_n integer DEFAULT 1) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem.space(p_space);
BEGIN
    IF p_n IS NULL OR p_n < 1 OR p_n > 100 THEN
        RAISE EXCEPTION 'n must be between 1 and 100, got %', p_n USING ERRCODE = 'PGM08';
    END IF;
    RETURN QUERY
    SELECT (t.r).* FROM (
        SELECT pgmem._to_memory(m, v_space.name) AS r, m.created_at AS c, m.seq AS q FROM pgmem.memories m
        WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.session_id = p_session_id
          AND (m.expires_at IS NULL OR m.expires_at > now())
        ORDER BY m.created_at DESC, m.seq DESC LIMIT p_n
    ) t ORDER BY t.c, t.q;
END
$$;
COMMENT ON FUNCTION pgmem.session_tail(text, text, integer) IS
    'The last n (1..100) memories of one session of the current user, in write order (created_at, then write sequence): the context a new memory of that session follows.';

DROP FUNCTION pgmem._expiry(timestamptz, timestamptz, interval);
ALTER TABLE pgmem.memories DROP COLUMN valid_from, DROP COLUMN valid_to, DROP COLUMN superseded_by;
ALTER TABLE pgmem.spaces DROP COLUMN memory_ttl, DROP COLUMN turn_ttl;
COMMENT ON COLUMN pgmem.memories.expires_at IS NULL;

CREATE FUNCTION pgmem.list(
    p_space text, p_agent_id text DEFAULT NULL, p_session_id text DEFAULT NULL, p_filter jsonb DEFAULT NULL,
    p_limit integer DEFAULT 50, p_after_created_at timestamptz DEFAULT NULL, p_after_id uuid DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL, p_contains text DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem.space(p_space);
    v_scope record;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'limit must be between 1 and 1000, got %', p_limit USING ERRCODE = 'PGM08';
    END IF;
    IF p_contains = '' THEN
        RAISE EXCEPTION 'the text to look for must not be empty' USING ERRCODE = 'PGM08';
    END IF;
    IF (p_after_created_at IS NULL) <> (p_after_id IS NULL) THEN
        RAISE EXCEPTION 'a cursor needs both created_at and id' USING ERRCODE = 'PGM08';
    END IF;
    v_scope := pgmem._scope_sql(v_space.space_id, p_filter);
    RETURN QUERY EXECUTE
        'SELECT (pgmem._to_memory(m, $9)).* FROM pgmem.memories m WHERE ' || v_scope.o_sql
        || ' AND ($10::timestamptz IS NULL OR (m.created_at, m.id) > ($10, $11))'
        || ' ORDER BY m.created_at, m.id LIMIT $12'
    USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          (v_scope.o_filter).keys, (v_scope.o_filter).vals, p_contains, v_space.name,
          p_after_created_at, p_after_id, p_limit;
END
$$;
COMMENT ON FUNCTION pgmem.list(text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text) IS
    'The current user''s memories in a space, oldest first, with keyset pagination: pass the last row''s (created_at, id) as the cursor. Filters: agent, session, metadata, created_at range [after, before), literal content substring (p_contains: plain text, case-sensitive).';

CREATE FUNCTION pgmem.search(
    p_space text, p_embedding vector, p_k integer DEFAULT 10,
    p_agent_id text DEFAULT NULL, p_session_id text DEFAULT NULL, p_filter jsonb DEFAULT NULL,
    p_min_similarity double precision DEFAULT NULL, p_model text DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL
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
    v_scope := pgmem._scope_sql(v_space.space_id, p_filter);

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
            || ' SELECT array_agg(pgmem._to_memory(r.m, $11, greatest(-1, least(1, 1 - (((r.m).embedding) <=> $9)))) ORDER BY ((r.m).embedding) <=> $9, (r.m).id) FROM r',
            v_cast, v_scope.o_sql)
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
        'SELECT (pgmem._to_memory(m, $11, greatest(-1, least(1, 1 - (m.embedding <=> $9))))).* FROM pgmem.memories m WHERE %s'
        || ' AND ($12::float8 IS NULL OR 1 - (m.embedding <=> $9) >= $12)'
        || ' ORDER BY m.embedding <=> $9, m.id LIMIT $10', v_scope.o_sql)
    USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text,
          p_embedding, p_k, v_space.name, p_min_similarity;
END
$$;
COMMENT ON FUNCTION pgmem.search(text, vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz) IS
    'Nearest memories of the current user by cosine similarity (1 - cosine distance, clamped to [-1, 1]), highest first, at most k (1..1000): min(k, matching rows) whatever the tenant''s size. Routes to an exact scan when at most pgmem.exact_search_max_rows (default 5000) rows match, else HNSW with iterative scan (ef_search max(100, 2k), relaxed order re-sorted), falling back to exact when the index returns fewer than k.';

CREATE FUNCTION pgmem.history(p_id uuid) RETURNS TABLE (
    event_id bigint, memory_id uuid, event text, old_content text, new_content text,
    old_metadata jsonb, new_metadata jsonb, actor_agent_id text, actor_role name, created_at timestamptz
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    RETURN QUERY
    SELECT h.event_id, h.memory_id, h.event, h.old_content, h.new_content, h.old_metadata, h.new_metadata,
           h.actor_agent_id, h.actor_role, h.created_at
    FROM pgmem.history h WHERE h.user_id = v_user AND h.memory_id = p_id ORDER BY h.event_id;
END
$$;
COMMENT ON FUNCTION pgmem.history(uuid) IS 'Every event of one memory of the current user, oldest first (also after the memory was deleted).';

CREATE FUNCTION pgmem.search_hybrid(
    p_space text, p_query text, p_embedding vector DEFAULT NULL, p_k integer DEFAULT 10,
    p_agent_id text DEFAULT NULL, p_session_id text DEFAULT NULL, p_filter jsonb DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL, p_created_before timestamptz DEFAULT NULL,
    p_text_weight double precision DEFAULT 0.4, p_vector_weight double precision DEFAULT 0.6,
    p_speaker_weight double precision DEFAULT 0.2, p_session_weight double precision DEFAULT 0.4,
    p_model text DEFAULT NULL
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
    v_scope := pgmem._scope_sql(v_space.space_id, p_filter);
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
                                      r.updated_at, r.expires_at, r.version, CASE WHEN $9 IS NULL THEN NULL ELSE greatest(-1, least(1, r.sim)) END, r.score, r.bs,
                                      CASE WHEN $9 IS NULL THEN NULL ELSE r.ds END)::pgmem.hybrid_hit
                                  ORDER BY r.score DESC, r.created_at DESC, r.id), '{}')
        FROM ranked r
        $q$
        INTO v_rows
        USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
              (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text, p_embedding,
              p_k, v_space.name, v_ids, v_lexemes, v_tsquery, v_space.text_config,
              p_text_weight, CASE WHEN p_embedding IS NULL THEN 0 ELSE p_vector_weight END, p_speaker_weight, p_session_weight;
        -- The pools can hold fewer than k rows (a selective filter): then score every matching row.
        EXIT WHEN v_exact OR cardinality(v_rows) >= p_k;
        v_exact := true;
    END LOOP;
    RETURN QUERY SELECT (v_rows[i]).* FROM generate_subscripts(v_rows, 1) AS i ORDER BY i;
END
$$;
COMMENT ON FUNCTION pgmem.search_hybrid(text, text, vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text) IS
    'Hybrid recall for the current user: BM25 over the query''s lexemes (each memory''s text plus a +-2 window of its session, per-user statistics) fused with vector similarity (best sentence + context), + speaker match (metadata.speaker named in the query) + session boost; min(k, matching rows), highest score first. Without p_embedding: full-text only. Same filters and routing as pgmem.search: exact over <= pgmem.exact_search_max_rows rows, else candidate pools (GIN + HNSW). Method: docs/recall.md.';

REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmem FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    pgmem.current_user_id(), pgmem._require_user(), pgmem.act_as(text),
    pgmem.content_hash(text), pgmem.space(text), pgmem._checked_space(text, vector, text),
    pgmem._compile_filter(jsonb, integer, integer, pgmem.compiled_filter, integer), pgmem._scope_sql(integer, jsonb),
    pgmem._to_memory(pgmem.memories, text, double precision), pgmem.count_occurrences(text, text),
    pgmem._memories_before_write(),
    pgmem.add(text, text, vector, text, text, jsonb, timestamptz, text, text[], vector[]),
    pgmem.add_batch(text, text[], vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], vector[], uuid[]),
    pgmem._store_vectors(text, uuid, text[], vector[]), pgmem._memory_vectors_before_insert(),
    pgmem.get(uuid), pgmem.list(text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text),
    pgmem.search(text, vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz),
    pgmem.update(uuid, text, vector, jsonb, boolean, integer, text, text, text[], vector[]),
    pgmem.edit(uuid, text, text, vector, integer, text, text, text[], vector[]),
    pgmem.delete(uuid, text), pgmem.delete_all(text, text, text, jsonb, boolean, text),
    pgmem.history(uuid), pgmem.stats(text), pgmem.session_tail(text, text, integer),
    pgmem.search_hybrid(text, text, vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text)
TO pgmem_agent;

COMMENT ON TABLE pgmem.history IS
    'Append-only log of every change to a memory (ADD, UPDATE, EDIT, DELETE) with old and new content and metadata, actor and time. Written only by trigger.';

COMMENT ON TYPE pgmem.memory IS 'A memory as the API returns it; similarity (cosine, in [-1, 1]) is set by search only.';
