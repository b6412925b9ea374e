-- pgmem current schema, part 80: conversation turns (short-term memory) and context. Turns with their own
-- time-to-live, consolidation of turns into memories (with their sources), and context(): recent turns
-- plus recalled memories within a token budget.

-- ---------------------------------------------------------------------------------------------------------
-- Session turns: short-term memory in PostgreSQL, same identity and RLS as memories
-- ---------------------------------------------------------------------------------------------------------
CREATE TABLE pgmem.turns (
    user_id          text        NOT NULL,
    turn_id          bigint      GENERATED ALWAYS AS IDENTITY,
    space_id         integer     NOT NULL,
    session_id       text        NOT NULL,
    agent_id         text,
    role             text        NOT NULL,
    content          text        NOT NULL,
    embedding        @vector@.vector,
    metadata         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz,
    consolidated_at  timestamptz,
    CONSTRAINT turns_pkey PRIMARY KEY (user_id, turn_id),
    CONSTRAINT turns_space_fkey FOREIGN KEY (space_id) REFERENCES pgmem.spaces (space_id),
    CONSTRAINT turns_user_id_check CHECK (user_id <> '' AND length(user_id) <= 256),
    CONSTRAINT turns_session_id_check CHECK (session_id <> '' AND length(session_id) <= 256),
    CONSTRAINT turns_agent_id_check CHECK (length(agent_id) <= 256),
    CONSTRAINT turns_role_check CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    CONSTRAINT turns_content_check CHECK (char_length(content) BETWEEN 1 AND 100000),
    CONSTRAINT turns_metadata_check CHECK (jsonb_typeof(metadata) = 'object')
);
COMMENT ON TABLE pgmem.turns IS
    'Conversation turns per user and session (short-term memory), in write order (turn_id), with a time-to-live (own expires_at, else the space''s turn_ttl after created_at). consolidated_at: when pgmem.consolidate turned them into memories.';
CREATE INDEX turns_user_session_idx ON pgmem.turns (user_id, space_id, session_id, turn_id);
CREATE INDEX turns_created_at_idx ON pgmem.turns (created_at);
ALTER TABLE pgmem.turns ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.turns FORCE ROW LEVEL SECURITY;
CREATE POLICY turns_tenant ON pgmem.turns
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

-- Which turns a consolidated memory came from. The link outlives the turn (turns expire sooner).
CREATE TABLE pgmem.memory_sources (
    user_id    text   NOT NULL,
    memory_id  uuid   NOT NULL,
    turn_id    bigint NOT NULL,
    CONSTRAINT memory_sources_pkey PRIMARY KEY (user_id, memory_id, turn_id),
    CONSTRAINT memory_sources_memory_fkey FOREIGN KEY (user_id, memory_id)
        REFERENCES pgmem.memories (user_id, id) ON DELETE CASCADE
);
COMMENT ON TABLE pgmem.memory_sources IS 'Links from a consolidated memory to the turns it was made from (turn ids stay after the turns expire).';
CREATE INDEX memory_sources_turn_idx ON pgmem.memory_sources (user_id, turn_id);
ALTER TABLE pgmem.memory_sources ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memory_sources FORCE ROW LEVEL SECURITY;
CREATE POLICY memory_sources_tenant ON pgmem.memory_sources
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

CREATE TYPE pgmem.turn AS (
    turn_id          bigint,
    session_id       text,
    agent_id         text,
    role             text,
    content          text,
    metadata         jsonb,
    created_at       timestamptz,
    expires_at       timestamptz,
    consolidated_at  timestamptz
);
COMMENT ON TYPE pgmem.turn IS 'A conversation turn as the API returns it; expires_at is the effective expiry (own, else created_at + the space''s turn_ttl).';

CREATE FUNCTION pgmem.append_turn(
    p_space text,
    p_session_id text,
    p_role text,
    p_content text,
    p_agent_id text DEFAULT NULL,
    p_embedding vector DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}',
    p_expires_at timestamptz DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_created_at timestamptz DEFAULT NULL
) RETURNS SETOF pgmem.turn
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
    v_row pgmem.turns;
