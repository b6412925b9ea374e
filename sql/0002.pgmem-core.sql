-- pgmem core: roles, schema, tables keyed by user_id, row-level security, history, stored functions
-- depends: 0001.pgmem-vector-extension

-- ---------------------------------------------------------------------------------------------------------
-- Roles (cluster-wide, so created only when missing). pgmem_agent: runtime, no DDL, no RLS bypass.
-- pgmem_gateway: a trusted service that names the user it acts for, per transaction (pgmem.act_as).
-- Objects are owned by the role that runs this migration: the schema owner.
-- ---------------------------------------------------------------------------------------------------------
DO $pgmem$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_agent') THEN
        CREATE ROLE pgmem_agent NOLOGIN NOINHERIT NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_gateway') THEN
        CREATE ROLE pgmem_gateway NOLOGIN NOBYPASSRLS;
    END IF;
    -- Only when missing: granting a role needs ADMIN on it, which a non-superuser schema owner lacks.
    IF NOT pg_has_role('pgmem_gateway', 'pgmem_agent', 'MEMBER') THEN
        GRANT pgmem_agent TO pgmem_gateway;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE EXCEPTION 'pgmem needs the roles pgmem_agent and pgmem_gateway, pgmem_agent granted to pgmem_gateway, and role "%" may not create them', current_user
        USING ERRCODE = 'PGM00',
              HINT = 'Ask a DBA to run: CREATE ROLE pgmem_agent NOLOGIN NOINHERIT NOBYPASSRLS; '
                     || 'CREATE ROLE pgmem_gateway NOLOGIN NOBYPASSRLS; GRANT pgmem_agent TO pgmem_gateway;';
END
$pgmem$;

-- Load pgvector's library in this session, so that hnsw.* below are its real settings, not placeholders.
DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;

CREATE SCHEMA pgmem;
COMMENT ON SCHEMA pgmem IS 'pgmem: shared, durable memory for AI agents. The API is the functions in this schema; see \df+ pgmem.*';
REVOKE ALL ON SCHEMA pgmem FROM PUBLIC;
GRANT USAGE ON SCHEMA pgmem TO pgmem_agent, pgmem_gateway;

-- ---------------------------------------------------------------------------------------------------------
-- Identity
-- ---------------------------------------------------------------------------------------------------------
CREATE TABLE pgmem.role_bindings (
    role_name   name        NOT NULL,
    user_id     text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT role_bindings_pkey PRIMARY KEY (role_name),
    CONSTRAINT role_bindings_user_id_check CHECK (user_id <> '' AND length(user_id) <= 256)
);
COMMENT ON TABLE pgmem.role_bindings IS
    'Login roles bound to one pgmem user (tenant). A bound login always acts as that user, whatever it sets. Readable only by the schema owner.';
REVOKE ALL ON pgmem.role_bindings FROM PUBLIC;

-- The identity of this statement: the user a bound login is bound to; otherwise, for members of
-- pgmem_gateway (superusers included), the transaction's pgmem.user_id setting; otherwise NULL (no rows).
-- session_user, not current_user: SET ROLE cannot change it, so a bound agent cannot shed its binding.
CREATE FUNCTION pgmem.current_user_id() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pgmem
AS $$
    SELECT coalesce(
        (SELECT b.user_id FROM pgmem.role_bindings b WHERE b.role_name = session_user),
        CASE WHEN NOT EXISTS (SELECT 1 FROM pgmem.role_bindings b WHERE b.role_name = session_user)
                  AND pg_has_role(session_user, 'pgmem_gateway', 'MEMBER')
             THEN nullif(current_setting('pgmem.user_id', true), '')
        END)
$$;
COMMENT ON FUNCTION pgmem.current_user_id() IS
    'The pgmem user (tenant) this statement acts for: the binding of a bound login role, else pgmem.user_id for gateway members, else NULL (sees no rows).';

CREATE FUNCTION pgmem._require_user() RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_user text := pgmem.current_user_id();
BEGIN
    IF v_user IS NULL THEN
        RAISE EXCEPTION 'no pgmem identity: this login is not bound to a user and no user was named'
            USING ERRCODE = 'PGM01',
                  HINT = 'A gateway runs SELECT pgmem.act_as(''<user id>'') in the transaction; an agent login is bound with pgmem.bind_role().';
    END IF;
    RETURN v_user;
