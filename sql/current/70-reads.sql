-- pgmem current schema, part 70: reads. get, chain (a fact's supersession chain), list (keyset pages),
-- stats, session_tail, history, and the psql view of the caller's live memories.

-- For people at psql: the caller's memories that hold now, never an embedding. It runs as its owner,
-- pgmem_api, under row-level security (owner and grant in 99-privileges.sql); security_barrier keeps a
-- caller's functions from seeing rows before its filter. With no user set: no rows.
CREATE VIEW pgmem.memories_view WITH (security_barrier = true) AS
SELECT m.user_id, m.agent_id, m.session_id, m.content,
       date_trunc('second', now() - m.created_at) AS age,
       m.metadata, s.name AS space, m.id, m.created_at, m.version
FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
WHERE m.user_id = (SELECT pgmem.current_user_id()) AND pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()
  AND m.valid_to IS NULL;
COMMENT ON VIEW pgmem.memories_view IS
    'For people at psql: the current user''s memories that hold now (no embeddings), newest facts included. Runs as pgmem_api under row-level security; with no user set, no rows.';

CREATE FUNCTION pgmem.get(p_id uuid) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    RETURN QUERY
    -- The columns of pgmem._to_memory written out: Citus cannot pass a shard's whole row to a function.
    SELECT m.id, m.user_id, s.name, m.agent_id, m.session_id, m.content, m.metadata, m.created_at, m.updated_at,
           nullif(pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl), 'infinity'), m.version, NULL::double precision,
           m.valid_from, m.valid_to, m.superseded_by
    FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
    WHERE m.user_id = v_user AND m.id = p_id AND pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now();
END
$$;
COMMENT ON FUNCTION pgmem.get(uuid) IS
    'One memory of the current user by id, also when superseded (see valid_to, superseded_by): one row, or none when it does not exist, has expired or belongs to another user.';

CREATE FUNCTION pgmem.chain(p_id uuid) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    RETURN QUERY
    WITH RECURSIVE back AS (
        SELECT m.id, 0 AS depth FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = p_id
        UNION
        SELECT m.id, b.depth - 1 FROM back b JOIN pgmem.memories m ON m.user_id = v_user AND m.superseded_by = b.id
        WHERE b.depth > -1000
    ), fwd AS (
        SELECT m.id, m.superseded_by, 0 AS depth FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = p_id
        UNION
        SELECT m.id, m.superseded_by, f.depth + 1 FROM fwd f JOIN pgmem.memories m ON m.user_id = v_user AND m.id = f.superseded_by
        WHERE f.depth < 1000
    ), ids AS (
        SELECT back.id, back.depth FROM back UNION SELECT fwd.id, fwd.depth FROM fwd
    )
    -- The columns of pgmem._to_memory written out: Citus cannot pass a shard's whole row to a function.
    SELECT m.id, m.user_id, s.name, m.agent_id, m.session_id, m.content, m.metadata, m.created_at, m.updated_at,
           nullif(pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl), 'infinity'), m.version, NULL::double precision,
           m.valid_from, m.valid_to, m.superseded_by
    FROM ids JOIN pgmem.memories m ON m.user_id = v_user AND m.id = ids.id JOIN pgmem.spaces s ON s.space_id = m.space_id
    WHERE pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()
    ORDER BY ids.depth, m.valid_from, m.id;
END
$$;
COMMENT ON FUNCTION pgmem.chain(uuid) IS
    'The supersede chain through memory p_id, oldest fact first: its predecessors, itself and its successors (expired ones left out). Each row''s valid_from, valid_to and superseded_by show the line.';

