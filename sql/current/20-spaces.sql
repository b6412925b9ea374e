-- pgmem current schema, part 20: embedding spaces. A space binds a name to one model and dimension count,
-- has its own partial HNSW index on memories (written by create_space), and its retention (set_retention).

-- One model, one dimension count, one HNSW index each (created by pgmem.create_space), and the space's
-- retention: memory_ttl and turn_ttl count from created_at; a row's own expires_at overrides them.
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
    memory_ttl      interval,
    turn_ttl        interval    NOT NULL DEFAULT interval '7 days',
    CONSTRAINT spaces_pkey PRIMARY KEY (space_id),
    CONSTRAINT spaces_name_key UNIQUE (name),
    CONSTRAINT spaces_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    CONSTRAINT spaces_model_check CHECK (model <> '' AND length(model) <= 200),
    CONSTRAINT spaces_dims_check CHECK (dims BETWEEN 1 AND 16000),
    CONSTRAINT spaces_distance_check CHECK (distance = 'cosine'),
    CONSTRAINT spaces_index_kind_check CHECK (index_kind IN ('hnsw_vector', 'hnsw_halfvec', 'exact')),
    CONSTRAINT spaces_memory_ttl_check CHECK (memory_ttl > interval '0'),
    CONSTRAINT spaces_turn_ttl_check CHECK (turn_ttl > interval '0')
);
COMMENT ON TABLE pgmem.spaces IS
    'Embedding spaces: a name bound to one embedding model and dimension count. Each has its own partial HNSW index on memories (vector up to 2000 dims, halfvec up to 4000, exact scan above).';
COMMENT ON COLUMN pgmem.spaces.memory_ttl IS
    'Default time-to-live of a memory in this space, counted from its created_at; NULL keeps memories until deleted. A memory''s own expires_at overrides it (''infinity'': never).';
COMMENT ON COLUMN pgmem.spaces.turn_ttl IS
    'Time-to-live of a conversation turn in this space, counted from its created_at (default 7 days). A turn''s own expires_at overrides it.';

CREATE FUNCTION pgmem.space(p_name text) RETURNS pgmem.spaces
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
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
CREATE FUNCTION pgmem._checked_space(p_space text, p_embedding @vector@.vector, p_model text) RETURNS pgmem.spaces
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_space pgmem.spaces := pgmem.space(p_space);
BEGIN
    IF p_model IS NOT NULL AND p_model <> v_space.model THEN
        RAISE EXCEPTION 'space "%" holds embeddings of model "%", not "%"', v_space.name, v_space.model, p_model
            USING ERRCODE = 'PGM09', HINT = 'Embed with the space''s model, or use (create) a space for this model.';
    END IF;
    IF p_embedding IS NOT NULL THEN
        IF @vector@.vector_dims(p_embedding) <> v_space.dims THEN
            RAISE EXCEPTION 'expected % dimensions, got % (space "%", model "%")',
                v_space.dims, @vector@.vector_dims(p_embedding), v_space.name, v_space.model USING ERRCODE = 'PGM02';
        END IF;
        IF @vector@.vector_norm(p_embedding) = 0 OR (p_embedding OPERATOR(@vector@.<=>) p_embedding) = 'NaN'::float8 THEN
            RAISE EXCEPTION 'a zero vector (or one whose float4 squared norm underflows or overflows) has no cosine similarity' USING ERRCODE = 'PGM08';
        END IF;
    END IF;
    RETURN v_space;
END
$$;
COMMENT ON FUNCTION pgmem._checked_space(text, vector, text) IS 'Internal: look up a space and check an embedding''s dimensions, norm and model against it.';

