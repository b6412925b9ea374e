-- pgmem current schema, part 30: memories and their history. The tables keyed by user_id first, their
-- indexes, row-level security and triggers (content checks, full-text vector, the history log), the
-- memory type the API returns, and the helpers every read uses (_expiry, _to_memory, _memory_columns).

CREATE FUNCTION pgmem.content_hash(p_content text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$ SELECT pg_catalog.sha256(pg_catalog.convert_to(p_content, 'UTF8')) $$;
COMMENT ON FUNCTION pgmem.content_hash(text) IS 'SHA-256 of the UTF-8 bytes of a memory''s content: the deduplication key per user and space.';

CREATE FUNCTION pgmem.count_occurrences(p_haystack text, p_needle text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_count integer := 0;
    v_offset integer := 0;
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
        v_rest := substr(v_rest, v_pos + 1);
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION pgmem.count_occurrences(text, text) IS
    'How often p_needle occurs in p_haystack as literal, case-sensitive text, overlapping occurrences included (''aa'' in ''aaa'' is 2).';

-- STABLE, not IMMUTABLE: the planner does not inline a SQL function whose body is more volatile than its
-- declaration (timestamptz + interval is STABLE), and inlined it costs 0.6 us a row against 1.5 us called
-- (bench/FINDINGS.md S9). No index or constraint uses it (that would need IMMUTABLE). No SET search_path
-- either, which would also prevent inlining: its body names only pg_catalog's coalesce, timestamptz +
-- interval and the type timestamptz, which pg_catalog, searched first, always provides.
CREATE FUNCTION pgmem._expiry(p_expires_at timestamptz, p_created_at timestamptz, p_ttl interval) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT coalesce(p_expires_at, p_created_at + p_ttl, 'infinity'::pg_catalog.timestamptz) $$;
COMMENT ON FUNCTION pgmem._expiry(timestamptz, timestamptz, interval) IS
    'Internal: effective expiry of a memory or turn: its own expires_at, else created_at + the space''s TTL, else infinity.';

-- ---------------------------------------------------------------------------------------------------------
-- Memories: one row per fact, keyed by user_id (the tenant) first
-- ---------------------------------------------------------------------------------------------------------
-- Write order of memories: orders the turns of a session whose created_at are equal (imports).
CREATE SEQUENCE pgmem.memories_seq AS bigint;
COMMENT ON SEQUENCE pgmem.memories_seq IS 'Write order of memories (ties of created_at within a session).';

-- A memory holds from valid_from until valid_to (NULL: still holds). Superseding closes the old memory's
-- validity and links it to its successor; nothing is deleted. It is live until its expiry (_expiry).
CREATE TABLE pgmem.memories (
    user_id       text        NOT NULL,
    id            uuid        NOT NULL DEFAULT gen_random_uuid(),
    space_id      integer     NOT NULL,
    agent_id      text,
    session_id    text,
    content       text        NOT NULL,
    content_hash  bytea       NOT NULL GENERATED ALWAYS AS (pgmem.content_hash(content)) STORED,
    embedding     @vector@.vector NOT NULL,
    metadata      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    version       integer     NOT NULL DEFAULT 1,
    seq           bigint      NOT NULL DEFAULT nextval('pgmem.memories_seq'),
    fts           tsvector    NOT NULL DEFAULT ''::tsvector,
    fts_len       integer     NOT NULL DEFAULT 0,
    valid_from    timestamptz NOT NULL,
    valid_to      timestamptz,
    superseded_by uuid,
    CONSTRAINT memories_pkey PRIMARY KEY (user_id, id),
    CONSTRAINT memories_space_fkey FOREIGN KEY (space_id) REFERENCES pgmem.spaces (space_id),
    CONSTRAINT memories_user_id_check CHECK (user_id <> '' AND length(user_id) <= 256),
    CONSTRAINT memories_agent_id_check CHECK (length(agent_id) <= 256),
    CONSTRAINT memories_session_id_check CHECK (length(session_id) <= 256),
    CONSTRAINT memories_content_check CHECK (char_length(content) BETWEEN 1 AND 100000),
    CONSTRAINT memories_metadata_check CHECK (jsonb_typeof(metadata) = 'object'),
    CONSTRAINT memories_validity_check CHECK (valid_to IS NULL OR valid_to >= valid_from),
    CONSTRAINT memories_superseded_by_check CHECK (superseded_by IS NULL OR valid_to IS NOT NULL)
);
ALTER SEQUENCE pgmem.memories_seq OWNED BY pgmem.memories.seq;
COMMENT ON TABLE pgmem.memories IS
    'Long-term memories, one row per fact, keyed by user_id (the tenant) first. Row-level security limits every role to its own user''s rows.';
COMMENT ON COLUMN pgmem.memories.expires_at IS
    'When the memory expires (invisible at once, removed by pgmem.purge); NULL: the space''s memory_ttl after created_at, if any.';
COMMENT ON COLUMN pgmem.memories.fts IS
    'Full-text vector of content plus the day it was made (''8 May 2023'', UTC), in the space''s text search configuration; kept by trigger.';
COMMENT ON COLUMN pgmem.memories.fts_len IS 'Number of tokens in fts: the document length for BM25.';
COMMENT ON COLUMN pgmem.memories.valid_from IS 'When the fact starts to hold (valid time); default created_at.';
COMMENT ON COLUMN pgmem.memories.valid_to IS 'When the fact stopped holding (superseded or invalidated); NULL while it holds.';
COMMENT ON COLUMN pgmem.memories.superseded_by IS 'The memory that replaced this one (pgmem.supersede); NULL otherwise.';

CREATE INDEX memories_user_space_created_idx ON pgmem.memories (user_id, space_id, created_at, id);
CREATE INDEX memories_user_agent_idx ON pgmem.memories (user_id, agent_id);
CREATE INDEX memories_user_session_idx ON pgmem.memories (user_id, session_id, created_at, seq);
CREATE INDEX memories_fts_idx ON pgmem.memories USING gin (fts);
-- Identical content is stored once among the memories that still hold; a superseded or invalidated
-- memory no longer blocks the same content from being added again.
CREATE UNIQUE INDEX memories_content_key ON pgmem.memories (user_id, space_id, content_hash) WHERE valid_to IS NULL;
CREATE INDEX memories_user_superseded_by_idx ON pgmem.memories (user_id, superseded_by) WHERE superseded_by IS NOT NULL;
CREATE INDEX memories_expires_at_idx ON pgmem.memories (expires_at) WHERE expires_at IS NOT NULL;
-- Keyed memories (pgmem.put_keyed, get_keyed): the key in metadata "pgmem:key"; only rows that have one.
CREATE INDEX memories_user_key_idx ON pgmem.memories (user_id, space_id, (metadata ->> 'pgmem:key')) WHERE metadata ? 'pgmem:key';
-- Each space adds its partial HNSW index here (pgmem.create_space, 20-spaces.sql).

-- Row-level security, forced on the owner too: every role sees its own user's rows only.
ALTER TABLE pgmem.memories ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memories FORCE ROW LEVEL SECURITY;
CREATE POLICY memories_tenant ON pgmem.memories
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

-- ---------------------------------------------------------------------------------------------------------
-- History: append-only, written by trigger only
-- ---------------------------------------------------------------------------------------------------------
CREATE TABLE pgmem.history (
    user_id         text        NOT NULL,
    event_id        bigint      GENERATED ALWAYS AS IDENTITY,
    memory_id       uuid        NOT NULL,
    event           text        NOT NULL,
    old_content     text,
    new_content     text,
    old_metadata    jsonb,
    new_metadata    jsonb,
    actor_agent_id  text,
    actor_role      name        NOT NULL DEFAULT session_user,
    created_at      timestamptz NOT NULL DEFAULT now(),
    related_id      uuid,
    CONSTRAINT history_pkey PRIMARY KEY (user_id, event_id),
    CONSTRAINT history_event_check
        CHECK (event IN ('ADD', 'UPDATE', 'EDIT', 'DELETE', 'SUPERSEDE', 'INVALIDATE', 'EXPIRE'))
);
COMMENT ON TABLE pgmem.history IS
    'Append-only log of every change to a memory (ADD, UPDATE, EDIT, DELETE, SUPERSEDE, INVALIDATE, EXPIRE) with old and new content and metadata, actor and time. Written only by trigger. EXPIRE is a tombstone without content: pgmem.purge removes the other events of an expired memory.';
COMMENT ON COLUMN pgmem.history.related_id IS 'SUPERSEDE: the memory that replaced this one.';
CREATE INDEX history_user_memory_idx ON pgmem.history (user_id, memory_id, event_id);
-- The tombstones pgmem.purge looks for.
CREATE INDEX history_expire_idx ON pgmem.history (user_id, memory_id) WHERE event = 'EXPIRE';

ALTER TABLE pgmem.history ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.history FORCE ROW LEVEL SECURITY;
CREATE POLICY history_tenant ON pgmem.history
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

-- ---------------------------------------------------------------------------------------------------------
-- Extra vectors of a memory, written by the client with the memory: one per sentence of a long memory
-- ('sentence') and one of the memory with the previous memory of its session ('context'). Hybrid search
-- scores a memory by its best sentence and by its context. Replaced whenever the content changes.
-- ---------------------------------------------------------------------------------------------------------
CREATE TABLE pgmem.memory_vectors (
    user_id     text     NOT NULL,
    memory_id   uuid     NOT NULL,
    n           smallint NOT NULL,
    kind        text     NOT NULL,
    embedding   @vector@.vector NOT NULL,
    CONSTRAINT memory_vectors_pkey PRIMARY KEY (user_id, memory_id, n),
    CONSTRAINT memory_vectors_memory_fkey FOREIGN KEY (user_id, memory_id)
        REFERENCES pgmem.memories (user_id, id) ON DELETE CASCADE,
    CONSTRAINT memory_vectors_kind_check CHECK (kind IN ('sentence', 'context'))
);
COMMENT ON TABLE pgmem.memory_vectors IS
    'Extra embeddings of a memory (per sentence, and with its session''s previous memory as context), same space and dims as the memory; deleted with it and replaced when its content changes.';
ALTER TABLE pgmem.memory_vectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memory_vectors FORCE ROW LEVEL SECURITY;
CREATE POLICY memory_vectors_tenant ON pgmem.memory_vectors
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

-- ---------------------------------------------------------------------------------------------------------
-- The text side's index, kept by the write path (trigger memories_terms_*, in the memory's own transaction): one
-- posting per lexeme of each memory that holds (valid_to IS NULL), with its term frequency, the memory's length
-- and an impact (its BM25 term weight at a reference length, pgmem._term_impact) that orders a term's postings;
-- and per user and space the statistics BM25 needs, kept with them: the number of memories and their total
-- length (lexeme ''), and each lexeme's document frequency. Hybrid search of a large user reads the query
-- terms' postings impact-first and stops as soon as no unread posting can enter its pool (pgmem._text_top):
-- a GIN index cannot serve a tenant under row-level security (@@ is not leakproof, bench/FINDINGS.md H4),
-- a B-tree led by user_id can. Expired memories stay indexed until pgmem.purge removes them (search filters
-- them); superseded and invalidated ones leave at once.
-- ---------------------------------------------------------------------------------------------------------
CREATE TABLE pgmem.memory_terms (
    user_id    text     NOT NULL,
    memory_id  uuid     NOT NULL,
    lexeme     text     NOT NULL,
    space_id   integer  NOT NULL,
    tf         real     NOT NULL,
    dl         integer  NOT NULL,
    impact     real     NOT NULL,
    CONSTRAINT memory_terms_pkey PRIMARY KEY (user_id, memory_id, lexeme)
);
COMMENT ON TABLE pgmem.memory_terms IS
    'Postings of the text side: one row per lexeme of each memory that holds (tf its occurrences, dl the memory''s fts_len, impact its BM25 term weight at the reference length, pgmem._term_impact); kept by the memories triggers in the same transaction, removed with the memory.';
CREATE INDEX memory_terms_impact_idx ON pgmem.memory_terms (user_id, space_id, lexeme, impact DESC, memory_id)
    INCLUDE (tf, dl);
ALTER TABLE pgmem.memory_terms ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memory_terms FORCE ROW LEVEL SECURITY;
CREATE POLICY memory_terms_tenant ON pgmem.memory_terms
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

CREATE TABLE pgmem.term_stats (
    user_id    text     NOT NULL,
    space_id   integer  NOT NULL,
    lexeme     text     NOT NULL,
    docs       bigint   NOT NULL,
    total_len  bigint   NOT NULL,
    CONSTRAINT term_stats_pkey PRIMARY KEY (user_id, space_id, lexeme)
);
COMMENT ON TABLE pgmem.term_stats IS
    'BM25 statistics of a user''s memories that hold, per space: lexeme  holds the number of memories (docs) and their total length (total_len, in fts tokens); any other lexeme its document frequency (docs) and total occurrences. Kept by the memories triggers in the same transaction; the  row is written first, so one user''s concurrent writers queue on it (no deadlock), other users never meet.';
ALTER TABLE pgmem.term_stats ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.term_stats FORCE ROW LEVEL SECURITY;
CREATE POLICY term_stats_tenant ON pgmem.term_stats
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

-- ---------------------------------------------------------------------------------------------------------
-- Result row type shared by get, list, search, update, edit, supersede
-- ---------------------------------------------------------------------------------------------------------
CREATE TYPE pgmem.memory AS (
    id            uuid,
    user_id       text,
    space         text,
    agent_id      text,
    session_id    text,
    content       text,
    metadata      jsonb,
    created_at    timestamptz,
    updated_at    timestamptz,
    expires_at    timestamptz,
    version       integer,
    similarity    double precision,
    valid_from    timestamptz,
    valid_to      timestamptz,
    superseded_by uuid
);
COMMENT ON TYPE pgmem.memory IS 'A memory as the API returns it; similarity (cosine, in [-1, 1]) is set by search only; expires_at is the effective expiry (own, else created_at + the space''s memory_ttl); valid_from, valid_to, superseded_by its validity.';

-- Times every client reads back: a timestamptz holds years up to 294276, but Python's datetime (psycopg, the
-- service, the dashboard) ends with year 9999 and starts with year 1, so one row past either end made every
-- later read of its user's rows fail (list, stats, the dashboard's page of every user). The bounds leave a day
-- on each side, so the time is readable in any time zone (UTC-12 to UTC+14). 'infinity' (never) is allowed
-- where it means something: an expiry.
CREATE FUNCTION pgmem._check_time(p_value timestamptz, p_field text, p_infinity_ok boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF p_value IS NOT NULL AND NOT (p_value >= '0001-01-02 00:00:00+00' AND p_value < '9999-12-31 00:00:00+00')
       AND NOT (p_infinity_ok AND p_value = 'infinity') THEN
        RAISE EXCEPTION '% % is not between 0001-01-02 and 9999-12-31 (UTC), the times every client can read back', p_field, p_value
            USING ERRCODE = 'PGM08';
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._check_time(timestamptz, text, boolean) IS
    'Internal (the memories write trigger, append_turn, import_user''s turns): refuses a time outside 0001-01-02 .. 9999-12-31 UTC, which a client''s datetime cannot hold in every time zone (''infinity'' allowed when p_infinity_ok: an expiry that never comes). PGM08.';

-- Checks every write, from the API or from plain SQL: dimension count of the space, no zero vector,
-- identity columns fixed, a new embedding whenever content changes; times a client can read back
-- (pgmem._check_time); keeps version and updated_at.
CREATE FUNCTION pgmem._memories_before_write() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_space pgmem.spaces;
BEGIN
    -- Sizes first, before the full-text vector of a huge text is built (the CHECK constraints run after this).
    IF char_length(NEW.content) > 100000 THEN
        RAISE EXCEPTION 'content has % characters; the limit is 100000', char_length(NEW.content) USING ERRCODE = 'PGM08';
    END IF;
    IF (TG_OP = 'INSERT' OR NEW.metadata IS DISTINCT FROM OLD.metadata) AND octet_length(NEW.metadata::text) > 65536 THEN
        RAISE EXCEPTION 'metadata is % bytes as JSON; the limit is 65536', octet_length(NEW.metadata::text) USING ERRCODE = 'PGM08';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF NEW.user_id <> OLD.user_id OR NEW.id <> OLD.id OR NEW.space_id <> OLD.space_id THEN
            RAISE EXCEPTION 'a memory''s user_id, id and space cannot change' USING ERRCODE = 'PGM08';
        END IF;
        IF NEW.content IS DISTINCT FROM OLD.content AND NEW.embedding OPERATOR(@vector@.=) OLD.embedding THEN
            RAISE EXCEPTION 'content of memory % changed without a new embedding', OLD.id
                USING ERRCODE = 'PGM08', HINT = 'Pass the embedding of the new content in the same statement.';
        END IF;
        NEW.version := OLD.version + 1;
        NEW.updated_at := now();
        NEW.created_at := OLD.created_at;
        NEW.seq := OLD.seq;
        NEW.valid_from := coalesce(NEW.valid_from, OLD.valid_from);
        IF NEW.content IS NOT DISTINCT FROM OLD.content THEN
            NEW.fts := OLD.fts;
            NEW.fts_len := OLD.fts_len;
        END IF;
        IF NEW.expires_at IS DISTINCT FROM OLD.expires_at THEN
            PERFORM pgmem._check_time(NEW.expires_at, 'expires_at', true);
        END IF;
        IF NEW.valid_from IS DISTINCT FROM OLD.valid_from OR NEW.valid_to IS DISTINCT FROM OLD.valid_to THEN
            PERFORM pgmem._check_time(NEW.valid_from, 'valid_from');
            PERFORM pgmem._check_time(NEW.valid_to, 'valid_to');
        END IF;
        IF NEW.embedding OPERATOR(@vector@.=) OLD.embedding THEN
            RETURN NEW;
        END IF;
    ELSE
        NEW.valid_from := coalesce(NEW.valid_from, NEW.created_at);
        PERFORM pgmem._check_time(NEW.created_at, 'created_at');
        -- A memory is valid from its creation: one made in the future would hold for nobody until then, hidden
        -- from list and search while its content already blocks adding it again (5 minutes of clock skew allowed).
        IF NEW.created_at > now() + interval '5 minutes' THEN
            RAISE EXCEPTION 'created_at % is in the future', NEW.created_at USING ERRCODE = 'PGM08',
                HINT = 'A memory holds from its created_at; a time more than 5 minutes ahead of the server''s clock is refused.';
        END IF;
        PERFORM pgmem._check_time(NEW.expires_at, 'expires_at', true);
        PERFORM pgmem._check_time(NEW.valid_from, 'valid_from');
        PERFORM pgmem._check_time(NEW.valid_to, 'valid_to');
    END IF;
    SELECT * INTO v_space FROM pgmem.spaces s WHERE s.space_id = NEW.space_id;
    IF TG_OP = 'INSERT' OR NEW.content IS DISTINCT FROM OLD.content THEN
        NEW.fts := to_tsvector(v_space.text_config, NEW.content)
                   || to_tsvector(v_space.text_config, to_char(NEW.created_at AT TIME ZONE 'UTC', 'FMDD FMMonth YYYY'));
        NEW.fts_len := (SELECT coalesce(sum(coalesce(array_length(x.positions, 1), 1)), 0) FROM unnest(NEW.fts) x);
    END IF;
    IF @vector@.vector_dims(NEW.embedding) <> v_space.dims THEN
        RAISE EXCEPTION 'expected % dimensions, got % (space "%", model "%")',
            v_space.dims, @vector@.vector_dims(NEW.embedding), v_space.name, v_space.model USING ERRCODE = 'PGM02';
    END IF;
    IF @vector@.vector_norm(NEW.embedding) = 0 OR (NEW.embedding OPERATOR(@vector@.<=>) NEW.embedding) = 'NaN'::float8 THEN
        RAISE EXCEPTION 'a zero vector (or one whose float4 squared norm underflows or overflows) has no cosine similarity' USING ERRCODE = 'PGM08';
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION pgmem._memories_before_write() IS 'Trigger: validates a memory row (sizes, dimensions, times a client can read back), keeps version, updated_at and the full-text vector.';

-- pgmem.event (transaction-local, set by the API functions): UPDATE, EDIT, SUPERSEDE, INVALIDATE for updates;
-- EXPIRE for the removal of an expired memory (a tombstone without content); ERASE writes nothing at all.
CREATE FUNCTION pgmem._memories_history() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
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
$$;
COMMENT ON FUNCTION pgmem._memories_history() IS
    'Trigger: appends the history event of every write to memories (ADD; UPDATE, EDIT, SUPERSEDE, INVALIDATE; DELETE, or EXPIRE for a row already expired). The event is read off the row; the actor is trusted only from the API functions (running as pgmem_api). Runs as the writer.';

CREATE FUNCTION pgmem._history_append_only() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'pgmem.history is append-only' USING ERRCODE = 'PGM08';
END
$$;
COMMENT ON FUNCTION pgmem._history_append_only() IS 'Trigger: refuses any UPDATE of history rows.';

CREATE FUNCTION pgmem._memory_vectors_before_insert() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_dims integer;
BEGIN
    SELECT s.dims INTO v_dims FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
    WHERE m.user_id = NEW.user_id AND m.id = NEW.memory_id;
    IF @vector@.vector_dims(NEW.embedding) <> v_dims THEN
        RAISE EXCEPTION 'expected % dimensions, got % (extra vector of memory %)', v_dims, @vector@.vector_dims(NEW.embedding), NEW.memory_id
            USING ERRCODE = 'PGM02';
    END IF;
    IF @vector@.vector_norm(NEW.embedding) = 0 OR (NEW.embedding OPERATOR(@vector@.<=>) NEW.embedding) = 'NaN'::float8 THEN
        RAISE EXCEPTION 'a zero vector (or one whose float4 squared norm underflows or overflows) has no cosine similarity' USING ERRCODE = 'PGM08';
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION pgmem._memory_vectors_before_insert() IS 'Trigger: an extra vector has its memory''s dimensions and a cosine similarity.';

CREATE FUNCTION pgmem._to_memory(
    m pgmem.memories,
    p_space text,
    p_similarity double precision,
    p_ttl interval
) RETURNS pgmem.memory
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT ROW(m.id, m.user_id, p_space, m.agent_id, m.session_id, m.content, m.metadata,
               m.created_at, m.updated_at, nullif(pgmem._expiry(m.expires_at, m.created_at, p_ttl), 'infinity'),
               m.version, p_similarity, m.valid_from, m.valid_to, m.superseded_by)::pgmem.memory
$$;
COMMENT ON FUNCTION pgmem._to_memory(pgmem.memories, text, double precision, interval) IS
    'Internal: a memories row as the API''s pgmem.memory; p_ttl is its space''s memory_ttl (for the effective expires_at). Inlined by the planner.';

-- The same columns as SQL text for the dynamic queries of search and list. Planning (pgmem._to_memory(m)).*
-- inlines the function once per column (1.2 of 1.5 ms of planning for a 10-row search); plain columns do not.
CREATE FUNCTION pgmem._memory_columns(p_space_ref text, p_similarity text, p_ttl interval) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT format('m.id, m.user_id, %1$s, m.agent_id, m.session_id, m.content, m.metadata, m.created_at, m.updated_at,'
                  ' nullif(pgmem._expiry(m.expires_at, m.created_at, %3$L::interval), ''infinity''), m.version,'
                  ' (%2$s)::double precision, m.valid_from, m.valid_to, m.superseded_by', p_space_ref, p_similarity, p_ttl)
$$;
COMMENT ON FUNCTION pgmem._memory_columns(text, text, interval) IS
    'Internal: the select list of a pgmem.memory over alias m (space name and similarity as SQL expressions), for dynamic queries.';

-- A posting's impact: the BM25 term weight (k1 1.2, b 0.5, pgmem._hybrid_formula) of p_tf occurrences in a memory
-- of p_dl tokens at the reference average length 20. Only an order and a bound: for a user whose average length
-- is A, the weight is at most impact * max(1, A / 20) (pgmem._text_top relies on it).
CREATE FUNCTION pgmem._term_impact(p_tf double precision, p_dl double precision) RETURNS real
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT (p_tf * 2.2 / (p_tf + 1.2 * (0.5 + 0.5 * p_dl / 20.0)))::real
$$;
COMMENT ON FUNCTION pgmem._term_impact(double precision, double precision) IS
    'Internal: the impact of a posting (pgmem.memory_terms): BM25''s term weight of p_tf occurrences in p_dl tokens at the reference average length 20 (k1 1.2, b 0.5).';

-- Keeps pgmem.memory_terms and pgmem.term_stats with the memories, in the writing statement's transaction: a memory
-- that holds (valid_to IS NULL) is indexed; one that is deleted, superseded or invalidated, or whose content
-- changes, leaves (and re-enters with its new text). One statement-level trigger per operation, over its transition
-- tables: the statistics change once per user, space and lexeme per statement (a row trigger updated a user's row
-- once per memory, and PostgreSQL follows a row's chain of versions within a transaction on every update: a
-- 30,000-row INSERT took minutes). The statistics rows of a statement in (user, space, lexeme) order, the user's
-- '' row first: two writers of one user queue on that row instead of deadlocking. Runs as the writer, under the
-- tables' row-level security, as the history trigger does. No temporary table: the writer's session could have
-- planted one of that name.
CREATE FUNCTION pgmem._memories_terms() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    -- the statement's memories whose postings change: +1 entering, -1 leaving
    v_user text[]; v_id uuid[]; v_space integer[]; v_fts tsvector[]; v_len integer[]; v_sign integer[];
BEGIN
    -- On a Citus cluster the trigger fires on each shard (memories_<shard id>), whose statement could write the
    -- distributed postings only by COPY, which row-level security refuses: the postings are a single server's,
    -- and hybrid search of a large user on a cluster ranks its text pool by ts_rank (pgmem.search_hybrid).
    IF TG_TABLE_NAME <> 'memories' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.user_id), array_agg(n.id), array_agg(n.space_id), array_agg(n.fts), array_agg(n.fts_len),
               array_agg(1)
        INTO v_user, v_id, v_space, v_fts, v_len, v_sign
        FROM pgmem_new_rows n WHERE n.valid_to IS NULL;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(o.user_id), array_agg(o.id), array_agg(o.space_id), array_agg(o.fts), array_agg(o.fts_len),
               array_agg(-1)
        INTO v_user, v_id, v_space, v_fts, v_len, v_sign
        FROM pgmem_old_rows o WHERE o.valid_to IS NULL;
    ELSE
        SELECT array_agg(c.user_id), array_agg(c.id), array_agg(c.space_id), array_agg(c.fts), array_agg(c.fts_len),
               array_agg(c.sign)
        INTO v_user, v_id, v_space, v_fts, v_len, v_sign
        FROM (SELECT o.user_id, o.id, o.space_id, o.fts, o.fts_len, -1 AS sign
              FROM pgmem_old_rows o JOIN pgmem_new_rows n ON n.user_id = o.user_id AND n.id = o.id
              WHERE o.valid_to IS NULL AND (n.valid_to IS NOT NULL OR n.fts IS DISTINCT FROM o.fts)
              UNION ALL
              SELECT n.user_id, n.id, n.space_id, n.fts, n.fts_len, 1
              FROM pgmem_old_rows o JOIN pgmem_new_rows n ON n.user_id = o.user_id AND n.id = o.id
              WHERE n.valid_to IS NULL AND (o.valid_to IS NOT NULL OR n.fts IS DISTINCT FROM o.fts)) c;
    END IF;
    IF v_id IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO pgmem.term_stats AS s (user_id, space_id, lexeme, docs, total_len)
    SELECT c.user_id, c.space_id, c.lexeme, c.docs, c.total_len FROM (
        SELECT d.user_id, d.space_id, ''::text AS lexeme, sum(d.sign) AS docs, sum(d.sign * d.len) AS total_len
        FROM unnest(v_user, v_space, v_len, v_sign) AS d(user_id, space_id, len, sign) GROUP BY d.user_id, d.space_id
        UNION ALL
        SELECT d.user_id, d.space_id, x.lexeme, sum(d.sign), sum(d.sign * coalesce(array_length(x.positions, 1), 1))
        FROM unnest(v_user, v_space, v_fts, v_sign) AS d(user_id, space_id, fts, sign)
        CROSS JOIN LATERAL unnest(d.fts) x GROUP BY d.user_id, d.space_id, x.lexeme) c
    ORDER BY c.user_id, c.space_id, c.lexeme
    ON CONFLICT (user_id, space_id, lexeme) DO UPDATE
        SET docs = s.docs + EXCLUDED.docs, total_len = s.total_len + EXCLUDED.total_len;
    DELETE FROM pgmem.memory_terms t USING unnest(v_user, v_id, v_sign) AS d(user_id, id, sign)
    WHERE d.sign < 0 AND t.user_id = d.user_id AND t.memory_id = d.id;
    INSERT INTO pgmem.memory_terms (user_id, memory_id, lexeme, space_id, tf, dl, impact)
    SELECT d.user_id, d.id, x.lexeme, d.space_id, x.tf, d.len, pgmem._term_impact(x.tf, d.len)
    FROM unnest(v_user, v_id, v_space, v_fts, v_len, v_sign) AS d(user_id, id, space_id, fts, len, sign)
    CROSS JOIN LATERAL (SELECT x.lexeme, coalesce(array_length(x.positions, 1), 1) AS tf FROM unnest(d.fts) x) x
    WHERE d.sign > 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION pgmem._memories_terms() IS
    'Trigger (statement level, over the transition tables pgmem_new_rows / pgmem_old_rows): keeps the postings (pgmem.memory_terms) and BM25 statistics (pgmem.term_stats) of the memories that hold, in the write''s transaction; a deleted, superseded or invalidated memory, or old content, leaves them. Runs as the writer.';