CREATE FUNCTION pgmem.list(
    p_space text,
    p_agent_id text DEFAULT NULL,
    p_session_id text DEFAULT NULL,
    p_filter jsonb DEFAULT NULL,
    p_limit integer DEFAULT 50,
    p_after_created_at timestamptz DEFAULT NULL,
    p_after_id uuid DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL,
    p_created_before timestamptz DEFAULT NULL,
    p_contains text DEFAULT NULL,
    p_as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
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
    v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
    RETURN QUERY EXECUTE
        'SELECT ' || pgmem._memory_columns('$9', 'NULL', v_space.memory_ttl) || ' FROM pgmem.memories m WHERE ' || v_scope.o_sql
        || ' AND ($10::timestamptz IS NULL OR (m.created_at, m.id) > ($10, $11))'
        || ' ORDER BY m.created_at, m.id LIMIT $12'
    USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          (v_scope.o_filter).keys, (v_scope.o_filter).vals, p_contains, v_space.name,
          p_after_created_at, p_after_id, p_limit;
END
$$;
COMMENT ON FUNCTION pgmem.list(text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text, timestamptz) IS
    'The current user''s memories in a space that hold now (or at p_as_of), oldest first, with keyset pagination: pass the last row''s (created_at, id) as the cursor. Filters: agent, session, metadata, created_at range [after, before), literal content substring (p_contains: plain text, case-sensitive).';

CREATE FUNCTION pgmem.stats(
    p_space text DEFAULT NULL
) RETURNS TABLE ( space text, memories bigint, agents bigint, sessions bigint, oldest timestamptz, newest timestamptz )
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
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
      ON m.space_id = s.space_id AND m.user_id = v_user AND pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()
         AND m.valid_to IS NULL
    WHERE p_space IS NULL OR s.name = p_space
    GROUP BY s.name ORDER BY s.name;
END
$$;
COMMENT ON FUNCTION pgmem.stats(text) IS 'Per space: the current user''s live memories that hold now, distinct agents and sessions, oldest and newest created_at.';

CREATE FUNCTION pgmem.session_tail(p_space text, p_session_id text, p_n integer DEFAULT 1) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem.space(p_space);
BEGIN
    IF p_n IS NULL OR p_n < 1 OR p_n > 100 THEN
        RAISE EXCEPTION 'n must be between 1 and 100, got %', p_n USING ERRCODE = 'PGM08';
    END IF;
    RETURN QUERY
    -- The columns of pgmem._to_memory written out: Citus cannot pass a shard's whole row to a function.
    SELECT t.id, t.user_id, t.space, t.agent_id, t.session_id, t.content, t.metadata, t.created_at, t.updated_at,
           t.expires_at, t.version, t.similarity, t.valid_from, t.valid_to, t.superseded_by FROM (
        SELECT m.id, m.user_id, v_space.name, m.agent_id, m.session_id, m.content, m.metadata, m.created_at, m.updated_at,
               nullif(pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl), 'infinity'), m.version, NULL::double precision,
               m.valid_from, m.valid_to, m.superseded_by, m.seq
        FROM pgmem.memories m
        WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.session_id = p_session_id
          AND pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl) > now()
        ORDER BY m.created_at DESC, m.seq DESC LIMIT p_n
    ) t (id, user_id, space, agent_id, session_id, content, metadata, created_at, updated_at, expires_at, version,
         similarity, valid_from, valid_to, superseded_by, seq)
    ORDER BY t.created_at, t.seq;
END
$$;
COMMENT ON FUNCTION pgmem.session_tail(text, text, integer) IS
    'The last n (1..100) memories of one session of the current user, in write order (created_at, then write sequence): the context a new memory of that session follows.';

-- Which of these contents the caller has already, asked by content hash before anything is embedded: an
-- import or a writer skips them (add_batch would return the existing memory with created = false). Only
-- memories that hold now count, the same rule as add_batch's deduplication: an expired memory or a superseded
-- fact does not block the same content from being added again. The caller's own rows only (user_id first,
-- the row-level security policy besides); each hash found once, in no particular order.
CREATE FUNCTION pgmem.known_hashes(p_space text, p_hashes bytea[]) RETURNS TABLE (content_hash bytea)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem.space(p_space);
BEGIN
    IF coalesce(cardinality(p_hashes), 0) > 10000 THEN
        RAISE EXCEPTION 'at most 10000 hashes a call, got %', cardinality(p_hashes) USING ERRCODE = 'PGM08';
    END IF;
    RETURN QUERY
    SELECT DISTINCT m.content_hash FROM pgmem.memories m
    WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.content_hash = ANY (p_hashes)
      AND m.valid_to IS NULL AND pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl) > now();
