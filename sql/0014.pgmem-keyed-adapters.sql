-- pgmem keyed memories and adapter reads: put_keyed, get_keyed, set_expiry, metadata_values, clear_session
-- depends: 0013.pgmem-known-hashes

-- Why: the LangGraph store and LangChain history emulated in Python what the database should do: an upsert by
-- (namespace, key) as a lookup, then update or add (several round trips; two concurrent first puts could both
-- add), TTL refresh as delete and add again, list_namespaces by reading every item, and a clear of a chat
-- history as a marker turn. Only new functions, one index and one grant here: no existing function changes.

-- On a Citus cluster an index on a distributed table is built on its shards in parallel, and Citus then refuses
-- a function command in the same transaction; sequential mode keeps the migration one transaction there. On a
-- single PostgreSQL this setting is an unused placeholder for the rest of the transaction.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
-- Keyed memories (pgmem.put_keyed, get_keyed): the key in metadata "pgmem:key"; only rows that have one.
CREATE INDEX memories_user_key_idx ON pgmem.memories (user_id, space_id, (metadata ->> 'pgmem:key')) WHERE metadata ? 'pgmem:key';
-- clear_session deletes a session's turns.
GRANT DELETE ON pgmem.turns TO pgmem_api;
DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;

-- ---------------------------------------------------------------------------------------------------------
-- Keyed memories: one live memory per (user, space, key), the key kept in metadata "pgmem:key" (so export,
-- import and backups carry it). For stores whose callers name their items (LangGraph's namespace and key).
-- ---------------------------------------------------------------------------------------------------------
-- Two concurrent puts of a key serialise on a transaction-level advisory lock on the hash of (user, key),
-- seeded by the space id, taken for all keys of a call in sorted order (so two calls never deadlock on them).
-- No unique index: pgmem.supersede writes the successor (with the old metadata) before the old memory stops
-- holding, and add, add_batch and import_user may write the key too; a put of the key deletes such extras.
DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.put_keyed(
    p_space text, p_keys text[], p_contents text[], p_embeddings @vector@.vector[],
    p_metadata jsonb[] DEFAULT NULL, p_session_ids text[] DEFAULT NULL, p_expires_at timestamptz[] DEFAULT NULL,
    p_ttls interval[] DEFAULT NULL, p_alt_contents text[] DEFAULT NULL, p_agent_id text DEFAULT NULL, p_model text DEFAULT NULL,
    p_vector_items integer[] DEFAULT NULL, p_vector_kinds text[] DEFAULT NULL, p_vectors @vector@.vector[] DEFAULT NULL
) RETURNS TABLE (ordinal integer, id uuid, created boolean)
LANGUAGE plpgsql VOLATILE
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
BEGIN
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
    IF coalesce(cardinality(p_vector_items), 0) <> coalesce(cardinality(p_vector_kinds), 0)
       OR coalesce(cardinality(p_vector_items), 0) <> coalesce(cardinality(p_vectors), 0) THEN
        RAISE EXCEPTION 'extra vectors: items, kinds and vectors must have the same length' USING ERRCODE = 'PGM08';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_vector_items) AS e(item) WHERE e.item IS NULL OR e.item < 0 OR e.item >= v_n) THEN
        RAISE EXCEPTION 'extra vectors: item numbers must be from 0 to %', v_n - 1 USING ERRCODE = 'PGM08';
    END IF;

    PERFORM pg_advisory_xact_lock(hashtextextended(v_user || chr(31) || k.key, v_space.space_id))
    FROM (SELECT DISTINCT x.key COLLATE "C" AS key FROM unnest(p_keys) AS x(key) ORDER BY 1) k;
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
            UPDATE pgmem.memories m SET content = v_content, embedding = p_embeddings[v_i], metadata = v_meta,
                   session_id = p_session_ids[v_i], expires_at = coalesce(p_expires_at[v_i], now() + p_ttls[v_i])
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
                VALUES (v_user, v_space.space_id, p_agent_id, p_session_ids[v_i], v_content, p_embeddings[v_i], v_meta,
                        coalesce(p_expires_at[v_i], now() + p_ttls[v_i]))
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
            INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
            SELECT v_user, v_id, row_number() OVER (ORDER BY e.i), e.kind, e.emb
            FROM unnest(p_vector_items, p_vector_kinds, p_vectors) WITH ORDINALITY AS e(item, kind, emb, i)
            WHERE e.item = v_i - 1;
        END IF;
        ordinal := v_i - 1; id := v_id;
        RETURN NEXT;
    END LOOP;
    PERFORM set_config('pgmem.actor', '', true);