-- ---------------------------------------------------------------------------------------------------------
-- Triggers (their functions are above)
-- ---------------------------------------------------------------------------------------------------------
CREATE TRIGGER memories_before_write BEFORE INSERT OR UPDATE ON pgmem.memories
    FOR EACH ROW EXECUTE FUNCTION pgmem._memories_before_write();
CREATE TRIGGER memories_history AFTER INSERT OR UPDATE OR DELETE ON pgmem.memories
    FOR EACH ROW EXECUTE FUNCTION pgmem._memories_history();
CREATE TRIGGER history_append_only BEFORE UPDATE ON pgmem.history
    FOR EACH ROW EXECUTE FUNCTION pgmem._history_append_only();
CREATE TRIGGER memory_vectors_before_insert BEFORE INSERT ON pgmem.memory_vectors
    FOR EACH ROW EXECUTE FUNCTION pgmem._memory_vectors_before_insert();
CREATE TRIGGER memories_terms_insert AFTER INSERT ON pgmem.memories
    REFERENCING NEW TABLE AS pgmem_new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgmem._memories_terms();
CREATE TRIGGER memories_terms_update AFTER UPDATE ON pgmem.memories
    REFERENCING OLD TABLE AS pgmem_old_rows NEW TABLE AS pgmem_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem._memories_terms();
CREATE TRIGGER memories_terms_delete AFTER DELETE ON pgmem.memories
    REFERENCING OLD TABLE AS pgmem_old_rows FOR EACH STATEMENT EXECUTE FUNCTION pgmem._memories_terms();