END
$$;
COMMENT ON FUNCTION pgmem.known_hashes(text, bytea[]) IS
    'Which of p_hashes (pgmem.content_hash of a content: SHA-256 of its UTF-8 bytes; at most 10000) are the content of a memory of the current user in p_space that holds now: the contents add and add_batch would not store again. Lets a client skip embedding them.';

CREATE FUNCTION pgmem.history(
    p_id uuid
) RETURNS TABLE (
    event_id bigint,
    memory_id uuid,
    event text,
    old_content text,
    new_content text,
    old_metadata jsonb,
    new_metadata jsonb,
    actor_agent_id text,
    actor_role name,
    created_at timestamptz,
    related_id uuid
)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    RETURN QUERY
    SELECT h.event_id, h.memory_id, h.event, h.old_content, h.new_content, h.old_metadata, h.new_metadata,
           h.actor_agent_id, h.actor_role, h.created_at, h.related_id
    FROM pgmem.history h WHERE h.user_id = v_user AND h.memory_id = p_id ORDER BY h.event_id;
END
$$;
COMMENT ON FUNCTION pgmem.history(uuid) IS
    'Every event of one memory of the current user, oldest first (also after the memory was deleted; after expiry only the EXPIRE tombstone). related_id: the successor of a SUPERSEDE.';

-- The live memory of each key (metadata "pgmem:key", written by pgmem.put_keyed), through the key index.
CREATE FUNCTION pgmem.get_keyed(p_space text, p_keys text[]) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql STABLE SECURITY DEFINER
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
    -- The columns of pgmem._to_memory written out: Citus cannot pass a shard's whole row to a function.
    SELECT DISTINCT ON (m.metadata ->> 'pgmem:key')
           m.id, m.user_id, v_space.name, m.agent_id, m.session_id, m.content, m.metadata, m.created_at, m.updated_at,
           nullif(pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl), 'infinity'), m.version, NULL::double precision,
           m.valid_from, m.valid_to, m.superseded_by
    FROM pgmem.memories m
    WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.metadata ? 'pgmem:key'
      AND m.metadata ->> 'pgmem:key' = ANY (p_keys) AND m.valid_to IS NULL
      AND pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl) > now()
    ORDER BY m.metadata ->> 'pgmem:key', m.updated_at DESC, m.id;
END
$$;
COMMENT ON FUNCTION pgmem.get_keyed(text, text[]) IS
    'The live memory that holds for each of p_keys (metadata "pgmem:key", see pgmem.put_keyed) of the current user in a space: at most one row per key (the newest), none for a missing or expired key.';

-- Distinct values of one metadata key holding a JSON array of labels (LangGraph's namespaces), filtered by
-- label patterns, cut to a depth, sorted, paged: what LangGraph's list_namespaces asks for, in one statement.
CREATE FUNCTION pgmem.metadata_values(
    p_space text,
    p_key text,
    p_prefixes jsonb DEFAULT NULL,
    p_suffixes jsonb DEFAULT NULL,
    p_max_depth integer DEFAULT NULL,
    p_limit integer DEFAULT 100,
    p_offset integer DEFAULT 0
) RETURNS TABLE (value jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
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
    -- Every value is matched against every pattern: 20,000 patterns took 48 s of CPU on 2,000 values.
    IF jsonb_array_length(coalesce(p_prefixes, '[]')) + jsonb_array_length(coalesce(p_suffixes, '[]')) > 16
       OR octet_length(coalesce(p_prefixes, '[]')::text) + octet_length(coalesce(p_suffixes, '[]')::text) > 65536 THEN
        RAISE EXCEPTION 'prefixes and suffixes hold at most 16 patterns in all, 65536 bytes as JSON' USING ERRCODE = 'PGM08';
    END IF;
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
    'The distinct values of metadata key p_key that are JSON arrays (of labels) among the current user''s live memories that hold in a space: only those matching every pattern of p_prefixes (from the start) and p_suffixes (from the end), each a JSON array of labels where "*" matches any label; cut to their first p_max_depth labels, deduplicated, sorted by label (code point order), then p_offset and p_limit (1..10000). Returns each as a JSON array of strings. At most 16 patterns in all (65536 bytes as JSON).';