END
$$;
COMMENT ON FUNCTION pgmem._require_user() IS 'Internal: the current pgmem user, or error PGM01 when none is set.';

CREATE FUNCTION pgmem.act_as(p_user_id text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem
AS $$
DECLARE
    v_bound text;
BEGIN
    IF p_user_id IS NULL OR p_user_id = '' OR length(p_user_id) > 256 THEN
        RAISE EXCEPTION 'user id must be a non-empty text of at most 256 characters' USING ERRCODE = 'PGM08';
    END IF;
    SELECT b.user_id INTO v_bound FROM pgmem.role_bindings b WHERE b.role_name = session_user;
    IF v_bound IS NOT NULL THEN
        IF v_bound <> p_user_id THEN
            RAISE EXCEPTION 'login role "%" is bound to one pgmem user and cannot act as another', session_user
                USING ERRCODE = 'PGM01';
        END IF;
        RETURN v_bound;
    END IF;
    IF NOT pg_has_role(session_user, 'pgmem_gateway', 'MEMBER') THEN
        RAISE EXCEPTION 'login role "%" may not name the user it acts for', session_user
            USING ERRCODE = 'PGM01',
                  HINT = 'Grant pgmem_gateway to a trusted service login, or bind an agent login with pgmem.bind_role().';
    END IF;
    PERFORM set_config('pgmem.user_id', p_user_id, true);
    RETURN p_user_id;
END
$$;
COMMENT ON FUNCTION pgmem.act_as(text) IS
    'Gateway roles: act for this user until the end of the transaction. Bound logins: succeeds only for their own user. Returns the user id.';

CREATE FUNCTION pgmem.bind_role(p_role name, p_user_id text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
        RAISE EXCEPTION 'role "%" does not exist', p_role USING ERRCODE = 'PGM03';
    END IF;
    INSERT INTO pgmem.role_bindings (role_name, user_id) VALUES (p_role, p_user_id)
    ON CONFLICT (role_name) DO UPDATE SET user_id = EXCLUDED.user_id, created_at = now();
END
$$;
COMMENT ON FUNCTION pgmem.bind_role(name, text) IS
    'Schema owner only: bind a login role to one pgmem user. The role must also be granted pgmem_agent.';

CREATE FUNCTION pgmem.unbind_role(p_role name) RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    WITH d AS (DELETE FROM pgmem.role_bindings WHERE role_name = p_role RETURNING 1) SELECT count(*) > 0 FROM d
$$;
COMMENT ON FUNCTION pgmem.unbind_role(name) IS 'Schema owner only: remove a login role''s binding. Returns whether one existed.';

-- ---------------------------------------------------------------------------------------------------------
-- Embedding spaces: one model, one dimension count, one HNSW index each
-- ---------------------------------------------------------------------------------------------------------
CREATE TABLE pgmem.spaces (
    space_id        integer     GENERATED ALWAYS AS IDENTITY,
    name            text        NOT NULL,
    model           text        NOT NULL,
    dims            integer     NOT NULL,
    distance        text        NOT NULL DEFAULT 'cosine',
    text_config     regconfig   NOT NULL DEFAULT 'english',
    index_kind      text        NOT NULL,
    hnsw_m          integer,
    hnsw_ef_construction integer,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT spaces_pkey PRIMARY KEY (space_id),
    CONSTRAINT spaces_name_key UNIQUE (name),
    CONSTRAINT spaces_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    CONSTRAINT spaces_model_check CHECK (model <> '' AND length(model) <= 200),
    CONSTRAINT spaces_dims_check CHECK (dims BETWEEN 1 AND 16000),
    CONSTRAINT spaces_distance_check CHECK (distance = 'cosine'),
    CONSTRAINT spaces_index_kind_check CHECK (index_kind IN ('hnsw_vector', 'hnsw_halfvec', 'exact'))
);
COMMENT ON TABLE pgmem.spaces IS
    'Embedding spaces: a name bound to one embedding model and dimension count. Each has its own partial HNSW index on memories (vector up to 2000 dims, halfvec up to 4000, exact scan above).';
REVOKE ALL ON pgmem.spaces FROM PUBLIC;
GRANT SELECT ON pgmem.spaces TO pgmem_agent;

CREATE FUNCTION pgmem.content_hash(p_content text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT pg_catalog.sha256(pg_catalog.convert_to(p_content, 'UTF8')) $$;
COMMENT ON FUNCTION pgmem.content_hash(text) IS 'SHA-256 of the UTF-8 bytes of a memory''s content: the deduplication key per user and space.';

-- ---------------------------------------------------------------------------------------------------------
-- Memories and their history
-- ---------------------------------------------------------------------------------------------------------
-- Write order of memories: orders the turns of a session whose created_at are equal (imports).
CREATE SEQUENCE pgmem.memories_seq AS bigint;
COMMENT ON SEQUENCE pgmem.memories_seq IS 'Write order of memories (ties of created_at within a session).';
GRANT USAGE ON SEQUENCE pgmem.memories_seq TO pgmem_agent;

CREATE TABLE pgmem.memories (
    user_id      text        NOT NULL,
    id           uuid        NOT NULL DEFAULT gen_random_uuid(),
    space_id     integer     NOT NULL,
    agent_id     text,
    session_id   text,
    content      text        NOT NULL,
    content_hash bytea       NOT NULL GENERATED ALWAYS AS (pgmem.content_hash(content)) STORED,
    embedding    vector      NOT NULL,
    metadata     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    version      integer     NOT NULL DEFAULT 1,
    seq          bigint      NOT NULL DEFAULT nextval('pgmem.memories_seq'),
    fts          tsvector    NOT NULL DEFAULT ''::tsvector,
    fts_len      integer     NOT NULL DEFAULT 0,
    CONSTRAINT memories_pkey PRIMARY KEY (user_id, id),
    CONSTRAINT memories_content_key UNIQUE (user_id, space_id, content_hash),
    CONSTRAINT memories_space_fkey FOREIGN KEY (space_id) REFERENCES pgmem.spaces (space_id),
    CONSTRAINT memories_user_id_check CHECK (user_id <> '' AND length(user_id) <= 256),
    CONSTRAINT memories_agent_id_check CHECK (length(agent_id) <= 256),
    CONSTRAINT memories_session_id_check CHECK (length(session_id) <= 256),
    CONSTRAINT memories_content_check CHECK (char_length(content) BETWEEN 1 AND 100000),
    CONSTRAINT memories_metadata_check CHECK (jsonb_typeof(metadata) = 'object')
);
COMMENT ON TABLE pgmem.memories IS
    'Long-term memories, one row per fact, keyed by user_id (the tenant) first. Row-level security limits every role to its own user''s rows.';
CREATE INDEX memories_user_space_created_idx ON pgmem.memories (user_id, space_id, created_at, id);
CREATE INDEX memories_user_agent_idx ON pgmem.memories (user_id, agent_id);
CREATE INDEX memories_user_session_idx ON pgmem.memories (user_id, session_id, created_at, seq);
CREATE INDEX memories_fts_idx ON pgmem.memories USING gin (fts);
ALTER SEQUENCE pgmem.memories_seq OWNED BY pgmem.memories.seq;
COMMENT ON COLUMN pgmem.memories.fts IS
    'Full-text vector of content plus the day it was made (''8 May 2023'', UTC), in the space''s text search configuration; kept by trigger.';
COMMENT ON COLUMN pgmem.memories.fts_len IS 'Number of tokens in fts: the document length for BM25.';
REVOKE ALL ON pgmem.memories FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON pgmem.memories TO pgmem_agent;

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
    CONSTRAINT history_pkey PRIMARY KEY (user_id, event_id),
    CONSTRAINT history_event_check CHECK (event IN ('ADD', 'UPDATE', 'EDIT', 'DELETE'))
);
COMMENT ON TABLE pgmem.history IS
    'Append-only log of every change to a memory (ADD, UPDATE, EDIT, DELETE) with old and new content and metadata, actor and time. Written only by trigger.';
CREATE INDEX history_user_memory_idx ON pgmem.history (user_id, memory_id, event_id);
REVOKE ALL ON pgmem.history FROM PUBLIC;
GRANT SELECT ON pgmem.history TO pgmem_agent;

ALTER TABLE pgmem.memories ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memories FORCE ROW LEVEL SECURITY;
CREATE POLICY memories_tenant ON pgmem.memories
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

ALTER TABLE pgmem.history ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.history FORCE ROW LEVEL SECURITY;
CREATE POLICY history_tenant ON pgmem.history
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

-- Extra vectors of a memory, written by the client with the memory: one per sentence of a long memory
-- ('sentence') and one of the memory with the previous memory of its session ('context'). Hybrid search
-- scores a memory by its best sentence and by its context. Replaced whenever the content changes.
CREATE TABLE pgmem.memory_vectors (
    user_id     text     NOT NULL,
    memory_id   uuid     NOT NULL,
    n           smallint NOT NULL,
    kind        text     NOT NULL,
    embedding   vector   NOT NULL,
    CONSTRAINT memory_vectors_pkey PRIMARY KEY (user_id, memory_id, n),
    CONSTRAINT memory_vectors_memory_fkey FOREIGN KEY (user_id, memory_id)
        REFERENCES pgmem.memories (user_id, id) ON DELETE CASCADE,
    CONSTRAINT memory_vectors_kind_check CHECK (kind IN ('sentence', 'context'))
);
COMMENT ON TABLE pgmem.memory_vectors IS
    'Extra embeddings of a memory (per sentence, and with its session''s previous memory as context), same space and dims as the memory; deleted with it and replaced when its content changes.';
REVOKE ALL ON pgmem.memory_vectors FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON pgmem.memory_vectors TO pgmem_agent;
ALTER TABLE pgmem.memory_vectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.memory_vectors FORCE ROW LEVEL SECURITY;
CREATE POLICY memory_vectors_tenant ON pgmem.memory_vectors
    USING (user_id = (SELECT pgmem.current_user_id()))
    WITH CHECK (user_id = (SELECT pgmem.current_user_id()));

-- Checks every write, from the API or from plain SQL: dimension count of the space, no zero vector,
-- identity columns fixed, a new embedding whenever content changes; keeps version and updated_at.
CREATE FUNCTION pgmem._memories_before_write() RETURNS trigger
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

CREATE FUNCTION pgmem._memory_vectors_before_insert() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgmem, public
AS $$
DECLARE
    v_dims integer;
BEGIN
    SELECT s.dims INTO v_dims FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
    WHERE m.user_id = NEW.user_id AND m.id = NEW.memory_id;
    IF vector_dims(NEW.embedding) <> v_dims THEN
        RAISE EXCEPTION 'expected % dimensions, got % (extra vector of memory %)', v_dims, vector_dims(NEW.embedding), NEW.memory_id
            USING ERRCODE = 'PGM02';
    END IF;
    IF vector_norm(NEW.embedding) = 0 OR (NEW.embedding <=> NEW.embedding) = 'NaN'::float8 THEN
        RAISE EXCEPTION 'a zero vector (or one whose float4 squared norm underflows or overflows) has no cosine similarity' USING ERRCODE = 'PGM08';
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION pgmem._memory_vectors_before_insert() IS 'Trigger: an extra vector has its memory''s dimensions and a cosine similarity.';
CREATE TRIGGER memory_vectors_before_insert BEFORE INSERT ON pgmem.memory_vectors
    FOR EACH ROW EXECUTE FUNCTION pgmem._memory_vectors_before_insert();
CREATE TRIGGER memories_before_write BEFORE INSERT OR UPDATE ON pgmem.memories
    FOR EACH ROW EXECUTE FUNCTION pgmem._memories_before_write();

-- History rows are written here and only here, as the schema owner: agents cannot forge or alter them.
-- The acting agent comes from pgmem.actor and the kind of update from pgmem.event, both set by the API
-- functions (transaction-local) and cleared again before they return.
CREATE FUNCTION pgmem._memories_history() RETURNS trigger
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
CREATE TRIGGER memories_history AFTER INSERT OR UPDATE OR DELETE ON pgmem.memories
    FOR EACH ROW EXECUTE FUNCTION pgmem._memories_history();

CREATE FUNCTION pgmem._history_append_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'pgmem.history is append-only' USING ERRCODE = 'PGM08';
END
$$;
COMMENT ON FUNCTION pgmem._history_append_only() IS 'Trigger: refuses any UPDATE of history rows.';
CREATE TRIGGER history_append_only BEFORE UPDATE ON pgmem.history
    FOR EACH ROW EXECUTE FUNCTION pgmem._history_append_only();

-- ---------------------------------------------------------------------------------------------------------
-- Spaces API
-- ---------------------------------------------------------------------------------------------------------
CREATE FUNCTION pgmem.create_space(
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

CREATE FUNCTION pgmem.space(p_name text) RETURNS pgmem.spaces
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_space pgmem.spaces;
BEGIN
    SELECT * INTO v_space FROM pgmem.spaces s WHERE s.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'embedding space "%" does not exist', p_name
            USING ERRCODE = 'PGM03', HINT = 'Create it with pgmem.create_space(name, model, dims) or `pgmem space create`.';
    END IF;
    RETURN v_space;
END
$$;
COMMENT ON FUNCTION pgmem.space(text) IS 'The embedding space of that name (error PGM03 when missing).';

-- Internal: the space, after checking a vector (and the caller's model, when given) against it.
CREATE FUNCTION pgmem._checked_space(p_space text, p_embedding vector, p_model text) RETURNS pgmem.spaces
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_space pgmem.spaces := pgmem.space(p_space);
BEGIN
    IF p_model IS NOT NULL AND p_model <> v_space.model THEN
        RAISE EXCEPTION 'space "%" holds embeddings of model "%", not "%"', v_space.name, v_space.model, p_model
            USING ERRCODE = 'PGM09', HINT = 'Embed with the space''s model, or use (create) a space for this model.';
    END IF;
    IF p_embedding IS NOT NULL THEN
        IF vector_dims(p_embedding) <> v_space.dims THEN
            RAISE EXCEPTION 'expected % dimensions, got % (space "%", model "%")',
                v_space.dims, vector_dims(p_embedding), v_space.name, v_space.model USING ERRCODE = 'PGM02';
        END IF;
        IF vector_norm(p_embedding) = 0 OR (p_embedding <=> p_embedding) = 'NaN'::float8 THEN
            RAISE EXCEPTION 'a zero vector (or one whose float4 squared norm underflows or overflows) has no cosine similarity' USING ERRCODE = 'PGM08';
        END IF;
    END IF;
    RETURN v_space;
END
$$;
COMMENT ON FUNCTION pgmem._checked_space(text, vector, text) IS 'Internal: look up a space and check an embedding''s dimensions, norm and model against it.';

-- ---------------------------------------------------------------------------------------------------------
-- Metadata filters, compiled to SQL whose only variable parts are $n[i] references: keys and values are
-- passed as parameters (text[] and jsonb[]), never written into the SQL text.
-- ---------------------------------------------------------------------------------------------------------
CREATE TYPE pgmem.compiled_filter AS (sql text, keys text[], vals jsonb[]);
COMMENT ON TYPE pgmem.compiled_filter IS 'Internal: a metadata filter compiled to SQL text plus its key and value parameters.';

CREATE FUNCTION pgmem._compile_filter(
    p_filter jsonb, p_keys_param integer, p_vals_param integer,
    p_acc pgmem.compiled_filter DEFAULT ROW('true', '{}', '{}')::pgmem.compiled_filter, p_depth integer DEFAULT 0
) RETURNS pgmem.compiled_filter
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_out pgmem.compiled_filter := ROW(NULL, coalesce(p_acc.keys, '{}'), coalesce(p_acc.vals, '{}'));
    v_parts text[] := '{}';
    v_key text;
    v_val jsonb;
    v_op text;
    v_arg jsonb;
    v_elem jsonb;
    v_sub pgmem.compiled_filter;
    v_subparts text[];
    v_field text;
    v_k text := '$' || p_keys_param;
    v_v text := '$' || p_vals_param;
    v_vref text;
BEGIN
    IF p_depth > 32 THEN
        RAISE EXCEPTION 'invalid filter: nested more than 32 levels deep' USING ERRCODE = 'PGM07';
    END IF;
    IF p_filter IS NULL OR p_filter = '{}'::jsonb THEN
        v_out.sql := 'true';
        RETURN v_out;
    END IF;
    IF jsonb_typeof(p_filter) <> 'object' THEN
        RAISE EXCEPTION 'invalid filter: expected a JSON object, got %', jsonb_typeof(p_filter) USING ERRCODE = 'PGM07';
    END IF;
    FOR v_key, v_val IN SELECT e.key, e.value FROM jsonb_each(p_filter) e ORDER BY e.key LOOP
        IF v_key IN ('$and', '$or') THEN
            IF jsonb_typeof(v_val) <> 'array' OR jsonb_array_length(v_val) = 0 THEN
                RAISE EXCEPTION 'invalid filter: % takes a non-empty array of filters', v_key USING ERRCODE = 'PGM07';
            END IF;
            v_subparts := '{}';
            FOR v_elem IN SELECT a.value FROM jsonb_array_elements(v_val) a LOOP
                v_sub := pgmem._compile_filter(v_elem, p_keys_param, p_vals_param, v_out, p_depth + 1);
                v_out.keys := v_sub.keys;
                v_out.vals := v_sub.vals;
                v_subparts := v_subparts || ('(' || v_sub.sql || ')');
            END LOOP;
            v_parts := v_parts || ('(' || array_to_string(v_subparts, CASE v_key WHEN '$and' THEN ' AND ' ELSE ' OR ' END) || ')');
        ELSIF v_key = '$not' THEN
            v_sub := pgmem._compile_filter(v_val, p_keys_param, p_vals_param, v_out, p_depth + 1);
            v_out.keys := v_sub.keys;
            v_out.vals := v_sub.vals;
            -- coalesce: a row without the key makes the inner test NULL; NOT must still match it.
            v_parts := v_parts || ('(NOT coalesce((' || v_sub.sql || '), false))');
        ELSIF left(v_key, 1) = '$' THEN
            RAISE EXCEPTION 'invalid filter: unknown logical operator "%" (use $and, $or, $not)', v_key USING ERRCODE = 'PGM07';
        ELSE
            v_out.keys := v_out.keys || v_key;
            v_field := format('(m.metadata -> %s[%s])', v_k, cardinality(v_out.keys));
            IF jsonb_typeof(v_val) <> 'object' THEN
                v_val := jsonb_build_object('eq', v_val);
            ELSIF v_val = '{}'::jsonb THEN
                RAISE EXCEPTION 'invalid filter: empty operator object for key %', to_jsonb(v_key) USING ERRCODE = 'PGM07';
            END IF;
            FOR v_op, v_arg IN SELECT e.key, e.value FROM jsonb_each(v_val) e ORDER BY e.key LOOP
                v_out.vals := v_out.vals || v_arg;
                v_vref := format('%s[%s]', v_v, cardinality(v_out.vals));
                CASE v_op
                WHEN 'eq' THEN
                    v_parts := v_parts || format('(%s = %s)', v_field, v_vref);
                WHEN 'ne' THEN
                    v_parts := v_parts || format('(%s IS DISTINCT FROM %s)', v_field, v_vref);
                WHEN 'gt', 'gte', 'lt', 'lte' THEN
                    IF jsonb_typeof(v_arg) <> 'number' THEN
                        RAISE EXCEPTION 'invalid filter: operator % on key % needs a number, got %', v_op, to_jsonb(v_key), jsonb_typeof(v_arg)
                            USING ERRCODE = 'PGM07', HINT = 'Range operators compare JSON numbers only; a string such as "10" never matches them.';
                    END IF;
                    v_parts := v_parts || format('(CASE WHEN jsonb_typeof(%1$s) = ''number'' THEN (%1$s)::numeric %2$s (%3$s)::numeric ELSE false END)',
                        v_field, CASE v_op WHEN 'gt' THEN '>' WHEN 'gte' THEN '>=' WHEN 'lt' THEN '<' ELSE '<=' END, v_vref);
                WHEN 'in', 'nin' THEN
                    IF jsonb_typeof(v_arg) <> 'array' THEN
                        RAISE EXCEPTION 'invalid filter: operator % on key % needs an array, got %', v_op, to_jsonb(v_key), jsonb_typeof(v_arg)
                            USING ERRCODE = 'PGM07';
                    END IF;
                    v_parts := v_parts || format('(%sEXISTS (SELECT 1 FROM jsonb_array_elements(%s) AS x(v) WHERE x.v = %s))',
                        CASE v_op WHEN 'nin' THEN 'NOT ' ELSE '' END, v_vref, v_field);
                WHEN 'contains' THEN
                    IF v_arg = '""'::jsonb THEN
                        RAISE EXCEPTION 'invalid filter: contains needs a non-empty value' USING ERRCODE = 'PGM07';
                    END IF;
                    v_parts := v_parts || format('(CASE jsonb_typeof(%1$s) WHEN ''array'' THEN %1$s @> jsonb_build_array(%2$s) '
                        || 'WHEN ''string'' THEN jsonb_typeof(%2$s) = ''string'' AND strpos(%1$s #>> ''{}'', %2$s #>> ''{}'') > 0 ELSE false END)',
                        v_field, v_vref);
                WHEN 'exists' THEN
                    IF jsonb_typeof(v_arg) <> 'boolean' THEN
                        RAISE EXCEPTION 'invalid filter: exists takes true or false' USING ERRCODE = 'PGM07';
                    END IF;
                    v_parts := v_parts || format('((m.metadata ? %s[%s]) = (%s)::boolean)', v_k, cardinality(v_out.keys), v_vref);
                ELSE
                    RAISE EXCEPTION 'invalid filter: unknown operator "%" on key %', v_op, to_jsonb(v_key)
                        USING ERRCODE = 'PGM07', HINT = 'Operators: eq, ne, gt, gte, lt, lte, in, nin, contains, exists; $and, $or, $not.';
                END CASE;
            END LOOP;
        END IF;
    END LOOP;
    v_out.sql := array_to_string(v_parts, ' AND ');
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION pgmem._compile_filter(jsonb, integer, integer, pgmem.compiled_filter, integer) IS
    'Internal: compile a metadata filter ({"key": value}, {"key": {"op": value}}, $and/$or/$not) to SQL over m.metadata; keys and values stay in parameters $keys_param (text[]) and $vals_param (jsonb[]).';

-- ---------------------------------------------------------------------------------------------------------
-- Result row type shared by get, list, search, update, edit
-- ---------------------------------------------------------------------------------------------------------
CREATE TYPE pgmem.memory AS (
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
    similarity  double precision
);
COMMENT ON TYPE pgmem.memory IS 'A memory as the API returns it; similarity (cosine, in [-1, 1]) is set by search only.';

-- ---------------------------------------------------------------------------------------------------------
-- Writing
-- ---------------------------------------------------------------------------------------------------------
CREATE FUNCTION pgmem._store_vectors(p_user text, p_memory_id uuid, p_kinds text[], p_embeddings vector[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF coalesce(cardinality(p_kinds), 0) <> coalesce(cardinality(p_embeddings), 0) THEN
        RAISE EXCEPTION 'extra vectors: % kinds for % vectors', coalesce(cardinality(p_kinds), 0), coalesce(cardinality(p_embeddings), 0)
            USING ERRCODE = 'PGM08';
    END IF;
    IF cardinality(p_kinds) > 1000 THEN
        RAISE EXCEPTION 'a memory holds at most 1000 extra vectors' USING ERRCODE = 'PGM08';
    END IF;
    INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
    SELECT p_user, p_memory_id, e.i, e.kind, e.emb FROM unnest(p_kinds, p_embeddings) WITH ORDINALITY AS e(kind, emb, i);
END
$$;
COMMENT ON FUNCTION pgmem._store_vectors(text, uuid, text[], vector[]) IS 'Internal: store a memory''s extra vectors (kinds sentence, context).';

CREATE FUNCTION pgmem.add(
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

CREATE FUNCTION pgmem.add_batch(
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

CREATE FUNCTION pgmem._to_memory(m pgmem.memories, p_space text, p_similarity double precision DEFAULT NULL) RETURNS pgmem.memory
LANGUAGE sql STABLE
AS $$
    SELECT ROW(m.id, m.user_id, p_space, m.agent_id, m.session_id, m.content, m.metadata,
               m.created_at, m.updated_at, m.expires_at, m.version, p_similarity)::pgmem.memory
$$;
COMMENT ON FUNCTION pgmem._to_memory(pgmem.memories, text, double precision) IS 'Internal: a memories row as the API''s pgmem.memory.';

CREATE FUNCTION pgmem.get(p_id uuid) RETURNS SETOF pgmem.memory
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

CREATE FUNCTION pgmem.update(
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

CREATE FUNCTION pgmem.edit(
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

CREATE FUNCTION pgmem.count_occurrences(p_haystack text, p_needle text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
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

CREATE FUNCTION pgmem.delete(p_id uuid, p_agent_id text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_found boolean;
BEGIN
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    DELETE FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = p_id;
    v_found := FOUND;
    PERFORM set_config('pgmem.actor', '', true);
    RETURN v_found;
END
$$;
COMMENT ON FUNCTION pgmem.delete(uuid, text) IS 'Delete one memory of the current user; true when it existed. History keeps a DELETE event with the old content.';

-- Internal: the WHERE clause shared by list, search and delete_all. Parameters: $1 user, $2 agent_id,
-- $3 session_id, $4 created_after, $5 created_before, $6 filter keys, $7 filter values, $8 content substring.
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

CREATE FUNCTION pgmem.delete_all(
    p_space text DEFAULT NULL, p_agent_id text DEFAULT NULL, p_session_id text DEFAULT NULL, p_filter jsonb DEFAULT NULL,
    p_confirm boolean DEFAULT false, p_actor text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
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
    PERFORM set_config('pgmem.actor', coalesce(p_actor, ''), true);
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
    PERFORM set_config('pgmem.actor', '', true);
    RETURN v_total;
END
$$;
COMMENT ON FUNCTION pgmem.delete_all(text, text, text, jsonb, boolean, text) IS
    'Delete the current user''s memories in a scope (space, agent, session, metadata filter); returns how many. With no agent, session or filter it refuses (PGM10) unless p_confirm.';

-- ---------------------------------------------------------------------------------------------------------
-- Reading
-- ---------------------------------------------------------------------------------------------------------
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

CREATE FUNCTION pgmem.stats(p_space text DEFAULT NULL) RETURNS TABLE (
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

CREATE FUNCTION pgmem.session_tail(p_space text, p_session_id text, p_n integer DEFAULT 1) RETURNS SETOF pgmem.memory
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

-- Hybrid search: BM25 full-text ranking fused with vector similarity, under the same tenant routing,
-- filters and RLS as pgmem.search. Method and constants: docs/recall.md.
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

-- ---------------------------------------------------------------------------------------------------------
-- psql: a readable view. It filters on the identity itself, so it is safe whoever owns it (PostgreSQL 14
-- has no security_invoker views); on 15+ it also runs with the caller's privileges and RLS.
-- ---------------------------------------------------------------------------------------------------------
CREATE VIEW pgmem.memories_view AS
SELECT m.user_id, m.agent_id, m.session_id, m.content,
       date_trunc('second', now() - m.created_at) AS age,
       m.metadata, s.name AS space, m.id, m.created_at, m.version
FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
WHERE m.user_id = (SELECT pgmem.current_user_id()) AND (m.expires_at IS NULL OR m.expires_at > now());
COMMENT ON VIEW pgmem.memories_view IS 'The current user''s live memories, newest age last: SET pgmem.user_id = ''alice''; SELECT * FROM pgmem.memories_view;';
DO $pgmem$
BEGIN
    IF current_setting('server_version_num')::integer >= 150000 THEN
        EXECUTE 'ALTER VIEW pgmem.memories_view SET (security_invoker = true)';
    END IF;
END
$pgmem$;
REVOKE ALL ON pgmem.memories_view FROM PUBLIC;
GRANT SELECT ON pgmem.memories_view TO pgmem_agent;

-- ---------------------------------------------------------------------------------------------------------
-- Privileges: functions are SECURITY INVOKER unless noted, so RLS applies to the caller's own rows.
-- ---------------------------------------------------------------------------------------------------------
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
-- Registering a space builds an index (DDL, run as the owner): trusted gateways may, bound agents may not.
GRANT EXECUTE ON FUNCTION pgmem.create_space(text, text, integer, text, integer, integer, regconfig) TO pgmem_gateway;