-- create_space and set_retention write pgmem._knn again (bodies of 0002 and 0003 otherwise unchanged).
CREATE FUNCTION pgmem.create_space(
    p_name text,
    p_model text,
    p_dims integer,
    p_distance text DEFAULT 'cosine',
    p_hnsw_m integer DEFAULT 16,
    p_hnsw_ef_construction integer DEFAULT 64,
    p_text_config regconfig DEFAULT 'english'
) RETURNS pgmem.spaces
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
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
    -- Only pg_catalog's configurations: one in a temporary (or a droppable) schema broke the space for every
    -- tenant once its session ended, and tokenised their text with the creator's rules meanwhile.
    IF (SELECT c.cfgnamespace FROM pg_catalog.pg_ts_config c WHERE c.oid = coalesce(p_text_config, 'english'))
       <> 'pg_catalog'::regnamespace THEN
        RAISE EXCEPTION 'text search configuration % is not one of pg_catalog''s', p_text_config USING ERRCODE = 'PGM08',
            HINT = 'SELECT cfgname FROM pg_ts_config WHERE cfgnamespace = ''pg_catalog''::regnamespace lists them.';
    END IF;
    -- pgvector's HNSW indexes vector up to 2,000 dimensions and halfvec up to 4,000; above that, exact scan.
    v_kind := CASE WHEN p_dims <= 2000 THEN 'hnsw_vector' WHEN p_dims <= 4000 THEN 'hnsw_halfvec' ELSE 'exact' END;
    INSERT INTO pgmem.spaces (name, model, dims, distance, text_config, index_kind, hnsw_m, hnsw_ef_construction)
    VALUES (p_name, p_model, p_dims, 'cosine', coalesce(p_text_config, 'english'), v_kind,
            CASE WHEN v_kind <> 'exact' THEN p_hnsw_m END, CASE WHEN v_kind <> 'exact' THEN p_hnsw_ef_construction END)
    RETURNING * INTO v_space;
    IF v_kind = 'hnsw_vector' THEN
        EXECUTE format('CREATE INDEX memories_space_%s_hnsw ON pgmem.memories USING hnsw ((embedding::@vector@.vector(%s)) @vector@.vector_cosine_ops) WITH (m = %s, ef_construction = %s) WHERE space_id = %s',
                       v_space.space_id, p_dims, p_hnsw_m, p_hnsw_ef_construction, v_space.space_id);
    ELSIF v_kind = 'hnsw_halfvec' THEN
        EXECUTE format('CREATE INDEX memories_space_%s_hnsw ON pgmem.memories USING hnsw ((embedding::@vector@.halfvec(%s)) @vector@.halfvec_cosine_ops) WITH (m = %s, ef_construction = %s) WHERE space_id = %s',
                       v_space.space_id, p_dims, p_hnsw_m, p_hnsw_ef_construction, v_space.space_id);
    END IF;
    IF v_kind <> 'exact' THEN
        -- The index keeps no statistics of the embeddings (every tenant's vectors).
        EXECUTE format('ALTER INDEX pgmem.memories_space_%s_hnsw ALTER COLUMN 1 SET STATISTICS 0', v_space.space_id);
        PERFORM pgmem._build_knn();  -- the new space's HNSW statement, planned once per connection
    END IF;
    RETURN v_space;
END
$$;
COMMENT ON FUNCTION pgmem.create_space(text, text, integer, text, integer, integer, regconfig) IS
    'Register an embedding space (name, model, dims, cosine) and build its partial HNSW index: vector up to 2000 dims, halfvec (half precision) up to 4000, exact scan only above. p_text_config is the full-text configuration of its memories (default english: stemming, English stop words). Idempotent for identical arguments; a different model or dims for an existing name is error PGM09.';

CREATE FUNCTION pgmem.set_retention(
    p_space text,
    p_memory_ttl interval,
    p_turn_ttl interval DEFAULT NULL
) RETURNS pgmem.spaces
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_space pgmem.spaces := pgmem.space(p_space);
    v_old_ttl interval := v_space.memory_ttl;
BEGIN
    IF p_memory_ttl <= interval '0' OR p_turn_ttl <= interval '0' THEN
        RAISE EXCEPTION 'a time-to-live must be positive' USING ERRCODE = 'PGM08';
    END IF;
    UPDATE pgmem.spaces s SET memory_ttl = p_memory_ttl, turn_ttl = coalesce(p_turn_ttl, s.turn_ttl)
    WHERE s.space_id = v_space.space_id RETURNING * INTO v_space;
    IF v_old_ttl IS DISTINCT FROM p_memory_ttl AND v_space.index_kind <> 'exact' THEN
        PERFORM pgmem._build_knn();  -- its HNSW statement names the TTL
    END IF;
    RETURN v_space;
END
$$;
COMMENT ON FUNCTION pgmem.set_retention(text, interval, interval) IS
    'Schema owner only (a space''s TTL applies to every user of it): a space''s default time-to-live of memories (NULL: keep until deleted) and of turns (NULL: unchanged). Applies at once to every memory and turn without its own expires_at, counted from its created_at.';

-- ---------------------------------------------------------------------------------------------------------
-- Space administration: list_spaces for every pgmem role (agents and gateways read no table directly, so the
-- command line's `pgmem space list`, and the list of known spaces an unknown --space prints, need it), and
-- drop_space for the schema owner (a space created by a typing mistake needs a way out).
-- ---------------------------------------------------------------------------------------------------------
CREATE FUNCTION pgmem.list_spaces() RETURNS TABLE (
    space_id integer,
    name text,
    model text,
    dims integer,
    distance text,
    index_kind text,
    hnsw_m integer,
    hnsw_ef_construction integer,
    text_config text,
    memory_ttl interval,
    turn_ttl interval,
    created_at timestamptz
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT s.space_id, s.name, s.model, s.dims, s.distance, s.index_kind, s.hnsw_m, s.hnsw_ef_construction,
           s.text_config::text, s.memory_ttl, s.turn_ttl, s.created_at
    FROM pgmem.spaces s ORDER BY s.name
$$;
COMMENT ON FUNCTION pgmem.list_spaces() IS
    'Every embedding space, by name: model, dims, distance, index kind and HNSW parameters, full-text configuration, retention (memory and turn TTL), creation time. Configuration only: no counts of any user''s rows. Any pgmem role may call it.';



-- Dropping a space removes every user's rows of it: the schema owner (or a superuser) only, and only a role
-- that sees every user's rows (superuser or BYPASSRLS; RLS is forced on the tables, for the owner too).
-- No tombstones are kept: the history of the space's memories goes with them, as with a dropped table.
CREATE FUNCTION pgmem.drop_space(p_name text) RETURNS TABLE (memories bigint, turns bigint, history bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_space pgmem.spaces;
    v_users text[];
    v_ids uuid[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgmem'
                   AND pg_catalog.pg_has_role(current_user, n.nspowner, 'MEMBER'))
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = current_user AND r.rolsuper) THEN
        RAISE EXCEPTION 'role "%" may not drop an embedding space: only the schema owner may', current_user
            USING ERRCODE = 'PGM01', HINT = 'Connect as the role that ran the migrations.';
    END IF;
    PERFORM pgmem._require_maintainer('drop an embedding space');
    -- On a Citus cluster: one connection per worker for the whole transaction (the space's row of the reference
    -- table spaces is read and locked before its index is dropped on every shard, which Citus refuses to do in
    -- parallel). On a single server the setting is an unused placeholder.
    SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
    -- Locks the space's row first: a concurrent create_space of the same name waits, then creates it anew.
    SELECT * INTO v_space FROM pgmem.spaces s WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM pgmem.space(p_name);  -- error PGM03, the message every caller knows
    END IF;
    SELECT coalesce(array_agg(m.user_id), '{}'), coalesce(array_agg(m.id), '{}') INTO v_users, v_ids
    FROM pgmem.memories m WHERE m.space_id = v_space.space_id;
    DELETE FROM pgmem.history h USING unnest(v_users, v_ids) AS g(user_id, id)
    WHERE h.user_id = g.user_id AND h.memory_id = g.id;
    GET DIAGNOSTICS history = ROW_COUNT;
    DELETE FROM pgmem.memories m WHERE m.space_id = v_space.space_id;  -- extra vectors and sources cascade
    memories := pg_catalog.cardinality(v_ids);
    -- and the DELETE events the history trigger has just written for them
    DELETE FROM pgmem.history h USING unnest(v_users, v_ids) AS g(user_id, id)
    WHERE h.user_id = g.user_id AND h.memory_id = g.id;
    DELETE FROM pgmem.turns t WHERE t.space_id = v_space.space_id;
    GET DIAGNOSTICS turns = ROW_COUNT;
    DELETE FROM pgmem.tenant_sizes t WHERE t.space_id = v_space.space_id;
    DELETE FROM pgmem.key_locks l WHERE l.space_id = v_space.space_id;
    EXECUTE format('DROP INDEX IF EXISTS pgmem.%I', 'memories_space_' || v_space.space_id || '_hnsw');
    DELETE FROM pgmem.spaces s WHERE s.space_id = v_space.space_id;
    PERFORM pgmem._build_knn();  -- the generated per-space statements forget it
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION pgmem.drop_space(text) IS
    'Schema owner only (and only a role that sees every user''s rows: superuser or BYPASSRLS): drop an embedding space with every user''s memories, extra vectors, sources, turns and history in it, and its HNSW index, in one transaction. Returns the memories, turns and history events removed (no tombstones are kept). Error PGM03 when the space does not exist. Not undoable.';