END
$$
$def$); END $pgmem$;

COMMENT ON FUNCTION pgmem.put_keyed(text, text[], text[], vector[], jsonb[], text[], timestamptz[], interval[], text[], text, text, integer[], text[], vector[]) IS
    'Upsert up to 10000 memories of the current user by key (metadata "pgmem:key"), in order, all or nothing: a key''s live memory is updated in place (content, embedding, metadata replaced, session, own expiry (p_expires_at, or now() + p_ttls: from the write itself); id, created_at and history stay), else one is added; a NULL content deletes the key. Two concurrent calls for the same key wait for each other (one memory per key). When another memory holds the content, p_alt_contents[i] is stored instead (unique_violation on memories_content_key when it is NULL or held too). Expired and extra memories of the key are removed. Extra vectors (p_vector_items from 0) replace the old ones when the content changes. Returns (ordinal from 0, id or NULL for a delete, created).';

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
ALTER FUNCTION pgmem.put_keyed(text, text[], text[], @vector@.vector[], jsonb[], text[], timestamptz[], interval[], text[], text, text, integer[], text[], @vector@.vector[]) SECURITY DEFINER
$def$); END $pgmem$;

GRANT CREATE ON SCHEMA pgmem TO pgmem_api;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
REVOKE EXECUTE ON FUNCTION pgmem.put_keyed(p_space text, p_keys text[], p_contents text[], p_embeddings @vector@.vector[], p_metadata jsonb[], p_session_ids text[], p_expires_at timestamptz[], p_ttls interval[], p_alt_contents text[], p_agent_id text, p_model text, p_vector_items integer[], p_vector_kinds text[], p_vectors @vector@.vector[]) FROM PUBLIC
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
GRANT EXECUTE ON FUNCTION pgmem.put_keyed(p_space text, p_keys text[], p_contents text[], p_embeddings @vector@.vector[], p_metadata jsonb[], p_session_ids text[], p_expires_at timestamptz[], p_ttls interval[], p_alt_contents text[], p_agent_id text, p_model text, p_vector_items integer[], p_vector_kinds text[], p_vectors @vector@.vector[]) TO pgmem_api
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
ALTER FUNCTION pgmem.put_keyed(text, text[], text[], @vector@.vector[], jsonb[], text[], timestamptz[], interval[], text[], text, text, integer[], text[], @vector@.vector[]) OWNER TO pgmem_api
$def$); END $pgmem$;

REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
GRANT EXECUTE ON FUNCTION pgmem.put_keyed(text, text[], text[], @vector@.vector[], jsonb[], text[], timestamptz[], interval[], text[], text, text, integer[], text[], @vector@.vector[]) TO pgmem_agent
$def$); END $pgmem$;

-- Moves the own expiry of live memories: now() + ttl (NULL: the space's memory_ttl after created_at again).
CREATE OR REPLACE FUNCTION pgmem.set_expiry(p_ids uuid[], p_ttls interval[], p_agent_id text DEFAULT NULL)
RETURNS TABLE (id uuid, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
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
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    PERFORM set_config('pgmem.event', 'UPDATE', true);
    -- Rows locked in id order first, so that two calls on the same memories never deadlock.
    PERFORM 1 FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = ANY (p_ids) ORDER BY m.id FOR UPDATE;
    RETURN QUERY
    UPDATE pgmem.memories m SET expires_at = now() + t.ttl
    FROM (SELECT DISTINCT ON (x.id) x.id, x.ttl FROM unnest(p_ids, p_ttls) WITH ORDINALITY AS x(id, ttl, o) ORDER BY x.id, x.o DESC) t,
         pgmem.spaces s
    WHERE m.user_id = v_user AND m.id = t.id AND s.space_id = m.space_id AND m.valid_to IS NULL
      AND pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()
    RETURNING m.id, nullif(pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl), 'infinity');
    PERFORM set_config('pgmem.event', '', true);
    PERFORM set_config('pgmem.actor', '', true);
END
$$;

COMMENT ON FUNCTION pgmem.set_expiry(uuid[], interval[], text) IS
    'Set the own expiry of memories of the current user that are live and hold to now() + ttl (NULL ttl: none of its own, the space''s memory_ttl applies), e.g. a time-to-live refreshed on read. Others (missing, expired, superseded, another user''s) are skipped. An UPDATE in their history. Returns (id, effective expires_at) of those changed.';

ALTER FUNCTION pgmem.set_expiry(uuid[], interval[], text) SECURITY DEFINER;

GRANT CREATE ON SCHEMA pgmem TO pgmem_api;

REVOKE EXECUTE ON FUNCTION pgmem.set_expiry(p_ids uuid[], p_ttls interval[], p_agent_id text) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION pgmem.set_expiry(p_ids uuid[], p_ttls interval[], p_agent_id text) TO pgmem_api;

ALTER FUNCTION pgmem.set_expiry(uuid[], interval[], text) OWNER TO pgmem_api;

REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api;

GRANT EXECUTE ON FUNCTION pgmem.set_expiry(uuid[], interval[], text) TO pgmem_agent;

-- The live memory of each key (metadata "pgmem:key", written by pgmem.put_keyed), through the key index.
CREATE OR REPLACE FUNCTION pgmem.get_keyed(p_space text, p_keys text[]) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem.space(p_space);
BEGIN
    IF cardinality(p_keys) > 10000 THEN
        RAISE EXCEPTION 'at most 10000 keys a call, got %', cardinality(p_keys) USING ERRCODE = 'PGM08';
    END IF;
    RETURN QUERY
    SELECT DISTINCT ON (m.metadata ->> 'pgmem:key') (pgmem._to_memory(m, v_space.name, NULL, v_space.memory_ttl)).*
    FROM pgmem.memories m
    WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.metadata ? 'pgmem:key'
      AND m.metadata ->> 'pgmem:key' = ANY (p_keys) AND m.valid_to IS NULL
      AND pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl) > now()
    ORDER BY m.metadata ->> 'pgmem:key', m.updated_at DESC, m.id;