BEGIN
    IF p_session_id IS NULL OR p_session_id = '' OR length(p_session_id) > 256 THEN
        RAISE EXCEPTION 'a turn needs a session id of 1 to 256 characters' USING ERRCODE = 'PGM08';
    END IF;
    IF p_role IS NULL OR p_role NOT IN ('user', 'assistant', 'system', 'tool') THEN
        RAISE EXCEPTION 'turn role must be user, assistant, system or tool, got %', quote_nullable(p_role) USING ERRCODE = 'PGM08';
    END IF;
    IF p_content IS NULL OR char_length(p_content) NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'turn content must be 1 to 100000 characters' USING ERRCODE = 'PGM08';
    END IF;
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'metadata must be a JSON object' USING ERRCODE = 'PGM08';
    END IF;
    PERFORM pgmem._check_expiry(p_expires_at);
    PERFORM pgmem._check_time(p_expires_at, 'expires_at', true);
    PERFORM pgmem._check_time(p_created_at, 'created_at');
    INSERT INTO pgmem.turns (user_id, space_id, session_id, agent_id, role, content, embedding, metadata, created_at, expires_at)
    VALUES (v_user, v_space.space_id, p_session_id, p_agent_id, p_role, p_content, p_embedding, coalesce(p_metadata, '{}'),
            coalesce(p_created_at, now()), p_expires_at)
    RETURNING * INTO v_row;
    RETURN NEXT ROW(v_row.turn_id, v_row.session_id, v_row.agent_id, v_row.role, v_row.content, v_row.metadata, v_row.created_at,
                    nullif(pgmem._expiry(v_row.expires_at, v_row.created_at, v_space.turn_ttl), 'infinity'), v_row.consolidated_at)::pgmem.turn;
END
$$;
COMMENT ON FUNCTION pgmem.append_turn(text, text, text, text, text, vector, jsonb, timestamptz, text, timestamptz) IS
    'Append one conversation turn (role user, assistant, system or tool) to a session of the current user; optional embedding in the space''s model; expires after the space''s turn_ttl unless p_expires_at is given. Returns the turn.';

CREATE FUNCTION pgmem._turns(
    p_user text,
    p_space pgmem.spaces,
    p_session_id text,
    p_pending_only boolean,
    p_n integer
) RETURNS SETOF pgmem.turn
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    -- PL/pgSQL, not LANGUAGE sql: Citus cannot plan a parameterised SQL function's statement on a
    -- distributed table, and plans PL/pgSQL's with the parameters' values.
    RETURN QUERY
    SELECT t.turn_id, t.session_id, t.agent_id, t.role, t.content, t.metadata, t.created_at,
           nullif(pgmem._expiry(t.expires_at, t.created_at, p_space.turn_ttl), 'infinity'), t.consolidated_at
    FROM (SELECT * FROM pgmem.turns t
          WHERE t.user_id = p_user AND t.space_id = p_space.space_id AND t.session_id = p_session_id
            AND pgmem._expiry(t.expires_at, t.created_at, p_space.turn_ttl) > now()
            AND (NOT p_pending_only OR t.consolidated_at IS NULL)
          ORDER BY t.turn_id DESC LIMIT p_n) t
    ORDER BY t.turn_id;
END
$$;
COMMENT ON FUNCTION pgmem._turns(text, pgmem.spaces, text, boolean, integer) IS 'Internal: the last n live turns of a session (pending only: not yet consolidated), oldest first.';

CREATE FUNCTION pgmem.recent_turns(p_space text, p_session_id text, p_n integer DEFAULT 20) RETURNS SETOF pgmem.turn
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem.space(p_space);
BEGIN
    IF p_n IS NULL OR p_n < 1 OR p_n > 1000 THEN
        RAISE EXCEPTION 'n must be between 1 and 1000, got %', p_n USING ERRCODE = 'PGM08';
    END IF;
    RETURN QUERY SELECT * FROM pgmem._turns(v_user, v_space, p_session_id, false, p_n);
END
$$;
COMMENT ON FUNCTION pgmem.recent_turns(text, text, integer) IS 'The last n (1..1000) live turns of one session of the current user, oldest first.';

CREATE FUNCTION pgmem.pending_turns(p_space text, p_session_id text, p_n integer DEFAULT 1000) RETURNS SETOF pgmem.turn
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem.space(p_space);
BEGIN
    IF p_n IS NULL OR p_n < 1 OR p_n > 10000 THEN
        RAISE EXCEPTION 'n must be between 1 and 10000, got %', p_n USING ERRCODE = 'PGM08';
    END IF;
    RETURN QUERY SELECT * FROM pgmem._turns(v_user, v_space, p_session_id, true, p_n);
END
$$;
COMMENT ON FUNCTION pgmem.pending_turns(text, text, integer) IS 'The live turns of a session not yet consolidated (the last n, 1..10000), oldest first: the input of a consolidation.';

CREATE FUNCTION pgmem.consolidate(
    p_space text,
    p_session_id text,
    p_turn_ids bigint[],
    p_contents text[],
    p_embeddings vector[],
    p_metadata jsonb[] DEFAULT NULL,
    p_agent_id text DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_vector_items integer[] DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors vector[] DEFAULT NULL
) RETURNS TABLE (ordinal integer, id uuid, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, NULL, p_model);
    v_turns bigint[] := ARRAY(SELECT DISTINCT x FROM unnest(p_turn_ids) x WHERE x IS NOT NULL ORDER BY 1);
    v_found bigint[];
    v_done bigint[];
    v_n integer := coalesce(cardinality(p_contents), 0);
    v_ids uuid[];
    v_flags boolean[];
BEGIN
    IF cardinality(v_turns) = 0 THEN
        RAISE EXCEPTION 'a consolidation needs the turns it summarises' USING ERRCODE = 'PGM08';
    END IF;
    PERFORM 1 FROM pgmem.turns t WHERE t.user_id = v_user AND t.turn_id = ANY (v_turns) ORDER BY t.turn_id FOR UPDATE;
    SELECT coalesce(array_agg(t.turn_id ORDER BY t.turn_id), '{}'),
           coalesce(array_agg(t.turn_id ORDER BY t.turn_id) FILTER (WHERE t.consolidated_at IS NOT NULL), '{}')
    INTO v_found, v_done
    FROM pgmem.turns t
    WHERE t.user_id = v_user AND t.turn_id = ANY (v_turns) AND t.space_id = v_space.space_id AND t.session_id = p_session_id
      AND pgmem._expiry(t.expires_at, t.created_at, v_space.turn_ttl) > now();
    IF cardinality(v_found) <> cardinality(v_turns) THEN
        RAISE EXCEPTION 'turns % not found in session % (missing, expired or of another session)',
            ARRAY(SELECT x FROM unnest(v_turns) x EXCEPT SELECT y FROM unnest(v_found) y ORDER BY 1), quote_literal(p_session_id)
            USING ERRCODE = 'PGM03';
    END IF;
    IF cardinality(v_done) = cardinality(v_turns) THEN
        -- Already consolidated, all of them: the same call again (a retry) returns what it made then.
        RETURN QUERY
        SELECT (row_number() OVER (ORDER BY m.seq) - 1)::integer, m.id, false
        FROM pgmem.memories m
        WHERE m.user_id = v_user AND m.id IN (SELECT s.memory_id FROM pgmem.memory_sources s WHERE s.user_id = v_user AND s.turn_id = ANY (v_turns))
        ORDER BY m.seq;
        RETURN;
    ELSIF cardinality(v_done) > 0 THEN
        RAISE EXCEPTION 'turns % are already consolidated', v_done
            USING ERRCODE = 'PGM04', HINT = 'Consolidate the pending turns only (pgmem.pending_turns).';
    END IF;
    IF v_n > 0 THEN
        SELECT array_agg(b.id ORDER BY b.ordinal), array_agg(b.created ORDER BY b.ordinal) INTO v_ids, v_flags
        FROM pgmem.add_batch(p_space => p_space, p_contents => p_contents, p_embeddings => p_embeddings,
                             p_agent_ids => array_fill(p_agent_id, ARRAY[v_n]), p_session_ids => array_fill(p_session_id, ARRAY[v_n]),
                             p_metadata => p_metadata, p_model => p_model, p_vector_items => p_vector_items,
                             p_vector_kinds => p_vector_kinds, p_vectors => p_vectors) b;
        INSERT INTO pgmem.memory_sources (user_id, memory_id, turn_id)
        SELECT DISTINCT v_user, i.id, t.turn_id FROM unnest(v_ids) AS i(id) CROSS JOIN unnest(v_turns) AS t(turn_id)
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE pgmem.turns t SET consolidated_at = now() WHERE t.user_id = v_user AND t.turn_id = ANY (v_turns);
    RETURN QUERY SELECT (i - 1)::integer, v_ids[i], v_flags[i] FROM generate_subscripts(v_ids, 1) AS i ORDER BY i;