END
$$;

COMMENT ON FUNCTION pgmem.get_keyed(text, text[]) IS
    'The live memory that holds for each of p_keys (metadata "pgmem:key", see pgmem.put_keyed) of the current user in a space: at most one row per key (the newest), none for a missing or expired key.';

ALTER FUNCTION pgmem.get_keyed(text, text[]) SECURITY DEFINER;

GRANT CREATE ON SCHEMA pgmem TO pgmem_api;

REVOKE EXECUTE ON FUNCTION pgmem.get_keyed(p_space text, p_keys text[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION pgmem.get_keyed(p_space text, p_keys text[]) TO pgmem_api;

ALTER FUNCTION pgmem.get_keyed(text, text[]) OWNER TO pgmem_api;

REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api;

GRANT EXECUTE ON FUNCTION pgmem.get_keyed(text, text[]) TO pgmem_agent;

-- Distinct values of one metadata key holding a JSON array of labels (LangGraph's namespaces), filtered by
-- label patterns, cut to a depth, sorted, paged: what LangGraph's list_namespaces asks for, in one statement.
CREATE OR REPLACE FUNCTION pgmem.metadata_values(
    p_space text, p_key text, p_prefixes jsonb DEFAULT NULL, p_suffixes jsonb DEFAULT NULL,
    p_max_depth integer DEFAULT NULL, p_limit integer DEFAULT 100, p_offset integer DEFAULT 0
) RETURNS TABLE (value jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem.space(p_space);
    v_pat jsonb;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'the metadata key must not be empty' USING ERRCODE = 'PGM08';
    END IF;
    FOR v_pat IN SELECT x FROM unnest(ARRAY[coalesce(p_prefixes, '[]'), coalesce(p_suffixes, '[]')]) AS x LOOP
        IF jsonb_typeof(v_pat) <> 'array' OR EXISTS (
                SELECT 1 FROM jsonb_array_elements(v_pat) AS p(path)
                WHERE jsonb_typeof(p.path) <> 'array'
                   OR EXISTS (SELECT 1 FROM jsonb_array_elements(p.path) AS l(label) WHERE jsonb_typeof(l.label) <> 'string')) THEN
            RAISE EXCEPTION 'prefixes and suffixes must be JSON arrays of arrays of strings' USING ERRCODE = 'PGM08';
        END IF;
    END LOOP;
    IF p_max_depth IS NOT NULL AND p_max_depth < 1 THEN
        RAISE EXCEPTION 'max_depth must be at least 1, got %', p_max_depth USING ERRCODE = 'PGM08';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit must be between 1 and 10000, got %', p_limit USING ERRCODE = 'PGM08';
    END IF;
    IF p_offset IS NULL OR p_offset < 0 THEN
        RAISE EXCEPTION 'offset must not be negative, got %', p_offset USING ERRCODE = 'PGM08';
    END IF;
    -- A pattern matches a value when each of its labels is "*" or equals the value's label at the same
    -- position, counted from the start (prefix) or the end (suffix). Labels sort by code point (COLLATE "C").
    RETURN QUERY
    WITH vals AS (
        SELECT DISTINCT m.metadata -> p_key AS v
        FROM pgmem.memories m
        WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.metadata ? p_key
          AND jsonb_typeof(m.metadata -> p_key) = 'array' AND m.valid_to IS NULL
          AND pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl) > now()
    ), matched AS (
        SELECT a.v FROM vals a
        WHERE NOT EXISTS (
                SELECT 1 FROM jsonb_array_elements(coalesce(p_prefixes, '[]')) AS c(path)
                WHERE jsonb_array_length(c.path) > jsonb_array_length(a.v)
                   OR EXISTS (SELECT 1 FROM jsonb_array_elements(c.path) WITH ORDINALITY AS l(label, i)
                              WHERE l.label <> '"*"' AND l.label IS DISTINCT FROM a.v -> (l.i::integer - 1)))
          AND NOT EXISTS (
                SELECT 1 FROM jsonb_array_elements(coalesce(p_suffixes, '[]')) AS c(path)
                WHERE jsonb_array_length(c.path) > jsonb_array_length(a.v)
                   OR EXISTS (SELECT 1 FROM jsonb_array_elements(c.path) WITH ORDINALITY AS l(label, i)
                              WHERE l.label <> '"*"' AND l.label IS DISTINCT FROM
                                    a.v -> (jsonb_array_length(a.v) - jsonb_array_length(c.path) + l.i::integer - 1)))
    ), cut AS (
        SELECT DISTINCT ARRAY(SELECT e.label FROM jsonb_array_elements_text(x.v) WITH ORDINALITY AS e(label, i)
                              WHERE p_max_depth IS NULL OR e.i <= p_max_depth ORDER BY e.i) AS labels
        FROM matched x
    )
    SELECT to_jsonb(c.labels) FROM cut c ORDER BY c.labels COLLATE "C" LIMIT p_limit OFFSET p_offset;
END
$$;

COMMENT ON FUNCTION pgmem.metadata_values(text, text, jsonb, jsonb, integer, integer, integer) IS
    'The distinct values of metadata key p_key that are JSON arrays (of labels) among the current user''s live memories that hold in a space: only those matching every pattern of p_prefixes (from the start) and p_suffixes (from the end), each a JSON array of labels where "*" matches any label; cut to their first p_max_depth labels, deduplicated, sorted by label (code point order), then p_offset and p_limit (1..10000). Returns each as a JSON array of strings.';

ALTER FUNCTION pgmem.metadata_values(text, text, jsonb, jsonb, integer, integer, integer) SECURITY DEFINER;

GRANT CREATE ON SCHEMA pgmem TO pgmem_api;

REVOKE EXECUTE ON FUNCTION pgmem.metadata_values(p_space text, p_key text, p_prefixes jsonb, p_suffixes jsonb, p_max_depth integer, p_limit integer, p_offset integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION pgmem.metadata_values(p_space text, p_key text, p_prefixes jsonb, p_suffixes jsonb, p_max_depth integer, p_limit integer, p_offset integer) TO pgmem_api;

ALTER FUNCTION pgmem.metadata_values(text, text, jsonb, jsonb, integer, integer, integer) OWNER TO pgmem_api;

REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api;

GRANT EXECUTE ON FUNCTION pgmem.metadata_values(text, text, jsonb, jsonb, integer, integer, integer) TO pgmem_agent;

CREATE OR REPLACE FUNCTION pgmem.clear_session(p_space text, p_session_id text) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem.space(p_space);
    v_n bigint;
BEGIN
    IF p_session_id IS NULL OR p_session_id = '' THEN
        RAISE EXCEPTION 'a session id is required' USING ERRCODE = 'PGM08';
    END IF;
    DELETE FROM pgmem.turns t WHERE t.user_id = v_user AND t.space_id = v_space.space_id AND t.session_id = p_session_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

COMMENT ON FUNCTION pgmem.clear_session(text, text) IS
    'Delete every turn of one session of the current user in a space (consolidated or not, live or expired); returns how many. Memories consolidated from them stay, with their source links (turn ids). Turns keep no history.';

ALTER FUNCTION pgmem.clear_session(text, text) SECURITY DEFINER;

GRANT CREATE ON SCHEMA pgmem TO pgmem_api;

REVOKE EXECUTE ON FUNCTION pgmem.clear_session(p_space text, p_session_id text) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION pgmem.clear_session(p_space text, p_session_id text) TO pgmem_api;

ALTER FUNCTION pgmem.clear_session(text, text) OWNER TO pgmem_api;

REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api;

GRANT EXECUTE ON FUNCTION pgmem.clear_session(text, text) TO pgmem_agent;