END
$$;
COMMENT ON FUNCTION pgmem.consolidate(text, text, bigint[], text[], vector[], jsonb[], text, text, integer[], text[], vector[]) IS
    'Store the summary of some turns of a session as long-term memories (add_batch rules: deduplicated by content), link each to those turns (pgmem.sources) and mark the turns consolidated, all in one transaction. Idempotent: the same turns again return the memories made the first time (created = false); turns of which only some are consolidated are PGM04; unknown or expired turns PGM03.';

CREATE FUNCTION pgmem.sources(
    p_id uuid
) RETURNS TABLE ( turn_id bigint, session_id text, role text, content text, created_at timestamptz )
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    RETURN QUERY
    SELECT s.turn_id, t.session_id, t.role, t.content, t.created_at
    FROM pgmem.memory_sources s
    LEFT JOIN pgmem.turns t ON t.user_id = v_user AND t.turn_id = s.turn_id
    WHERE s.user_id = v_user AND s.memory_id = p_id
    ORDER BY s.turn_id;
END
$$;
COMMENT ON FUNCTION pgmem.sources(uuid) IS 'The turns a consolidated memory came from, in order; session, role, content and time are NULL once the turn is purged.';

CREATE FUNCTION pgmem.token_count(p_text text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT coalesce(sum(CASE WHEN r.m[1] ~ '^[A-Za-z0-9]' THEN (char_length(r.m[1]) + 3) / 4 ELSE 1 END), 0)::integer
    FROM regexp_matches(p_text, '[A-Za-z0-9]+|[^A-Za-z0-9[:space:]]', 'g') AS r(m)
$$;
COMMENT ON FUNCTION pgmem.token_count(text) IS
    'Estimated tokens of a text, offline: each run of ASCII letters and digits counts ceil(length / 4), each other non-space character 1; white space counts 0. The unit of context budgets.';

CREATE FUNCTION pgmem.context(
    p_space text,
    p_session_id text,
    p_query text,
    p_embedding vector DEFAULT NULL,
    p_budget_tokens integer DEFAULT 2000,
    p_max_turns integer DEFAULT 20,
    p_turn_share double precision DEFAULT 0.5,
    p_k integer DEFAULT 20,
    p_agent_id text DEFAULT NULL,
    p_filter jsonb DEFAULT NULL,
    p_model text DEFAULT NULL
) RETURNS TABLE (
    "position" integer,
    source text,
    turn_id bigint,
    memory_id uuid,
    role text,
    content text,
    line text,
    tokens integer,
    score double precision,
    created_at timestamptz
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
    v_used integer := 0;
    v_turn_budget integer;
    v_turns pgmem.turn[] := '{}';
    v_turn_hashes bytea[] := '{}';
    v_turn_ids bigint[] := '{}';
    v_t pgmem.turn;
    v_h pgmem.hybrid_hit;
    v_line text;
    v_tok integer;
    v_pos integer := 0;
    v_mem_lines text[] := '{}';
    v_mem_toks integer[] := '{}';
    v_mem_hits pgmem.hybrid_hit[] := '{}';
BEGIN
    IF p_budget_tokens IS NULL OR p_budget_tokens < 1 OR p_budget_tokens > 1000000 THEN
        RAISE EXCEPTION 'token budget must be between 1 and 1000000, got %', p_budget_tokens USING ERRCODE = 'PGM08';
    END IF;
    IF p_max_turns IS NULL OR p_max_turns < 0 OR p_max_turns > 1000 THEN
        RAISE EXCEPTION 'max_turns must be between 0 and 1000, got %', p_max_turns USING ERRCODE = 'PGM08';
    END IF;
    IF p_turn_share IS NULL OR NOT (p_turn_share BETWEEN 0 AND 1) THEN
        RAISE EXCEPTION 'turn_share must be in [0, 1], got %', p_turn_share USING ERRCODE = 'PGM08';
    END IF;
    IF p_k IS NULL OR p_k < 0 OR p_k > 1000 THEN
        RAISE EXCEPTION 'k must be between 0 and 1000, got %', p_k USING ERRCODE = 'PGM08';
    END IF;
    v_turn_budget := floor(p_budget_tokens * p_turn_share)::integer;
    -- Recent turns, newest first, while they fit the turns' share: a contiguous tail of the conversation.
    IF p_session_id IS NOT NULL AND p_max_turns > 0 THEN
        FOR v_t IN SELECT * FROM pgmem._turns(v_user, v_space, p_session_id, false, p_max_turns) x ORDER BY x.turn_id DESC LOOP
            v_line := format('[turn %s %s] %s', v_t.role, to_char(v_t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI'), v_t.content);
            v_tok := pgmem.token_count(v_line);
            EXIT WHEN v_used + v_tok > v_turn_budget;
            v_used := v_used + v_tok;
            v_turns := v_t || v_turns;
            v_turn_hashes := v_turn_hashes || pgmem.content_hash(v_t.content);
            v_turn_ids := v_turn_ids || v_t.turn_id;
        END LOOP;
    END IF;
    -- Long-term memories by hybrid relevance, best first, each if it still fits; none repeats a turn shown,
    -- none is a consolidation of turns that are all shown.
    IF p_k > 0 AND p_query IS NOT NULL AND btrim(p_query) <> '' THEN
        FOR v_h IN SELECT * FROM pgmem.search_hybrid(p_space => p_space, p_query => p_query, p_embedding => p_embedding,
                                                     p_k => p_k, p_agent_id => p_agent_id, p_filter => p_filter, p_model => p_model) LOOP
            CONTINUE WHEN pgmem.content_hash(v_h.content) = ANY (v_turn_hashes);
            CONTINUE WHEN EXISTS (SELECT 1 FROM pgmem.memory_sources s WHERE s.user_id = v_user AND s.memory_id = v_h.id)
                      AND NOT EXISTS (SELECT 1 FROM pgmem.memory_sources s WHERE s.user_id = v_user AND s.memory_id = v_h.id
                                      AND s.turn_id <> ALL (v_turn_ids));
            v_line := format('[memory %s] %s', to_char(v_h.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), v_h.content);
            v_tok := pgmem.token_count(v_line);
            CONTINUE WHEN v_used + v_tok > p_budget_tokens;
            v_used := v_used + v_tok;
            v_mem_lines := v_mem_lines || v_line;
            v_mem_toks := v_mem_toks || v_tok;
            v_mem_hits := v_mem_hits || v_h;
        END LOOP;
    END IF;
    -- Prompt order: memories (most relevant first), then the conversation (oldest to newest).
    FOR i IN 1..coalesce(cardinality(v_mem_hits), 0) LOOP
        v_pos := v_pos + 1;
        "position" := v_pos; source := 'memory'; turn_id := NULL; memory_id := (v_mem_hits[i]).id; role := NULL;
        content := (v_mem_hits[i]).content; line := v_mem_lines[i]; tokens := v_mem_toks[i];
        score := (v_mem_hits[i]).score; created_at := (v_mem_hits[i]).created_at;
        RETURN NEXT;
    END LOOP;
    FOR i IN 1..coalesce(cardinality(v_turns), 0) LOOP
        v_pos := v_pos + 1;
        v_t := v_turns[i];
        "position" := v_pos; source := 'turn'; turn_id := v_t.turn_id; memory_id := NULL; role := v_t.role;
        content := v_t.content;
        line := format('[turn %s %s] %s', v_t.role, to_char(v_t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI'), v_t.content);
        tokens := pgmem.token_count(line); score := NULL; created_at := v_t.created_at;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem.context(text, text, text, vector, integer, integer, double precision, integer, text, jsonb, text) IS
    'What an agent puts in its prompt for a query: the most recent turns of the session (a contiguous tail, within p_turn_share of the budget, at most p_max_turns) and the most relevant long-term memories (pgmem.search_hybrid, k candidates) in the rest, each a labelled line ([memory YYYY-MM-DD] / [turn role YYYY-MM-DD HH:MI]). The sum of tokens (pgmem.token_count of each line) never exceeds p_budget_tokens; no memory repeats a turn shown or summarises only turns shown. Rows: memories by relevance, then turns oldest first.';

CREATE FUNCTION pgmem.clear_session(p_space text, p_session_id text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
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
