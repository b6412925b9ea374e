SELECT pg_catalog.set_config('search_path', '', false);

CREATE SCHEMA pgmem;

COMMENT ON SCHEMA pgmem IS 'pgmem: shared, durable memory for AI agents. The API is the functions in this schema; see \df+ pgmem.*';

CREATE TYPE pgmem.compiled_filter AS (
	sql text,
	keys text[],
	vals jsonb[]
);

COMMENT ON TYPE pgmem.compiled_filter IS 'Internal: a metadata filter compiled to SQL text plus its key and value parameters.';

CREATE TYPE pgmem.hybrid_hit AS (
	id uuid,
	user_id text,
	space text,
	agent_id text,
	session_id text,
	content text,
	metadata jsonb,
	created_at timestamp with time zone,
	updated_at timestamp with time zone,
	expires_at timestamp with time zone,
	version integer,
	similarity double precision,
	score double precision,
	text_score double precision,
	vector_score double precision
);

COMMENT ON TYPE pgmem.hybrid_hit IS 'A hybrid search result: the memory, its cosine similarity to the query, the fused score, the raw BM25 text score and the raw vector score (best sentence + context cosine, in [-2, 2]).';

CREATE TYPE pgmem.memory AS (
	id uuid,
	user_id text,
	space text,
	agent_id text,
	session_id text,
	content text,
	metadata jsonb,
	created_at timestamp with time zone,
	updated_at timestamp with time zone,
	expires_at timestamp with time zone,
	version integer,
	similarity double precision,
	valid_from timestamp with time zone,
	valid_to timestamp with time zone,
	superseded_by uuid
);

COMMENT ON TYPE pgmem.memory IS 'A memory as the API returns it; similarity (cosine, in [-1, 1]) is set by search only; expires_at is the effective expiry (own, else created_at + the space''s memory_ttl); valid_from, valid_to, superseded_by its validity.';

CREATE TYPE pgmem.turn AS (
	turn_id bigint,
	session_id text,
	agent_id text,
	role text,
	content text,
	metadata jsonb,
	created_at timestamp with time zone,
	expires_at timestamp with time zone,
	consolidated_at timestamp with time zone
);

COMMENT ON TYPE pgmem.turn IS 'A conversation turn as the API returns it; expires_at is the effective expiry (own, else created_at + the space''s turn_ttl).';

CREATE FUNCTION pgmem._check_expiry(p_expires_at timestamp with time zone) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF p_expires_at <= now() THEN
        RAISE EXCEPTION 'expires_at % is not in the future: the memory would be invisible at once', p_expires_at
            USING ERRCODE = 'PGM08';
    END IF;
END
$$;

COMMENT ON FUNCTION pgmem._check_expiry(p_expires_at timestamp with time zone) IS 'Internal: an explicit expiry must lie in the future.';

CREATE TABLE pgmem.spaces (
    space_id integer NOT NULL,
    name text NOT NULL,
    model text NOT NULL,
    dims integer NOT NULL,
    distance text DEFAULT 'cosine'::text NOT NULL,
    text_config regconfig DEFAULT 'english'::regconfig NOT NULL,
    index_kind text NOT NULL,
    hnsw_m integer,
    hnsw_ef_construction integer,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    memory_ttl interval,
    turn_ttl interval DEFAULT '7 days'::interval NOT NULL,
    CONSTRAINT spaces_dims_check CHECK (((dims >= 1) AND (dims <= 16000))),
    CONSTRAINT spaces_distance_check CHECK ((distance = 'cosine'::text)),
    CONSTRAINT spaces_index_kind_check CHECK ((index_kind = ANY (ARRAY['hnsw_vector'::text, 'hnsw_halfvec'::text, 'exact'::text]))),
    CONSTRAINT spaces_memory_ttl_check CHECK ((memory_ttl > '00:00:00'::interval)),
    CONSTRAINT spaces_model_check CHECK (((model <> ''::text) AND (length(model) <= 200))),
    CONSTRAINT spaces_name_check CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text)),
    CONSTRAINT spaces_turn_ttl_check CHECK ((turn_ttl > '00:00:00'::interval))
);

COMMENT ON TABLE pgmem.spaces IS 'Embedding spaces: a name bound to one embedding model and dimension count. Each has its own partial HNSW index on memories (vector up to 2000 dims, halfvec up to 4000, exact scan above).';

COMMENT ON COLUMN pgmem.spaces.memory_ttl IS 'Default time-to-live of a memory in this space, counted from its created_at; NULL keeps memories until deleted. A memory''s own expires_at overrides it (''infinity'': never).';

COMMENT ON COLUMN pgmem.spaces.turn_ttl IS 'Time-to-live of a conversation turn in this space, counted from its created_at (default 7 days). A turn''s own expires_at overrides it.';

CREATE FUNCTION pgmem._checked_space(p_space text, p_embedding public.vector, p_model text) RETURNS pgmem.spaces
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

COMMENT ON FUNCTION pgmem._checked_space(p_space text, p_embedding public.vector, p_model text) IS 'Internal: look up a space and check an embedding''s dimensions, norm and model against it.';

CREATE FUNCTION pgmem._compile_filter(p_filter jsonb, p_keys_param integer, p_vals_param integer, p_acc pgmem.compiled_filter DEFAULT ROW('true'::text, '{}'::text[], '{}'::jsonb[])::pgmem.compiled_filter, p_depth integer DEFAULT 0) RETURNS pgmem.compiled_filter
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
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
$_$;

COMMENT ON FUNCTION pgmem._compile_filter(p_filter jsonb, p_keys_param integer, p_vals_param integer, p_acc pgmem.compiled_filter, p_depth integer) IS 'Internal: compile a metadata filter ({"key": value}, {"key": {"op": value}}, $and/$or/$not) to SQL over m.metadata; keys and values stay in parameters $keys_param (text[]) and $vals_param (jsonb[]).';

CREATE FUNCTION pgmem._expire_conflicts(p_user text, p_space pgmem.spaces, p_hashes bytea[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM set_config('pgmem.event', 'EXPIRE', true);
    DELETE FROM pgmem.memories m
    WHERE m.user_id = p_user AND m.space_id = p_space.space_id AND m.content_hash = ANY (p_hashes) AND m.valid_to IS NULL
      AND pgmem._expiry(m.expires_at, m.created_at, p_space.memory_ttl) <= now();
    PERFORM set_config('pgmem.event', '', true);
END
$$;

COMMENT ON FUNCTION pgmem._expire_conflicts(p_user text, p_space pgmem.spaces, p_hashes bytea[]) IS 'Internal: remove (EXPIRE) expired memories of a user and space whose content a new memory repeats, so the new one is stored and visible.';

CREATE FUNCTION pgmem._expiry(p_expires_at timestamp with time zone, p_created_at timestamp with time zone, p_ttl interval) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT coalesce(p_expires_at, p_created_at + p_ttl, 'infinity'::timestamptz) $$;

COMMENT ON FUNCTION pgmem._expiry(p_expires_at timestamp with time zone, p_created_at timestamp with time zone, p_ttl interval) IS 'Internal: effective expiry of a memory or turn: its own expires_at, else created_at + the space''s TTL, else infinity.';

CREATE FUNCTION pgmem._history_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'pgmem.history is append-only' USING ERRCODE = 'PGM08';
END
$$;

COMMENT ON FUNCTION pgmem._history_append_only() IS 'Trigger: refuses any UPDATE of history rows.';

CREATE FUNCTION pgmem.content_hash(p_content text) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT pg_catalog.sha256(pg_catalog.convert_to(p_content, 'UTF8')) $$;

COMMENT ON FUNCTION pgmem.content_hash(p_content text) IS 'SHA-256 of the UTF-8 bytes of a memory''s content: the deduplication key per user and space.';

CREATE TABLE pgmem.memories (
    user_id text NOT NULL,
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    space_id integer NOT NULL,
    agent_id text,
    session_id text,
    content text NOT NULL,
    content_hash bytea GENERATED ALWAYS AS (pgmem.content_hash(content)) STORED NOT NULL,
    embedding public.vector NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    version integer DEFAULT 1 NOT NULL,
    seq bigint NOT NULL,
    fts tsvector DEFAULT ''::tsvector NOT NULL,
    fts_len integer DEFAULT 0 NOT NULL,
    valid_from timestamp with time zone NOT NULL,
    valid_to timestamp with time zone,
    superseded_by uuid,
    CONSTRAINT memories_agent_id_check CHECK ((length(agent_id) <= 256)),
    CONSTRAINT memories_content_check CHECK (((char_length(content) >= 1) AND (char_length(content) <= 100000))),
    CONSTRAINT memories_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT memories_session_id_check CHECK ((length(session_id) <= 256)),
    CONSTRAINT memories_superseded_by_check CHECK (((superseded_by IS NULL) OR (valid_to IS NOT NULL))),
    CONSTRAINT memories_user_id_check CHECK (((user_id <> ''::text) AND (length(user_id) <= 256))),
    CONSTRAINT memories_validity_check CHECK (((valid_to IS NULL) OR (valid_to >= valid_from)))
);

ALTER TABLE ONLY pgmem.memories FORCE ROW LEVEL SECURITY;

COMMENT ON TABLE pgmem.memories IS 'Long-term memories, one row per fact, keyed by user_id (the tenant) first. Row-level security limits every role to its own user''s rows.';

COMMENT ON COLUMN pgmem.memories.expires_at IS 'When the memory expires (invisible at once, removed by pgmem.purge); NULL: the space''s memory_ttl after created_at, if any.';

COMMENT ON COLUMN pgmem.memories.fts IS 'Full-text vector of content plus the day it was made (''8 May 2023'', UTC), in the space''s text search configuration; kept by trigger.';

COMMENT ON COLUMN pgmem.memories.fts_len IS 'Number of tokens in fts: the document length for BM25.';

COMMENT ON COLUMN pgmem.memories.valid_from IS 'When the fact starts to hold (valid time); default created_at.';

COMMENT ON COLUMN pgmem.memories.valid_to IS 'When the fact stopped holding (superseded or invalidated); NULL while it holds.';

COMMENT ON COLUMN pgmem.memories.superseded_by IS 'The memory that replaced this one (pgmem.supersede); NULL otherwise.';

CREATE FUNCTION pgmem._lock_current(p_user text, p_id uuid) RETURNS pgmem.memories
    LANGUAGE plpgsql
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

COMMENT ON FUNCTION pgmem._lock_current(p_user text, p_id uuid) IS 'Internal: lock one live memory that still holds (FOR UPDATE), else PGM03 / PGM04.';

CREATE FUNCTION pgmem._matching_rows(p_user text, p_space pgmem.spaces, p_sql text, p_filter_params pgmem.compiled_filter, p_threshold integer, p_agent_id text, p_session_id text, p_created_after timestamp with time zone, p_created_before timestamp with time zone, p_filter jsonb, p_as_of timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_plain boolean := p_agent_id IS NULL AND p_session_id IS NULL AND p_created_after IS NULL
                       AND p_created_before IS NULL AND p_as_of IS NULL AND (p_filter IS NULL OR p_filter = '{}'::jsonb);
    v_fresh interval := make_interval(secs => coalesce(nullif(current_setting('pgmem.route_cache_seconds', true), '')::integer, 60));
    v_cached pgmem.tenant_sizes;
    v_n bigint;
    v_lock_timeout text := current_setting('lock_timeout');
BEGIN
    SELECT * INTO v_cached FROM pgmem.tenant_sizes t WHERE t.user_id = p_user AND t.space_id = p_space.space_id;
    IF FOUND AND v_cached.counted_at > now() - v_fresh THEN
        IF v_cached.complete AND (v_plain OR v_cached.rows <= p_threshold) THEN
            RETURN v_cached.rows;
        ELSIF NOT v_cached.complete AND v_plain AND v_cached.rows > p_threshold THEN
            RETURN v_cached.rows;
        END IF;
    END IF;
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM pgmem.memories m WHERE %s LIMIT %s) c', p_sql, p_threshold + 1)
    INTO v_n
    USING p_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          p_filter_params.keys, p_filter_params.vals, NULL::text;
    -- Only a large tenant's size is stored: storing makes the search a write whose commit waits for the WAL
    -- flush (2.6 -> 8.0 ms for a small tenant, bench/FINDINGS.md S6), while a small tenant's count is cheap.
    -- A stored size that no longer holds (the tenant shrank) is removed.
    IF v_plain AND current_setting('transaction_read_only') = 'off' AND (v_n > p_threshold OR v_cached.user_id IS NOT NULL) THEN
        -- Best effort: a read-only transaction (a standby) or a concurrent refresh just skips the store.
        BEGIN
            PERFORM set_config('lock_timeout', '20ms', true);
            IF v_n > p_threshold THEN
                INSERT INTO pgmem.tenant_sizes AS t (user_id, space_id, rows, complete, counted_at)
                VALUES (p_user, p_space.space_id, v_n, false, now())
                ON CONFLICT (user_id, space_id) DO UPDATE
                    SET rows = EXCLUDED.rows, complete = EXCLUDED.complete, counted_at = EXCLUDED.counted_at;
            ELSE
                DELETE FROM pgmem.tenant_sizes t WHERE t.user_id = p_user AND t.space_id = p_space.space_id;
            END IF;
            PERFORM set_config('lock_timeout', v_lock_timeout, true);
        EXCEPTION WHEN lock_not_available OR read_only_sql_transaction OR insufficient_privilege THEN
            NULL;  -- the block's own setting of lock_timeout is undone with it
        END;
    END IF;
    RETURN v_n;
END
$$;

COMMENT ON FUNCTION pgmem._matching_rows(p_user text, p_space pgmem.spaces, p_sql text, p_filter_params pgmem.compiled_filter, p_threshold integer, p_agent_id text, p_session_id text, p_created_after timestamp with time zone, p_created_before timestamp with time zone, p_filter jsonb, p_as_of timestamp with time zone) IS 'Internal: how many memories match a search''s scope, capped at p_threshold + 1, for routing; a large tenant''s own size comes from pgmem.tenant_sizes while fresh (pgmem.route_cache_seconds, default 60).';

CREATE FUNCTION pgmem._memories_before_write() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pgmem', 'public'
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
        NEW.valid_from := coalesce(NEW.valid_from, OLD.valid_from);
        IF NEW.content IS NOT DISTINCT FROM OLD.content THEN
            NEW.fts := OLD.fts;
            NEW.fts_len := OLD.fts_len;
        END IF;
        IF NEW.embedding = OLD.embedding THEN
            RETURN NEW;
        END IF;
    ELSE
        NEW.valid_from := coalesce(NEW.valid_from, NEW.created_at);
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
    IF vector_norm(NEW.embedding) = 0 OR (NEW.embedding <=> NEW.embedding) = 'NaN'::float8 THEN
        RAISE EXCEPTION 'a zero vector (or one whose float4 squared norm underflows or overflows) has no cosine similarity' USING ERRCODE = 'PGM08';
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION pgmem._memories_before_write() IS 'Trigger: validates a memory row, keeps version, updated_at and the full-text vector.';

CREATE FUNCTION pgmem._memories_history() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgmem'
    AS $$
DECLARE
    v_actor text := nullif(current_setting('pgmem.actor', true), '');
    v_event text := nullif(current_setting('pgmem.event', true), '');
BEGIN
    IF v_event = 'ERASE' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pgmem.history (user_id, memory_id, event, new_content, new_metadata, actor_agent_id)
        VALUES (NEW.user_id, NEW.id, 'ADD', NEW.content, NEW.metadata, coalesce(v_actor, NEW.agent_id));
    ELSIF TG_OP = 'UPDATE' THEN
        v_event := coalesce(v_event, 'UPDATE');
        INSERT INTO pgmem.history (user_id, memory_id, event, old_content, new_content, old_metadata, new_metadata, actor_agent_id, related_id)
        VALUES (NEW.user_id, NEW.id, v_event, OLD.content, NEW.content, OLD.metadata, NEW.metadata, v_actor,
                CASE WHEN v_event = 'SUPERSEDE' THEN NEW.superseded_by END);
    ELSIF v_event = 'EXPIRE' THEN
        INSERT INTO pgmem.history (user_id, memory_id, event, actor_agent_id)
        VALUES (OLD.user_id, OLD.id, 'EXPIRE', v_actor);
    ELSE
        INSERT INTO pgmem.history (user_id, memory_id, event, old_content, old_metadata, actor_agent_id)
        VALUES (OLD.user_id, OLD.id, 'DELETE', OLD.content, OLD.metadata, v_actor);
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION pgmem._memories_history() IS 'Trigger: appends one history event per inserted, updated or deleted memory.';

CREATE FUNCTION pgmem._memory_columns(p_space_ref text, p_similarity text, p_ttl interval) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT format('m.id, m.user_id, %1$s, m.agent_id, m.session_id, m.content, m.metadata, m.created_at, m.updated_at,'
                  ' nullif(pgmem._expiry(m.expires_at, m.created_at, %3$L::interval), ''infinity''), m.version,'
                  ' (%2$s)::double precision, m.valid_from, m.valid_to, m.superseded_by', p_space_ref, p_similarity, p_ttl)
$_$;

COMMENT ON FUNCTION pgmem._memory_columns(p_space_ref text, p_similarity text, p_ttl interval) IS 'Internal: the select list of a pgmem.memory over alias m (space name and similarity as SQL expressions), for dynamic queries.';

CREATE FUNCTION pgmem._memory_vectors_before_insert() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pgmem', 'public'
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

CREATE FUNCTION pgmem._require_maintainer(p_what text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = current_user AND (r.rolsuper OR r.rolbypassrls)) THEN
        RAISE EXCEPTION 'role "%" may not %: it needs to see every user''s rows', current_user, p_what
            USING ERRCODE = 'PGM01',
                  HINT = 'Run it as a superuser or a role with BYPASSRLS (the role that runs pg_dump), e.g. the schema owner: ALTER ROLE <owner> BYPASSRLS;';
    END IF;
END
$$;

COMMENT ON FUNCTION pgmem._require_maintainer(p_what text) IS 'Internal: error PGM01 unless the current role is a superuser or has BYPASSRLS.';

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

CREATE FUNCTION pgmem._scope_sql(p_space_id integer, p_filter jsonb, OUT o_sql text, OUT o_filter pgmem.compiled_filter) RETURNS record
    LANGUAGE sql STABLE
    AS $$ SELECT * FROM pgmem._scope_sql(p_space_id, p_filter, NULL::timestamptz) $$;

COMMENT ON FUNCTION pgmem._scope_sql(p_space_id integer, p_filter jsonb, OUT o_sql text, OUT o_filter pgmem.compiled_filter) IS 'Internal: pgmem._scope_sql for the memories that hold now.';

CREATE FUNCTION pgmem._scope_sql(p_space_id integer, p_filter jsonb, p_as_of timestamp with time zone, OUT o_sql text, OUT o_filter pgmem.compiled_filter) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $_$
DECLARE
    v_ttl interval;
BEGIN
    SELECT s.memory_ttl INTO v_ttl FROM pgmem.spaces s WHERE s.space_id = p_space_id;
    o_filter := pgmem._compile_filter(p_filter, 6, 7);
    o_sql := format('m.user_id = $1 AND m.space_id = %s AND %s AND %s'
        || ' AND ($2::text IS NULL OR m.agent_id = $2) AND ($3::text IS NULL OR m.session_id = $3)'
        || ' AND ($4::timestamptz IS NULL OR m.created_at >= $4) AND ($5::timestamptz IS NULL OR m.created_at < $5)'
        || ' AND ($8::text IS NULL OR strpos(m.content, $8) > 0) AND (%s)',
        p_space_id,
        CASE WHEN v_ttl IS NULL THEN '(m.expires_at IS NULL OR m.expires_at > now())'
             ELSE format('coalesce(m.expires_at, m.created_at + %L::interval) > now()', v_ttl) END,
        CASE WHEN p_as_of IS NULL THEN 'm.valid_to IS NULL AND m.valid_from <= now()'
             ELSE format('m.valid_from <= %1$L::timestamptz AND (m.valid_to IS NULL OR m.valid_to > %1$L::timestamptz)', p_as_of) END,
        o_filter.sql);
END
$_$;

COMMENT ON FUNCTION pgmem._scope_sql(p_space_id integer, p_filter jsonb, p_as_of timestamp with time zone, OUT o_sql text, OUT o_filter pgmem.compiled_filter) IS 'Internal: SQL for the live rows of one user and space that hold now (or at p_as_of) and match agent, session, time range, content substring and metadata filter.';

CREATE FUNCTION pgmem._store_vectors(p_user text, p_memory_id uuid, p_kinds text[], p_embeddings public.vector[]) RETURNS void
    LANGUAGE plpgsql
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

COMMENT ON FUNCTION pgmem._store_vectors(p_user text, p_memory_id uuid, p_kinds text[], p_embeddings public.vector[]) IS 'Internal: store a memory''s extra vectors (kinds sentence, context).';

CREATE FUNCTION pgmem._to_memory(m pgmem.memories, p_space text, p_similarity double precision, p_ttl interval) RETURNS pgmem.memory
    LANGUAGE sql STABLE
    AS $$
    SELECT ROW(m.id, m.user_id, p_space, m.agent_id, m.session_id, m.content, m.metadata,
               m.created_at, m.updated_at, nullif(pgmem._expiry(m.expires_at, m.created_at, p_ttl), 'infinity'),
               m.version, p_similarity, m.valid_from, m.valid_to, m.superseded_by)::pgmem.memory
$$;

COMMENT ON FUNCTION pgmem._to_memory(m pgmem.memories, p_space text, p_similarity double precision, p_ttl interval) IS 'Internal: a memories row as the API''s pgmem.memory; p_ttl is its space''s memory_ttl (for the effective expires_at). Inlined by the planner.';

CREATE FUNCTION pgmem._turns(p_user text, p_space pgmem.spaces, p_session_id text, p_pending_only boolean, p_n integer) RETURNS SETOF pgmem.turn
    LANGUAGE sql STABLE
    AS $$
    SELECT t.turn_id, t.session_id, t.agent_id, t.role, t.content, t.metadata, t.created_at,
           nullif(pgmem._expiry(t.expires_at, t.created_at, p_space.turn_ttl), 'infinity'), t.consolidated_at
    FROM (SELECT * FROM pgmem.turns t
          WHERE t.user_id = p_user AND t.space_id = p_space.space_id AND t.session_id = p_session_id
            AND pgmem._expiry(t.expires_at, t.created_at, p_space.turn_ttl) > now()
            AND (NOT p_pending_only OR t.consolidated_at IS NULL)
          ORDER BY t.turn_id DESC LIMIT p_n) t
    ORDER BY t.turn_id
$$;

COMMENT ON FUNCTION pgmem._turns(p_user text, p_space pgmem.spaces, p_session_id text, p_pending_only boolean, p_n integer) IS 'Internal: the last n live turns of a session (pending only: not yet consolidated), oldest first.';

CREATE FUNCTION pgmem.act_as(p_user_id text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgmem'
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

COMMENT ON FUNCTION pgmem.act_as(p_user_id text) IS 'Gateway roles: act for this user until the end of the transaction. Bound logins: succeeds only for their own user. Returns the user id.';

CREATE FUNCTION pgmem.add(p_space text, p_content text, p_embedding public.vector, p_agent_id text DEFAULT NULL::text, p_session_id text DEFAULT NULL::text, p_metadata jsonb DEFAULT '{}'::jsonb, p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_model text DEFAULT NULL::text, p_vector_kinds text[] DEFAULT NULL::text[], p_vectors public.vector[] DEFAULT NULL::public.vector[]) RETURNS TABLE(id uuid, created boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
BEGIN
    IF p_embedding IS NULL THEN
        RAISE EXCEPTION 'an embedding is required' USING ERRCODE = 'PGM08';
    END IF;
    PERFORM pgmem._check_expiry(p_expires_at);
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    PERFORM pgmem._expire_conflicts(v_user, v_space, ARRAY[pgmem.content_hash(p_content)]);
    LOOP
        INSERT INTO pgmem.memories AS m (user_id, space_id, agent_id, session_id, content, embedding, metadata, expires_at)
        VALUES (v_user, v_space.space_id, p_agent_id, p_session_id, p_content, p_embedding, coalesce(p_metadata, '{}'), p_expires_at)
        ON CONFLICT (user_id, space_id, content_hash) WHERE valid_to IS NULL DO NOTHING
        RETURNING m.id INTO id;
        IF id IS NOT NULL THEN
            created := true;
            PERFORM pgmem._store_vectors(v_user, id, p_vector_kinds, p_vectors);
            PERFORM set_config('pgmem.actor', '', true);
            RETURN NEXT;
            RETURN;
        END IF;
        -- Identical content holds already (committed, possibly by a concurrent writer we waited for).
        SELECT m.id INTO id FROM pgmem.memories m
        WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.content_hash = pgmem.content_hash(p_content)
          AND m.valid_to IS NULL;
        IF id IS NOT NULL THEN
            created := false;
            PERFORM set_config('pgmem.actor', '', true);
            RETURN NEXT;
            RETURN;
        END IF;
        -- The conflicting row was deleted or superseded between the two statements: try again.
    END LOOP;
END
$$;

COMMENT ON FUNCTION pgmem.add(p_space text, p_content text, p_embedding public.vector, p_agent_id text, p_session_id text, p_metadata jsonb, p_expires_at timestamp with time zone, p_model text, p_vector_kinds text[], p_vectors public.vector[]) IS 'Add one memory for the current user, with optional extra vectors (kinds sentence, context). Identical content in the same space is not stored twice: the existing id comes back with created = false, also under concurrent writers.';

CREATE FUNCTION pgmem.add_batch(p_space text, p_contents text[], p_embeddings public.vector[], p_agent_ids text[] DEFAULT NULL::text[], p_session_ids text[] DEFAULT NULL::text[], p_metadata jsonb[] DEFAULT NULL::jsonb[], p_expires_at timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_model text DEFAULT NULL::text, p_created_at timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_vector_items integer[] DEFAULT NULL::integer[], p_vector_kinds text[] DEFAULT NULL::text[], p_vectors public.vector[] DEFAULT NULL::public.vector[], p_ids uuid[] DEFAULT NULL::uuid[]) RETURNS TABLE(ordinal integer, id uuid, created boolean)
    LANGUAGE plpgsql
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

COMMENT ON FUNCTION pgmem.add_batch(p_space text, p_contents text[], p_embeddings public.vector[], p_agent_ids text[], p_session_ids text[], p_metadata jsonb[], p_expires_at timestamp with time zone[], p_model text, p_created_at timestamp with time zone[], p_vector_items integer[], p_vector_kinds text[], p_vectors public.vector[], p_ids uuid[]) IS 'Add up to 10000 memories in one statement, all or nothing. Returns one row per item (ordinal from 0) with its id and whether it was created; duplicates, within the batch or of stored memories, return the existing id. p_created_at (for imports) sets when each memory was made; default now(). Extra vectors: p_vector_items (item number from 0), p_vector_kinds, p_vectors, stored for created items only. p_ids: client-generated ids (idempotency keys); an item whose id this user already stored, even if since deleted, is not written again and returns that id with created = false, so a retry never duplicates.';

CREATE FUNCTION pgmem.append_turn(p_space text, p_session_id text, p_role text, p_content text, p_agent_id text DEFAULT NULL::text, p_embedding public.vector DEFAULT NULL::public.vector, p_metadata jsonb DEFAULT '{}'::jsonb, p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_model text DEFAULT NULL::text, p_created_at timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF pgmem.turn
    LANGUAGE plpgsql
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
    INSERT INTO pgmem.turns (user_id, space_id, session_id, agent_id, role, content, embedding, metadata, created_at, expires_at)
    VALUES (v_user, v_space.space_id, p_session_id, p_agent_id, p_role, p_content, p_embedding, coalesce(p_metadata, '{}'),
            coalesce(p_created_at, now()), p_expires_at)
    RETURNING * INTO v_row;
    RETURN NEXT ROW(v_row.turn_id, v_row.session_id, v_row.agent_id, v_row.role, v_row.content, v_row.metadata, v_row.created_at,
                    nullif(pgmem._expiry(v_row.expires_at, v_row.created_at, v_space.turn_ttl), 'infinity'), v_row.consolidated_at)::pgmem.turn;
END
$$;

COMMENT ON FUNCTION pgmem.append_turn(p_space text, p_session_id text, p_role text, p_content text, p_agent_id text, p_embedding public.vector, p_metadata jsonb, p_expires_at timestamp with time zone, p_model text, p_created_at timestamp with time zone) IS 'Append one conversation turn (role user, assistant, system or tool) to a session of the current user; optional embedding in the space''s model; expires after the space''s turn_ttl unless p_expires_at is given. Returns the turn.';

CREATE FUNCTION pgmem.bind_role(p_role name, p_user_id text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = p_role) THEN
        RAISE EXCEPTION 'role "%" does not exist', p_role USING ERRCODE = 'PGM03';
    END IF;
    INSERT INTO pgmem.role_bindings (role_name, user_id) VALUES (p_role, p_user_id)
    ON CONFLICT (role_name) DO UPDATE SET user_id = EXCLUDED.user_id, created_at = now();
END
$$;

COMMENT ON FUNCTION pgmem.bind_role(p_role name, p_user_id text) IS 'Schema owner only: bind a login role to one pgmem user. The role must also be granted pgmem_agent.';

CREATE FUNCTION pgmem.chain(p_id uuid) RETURNS SETOF pgmem.memory
    LANGUAGE plpgsql STABLE
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
    SELECT (pgmem._to_memory(m, s.name, NULL, s.memory_ttl)).*
    FROM ids JOIN pgmem.memories m ON m.user_id = v_user AND m.id = ids.id JOIN pgmem.spaces s ON s.space_id = m.space_id
    WHERE pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()
    ORDER BY ids.depth, m.valid_from, m.id;
END
$$;

COMMENT ON FUNCTION pgmem.chain(p_id uuid) IS 'The supersede chain through memory p_id, oldest fact first: its predecessors, itself and its successors (expired ones left out). Each row''s valid_from, valid_to and superseded_by show the line.';

CREATE FUNCTION pgmem.consolidate(p_space text, p_session_id text, p_turn_ids bigint[], p_contents text[], p_embeddings public.vector[], p_metadata jsonb[] DEFAULT NULL::jsonb[], p_agent_id text DEFAULT NULL::text, p_model text DEFAULT NULL::text, p_vector_items integer[] DEFAULT NULL::integer[], p_vector_kinds text[] DEFAULT NULL::text[], p_vectors public.vector[] DEFAULT NULL::public.vector[]) RETURNS TABLE(ordinal integer, id uuid, created boolean)
    LANGUAGE plpgsql
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

COMMENT ON FUNCTION pgmem.consolidate(p_space text, p_session_id text, p_turn_ids bigint[], p_contents text[], p_embeddings public.vector[], p_metadata jsonb[], p_agent_id text, p_model text, p_vector_items integer[], p_vector_kinds text[], p_vectors public.vector[]) IS 'Store the summary of some turns of a session as long-term memories (add_batch rules: deduplicated by content), link each to those turns (pgmem.sources) and mark the turns consolidated, all in one transaction. Idempotent: the same turns again return the memories made the first time (created = false); turns of which only some are consolidated are PGM04; unknown or expired turns PGM03.';

CREATE FUNCTION pgmem.context(p_space text, p_session_id text, p_query text, p_embedding public.vector DEFAULT NULL::public.vector, p_budget_tokens integer DEFAULT 2000, p_max_turns integer DEFAULT 20, p_turn_share double precision DEFAULT 0.5, p_k integer DEFAULT 20, p_agent_id text DEFAULT NULL::text, p_filter jsonb DEFAULT NULL::jsonb, p_model text DEFAULT NULL::text) RETURNS TABLE("position" integer, source text, turn_id bigint, memory_id uuid, role text, content text, line text, tokens integer, score double precision, created_at timestamp with time zone)
    LANGUAGE plpgsql
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

COMMENT ON FUNCTION pgmem.context(p_space text, p_session_id text, p_query text, p_embedding public.vector, p_budget_tokens integer, p_max_turns integer, p_turn_share double precision, p_k integer, p_agent_id text, p_filter jsonb, p_model text) IS 'What an agent puts in its prompt for a query: the most recent turns of the session (a contiguous tail, within p_turn_share of the budget, at most p_max_turns) and the most relevant long-term memories (pgmem.search_hybrid, k candidates) in the rest, each a labelled line ([memory YYYY-MM-DD] / [turn role YYYY-MM-DD HH:MI]). The sum of tokens (pgmem.token_count of each line) never exceeds p_budget_tokens; no memory repeats a turn shown or summarises only turns shown. Rows: memories by relevance, then turns oldest first.';

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

COMMENT ON FUNCTION pgmem.count_occurrences(p_haystack text, p_needle text) IS 'How often p_needle occurs in p_haystack as literal, case-sensitive text, overlapping occurrences included (''aa'' in ''aaa'' is 2).';

CREATE FUNCTION pgmem.create_space(p_name text, p_model text, p_dims integer, p_distance text DEFAULT 'cosine'::text, p_hnsw_m integer DEFAULT 16, p_hnsw_ef_construction integer DEFAULT 64, p_text_config regconfig DEFAULT 'english'::regconfig) RETURNS pgmem.spaces
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgmem', 'public'
    AS $_$
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
$_$;

COMMENT ON FUNCTION pgmem.create_space(p_name text, p_model text, p_dims integer, p_distance text, p_hnsw_m integer, p_hnsw_ef_construction integer, p_text_config regconfig) IS 'Register an embedding space (name, model, dims, cosine) and build its partial HNSW index: vector up to 2000 dims, halfvec (half precision) up to 4000, exact scan only above. p_text_config is the full-text configuration of its memories (default english: stemming, English stop words). Idempotent for identical arguments; a different model or dims for an existing name is error PGM09.';

CREATE FUNCTION pgmem.current_user_id() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pgmem'
    AS $$
    SELECT coalesce(
        (SELECT b.user_id FROM pgmem.role_bindings b WHERE b.role_name = session_user),
        CASE WHEN NOT EXISTS (SELECT 1 FROM pgmem.role_bindings b WHERE b.role_name = session_user)
                  AND pg_has_role(session_user, 'pgmem_gateway', 'MEMBER')
             THEN nullif(current_setting('pgmem.user_id', true), '')
        END)
$$;

COMMENT ON FUNCTION pgmem.current_user_id() IS 'The pgmem user (tenant) this statement acts for: the binding of a bound login role, else pgmem.user_id for gateway members, else NULL (sees no rows).';

CREATE FUNCTION pgmem.delete(p_id uuid, p_agent_id text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql
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

COMMENT ON FUNCTION pgmem.delete(p_id uuid, p_agent_id text) IS 'Delete one memory of the current user; true when it existed. History keeps a DELETE event with the old content.';

CREATE FUNCTION pgmem.delete_all(p_space text DEFAULT NULL::text, p_agent_id text DEFAULT NULL::text, p_session_id text DEFAULT NULL::text, p_filter jsonb DEFAULT NULL::jsonb, p_confirm boolean DEFAULT false, p_actor text DEFAULT NULL::text) RETURNS bigint
    LANGUAGE plpgsql
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

COMMENT ON FUNCTION pgmem.delete_all(p_space text, p_agent_id text, p_session_id text, p_filter jsonb, p_confirm boolean, p_actor text) IS 'Delete the current user''s memories in a scope (space, agent, session, metadata filter); returns how many. With no agent, session or filter it refuses (PGM10) unless p_confirm.';

CREATE FUNCTION pgmem.edit(p_id uuid, p_needle text, p_replacement text, p_embedding public.vector, p_expected_version integer DEFAULT NULL::integer, p_agent_id text DEFAULT NULL::text, p_model text DEFAULT NULL::text, p_vector_kinds text[] DEFAULT NULL::text[], p_vectors public.vector[] DEFAULT NULL::public.vector[]) RETURNS SETOF pgmem.memory
    LANGUAGE plpgsql
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
    RETURN NEXT pgmem._to_memory(v_row, v_space.name, NULL, v_space.memory_ttl);
END
$$;

COMMENT ON FUNCTION pgmem.edit(p_id uuid, p_needle text, p_replacement text, p_embedding public.vector, p_expected_version integer, p_agent_id text, p_model text, p_vector_kinds text[], p_vectors public.vector[]) IS 'Replace the one occurrence of p_needle in a memory that still holds by p_replacement, both literal text (no %, _, \ or regex meaning; case-sensitive), with the new content''s embedding in the same statement. Errors: empty needle PGM08, absent PGM06, ambiguous (count, overlapping included) PGM05, superseded PGM04.';

CREATE FUNCTION pgmem.erase_user(p_user_id text) RETURNS TABLE(table_name text, rows bigint)
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_table name;
BEGIN
    PERFORM pgmem._require_maintainer('erase a user');
    IF p_user_id IS NULL OR p_user_id = '' THEN
        RAISE EXCEPTION 'name the user to erase' USING ERRCODE = 'PGM08';
    END IF;
    -- No history is written for the erased rows (ERASE), and every table of the schema with a user_id
    -- column is covered, tables added by later migrations included: children first, then memories.
    PERFORM set_config('pgmem.event', 'ERASE', true);
    FOR v_table IN
        SELECT c.relname FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id' AND NOT a.attisdropped
        WHERE n.nspname = 'pgmem' AND c.relkind IN ('r', 'p')
        ORDER BY CASE c.relname WHEN 'memory_vectors' THEN 0 WHEN 'memory_sources' THEN 0 WHEN 'memories' THEN 1 ELSE 2 END, c.relname
    LOOP
        EXECUTE format('DELETE FROM pgmem.%I WHERE user_id = $1', v_table) USING p_user_id;
        table_name := v_table;
        GET DIAGNOSTICS rows = ROW_COUNT;
        RETURN NEXT;
    END LOOP;
    PERFORM set_config('pgmem.event', '', true);
END
$_$;

COMMENT ON FUNCTION pgmem.erase_user(p_user_id text) IS 'Right to erasure: delete every row of one user from every pgmem table (memories, extra vectors, turns, sources, history, role bindings) in one transaction, writing no history; returns rows deleted per table. Other users are untouched. Superuser or BYPASSRLS only. Dead row versions stay on disk until VACUUM; backups keep them until rotated (docs/lifecycle.md).';

CREATE FUNCTION pgmem.export_user(p_embeddings boolean DEFAULT true) RETURNS SETOF jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    RETURN QUERY
    SELECT jsonb_build_object('kind', 'memory', 'id', m.id, 'user_id', m.user_id, 'space', s.name, 'agent_id', m.agent_id,
               'session_id', m.session_id, 'content', m.content, 'metadata', m.metadata, 'created_at', m.created_at,
               'updated_at', m.updated_at, 'expires_at', m.expires_at, 'version', m.version, 'valid_from', m.valid_from,
               'valid_to', m.valid_to, 'superseded_by', m.superseded_by,
               'embedding', CASE WHEN p_embeddings THEN m.embedding::text::jsonb END,
               'vectors', CASE WHEN p_embeddings THEN (SELECT coalesce(jsonb_agg(jsonb_build_object('kind', v.kind, 'embedding', v.embedding::text::jsonb) ORDER BY v.n), '[]')
                                                       FROM pgmem.memory_vectors v WHERE v.user_id = v_user AND v.memory_id = m.id) END,
               'sources', (SELECT coalesce(jsonb_agg(ms.turn_id ORDER BY ms.turn_id), '[]') FROM pgmem.memory_sources ms
                           WHERE ms.user_id = v_user AND ms.memory_id = m.id))
    FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
    WHERE m.user_id = v_user ORDER BY m.seq;
    RETURN QUERY
    SELECT jsonb_build_object('kind', 'turn', 'turn_id', t.turn_id, 'user_id', t.user_id, 'space', s.name, 'session_id', t.session_id,
               'agent_id', t.agent_id, 'role', t.role, 'content', t.content, 'metadata', t.metadata, 'created_at', t.created_at,
               'expires_at', t.expires_at, 'consolidated_at', t.consolidated_at,
               'embedding', CASE WHEN p_embeddings THEN t.embedding::text::jsonb END)
    FROM pgmem.turns t JOIN pgmem.spaces s USING (space_id)
    WHERE t.user_id = v_user ORDER BY t.turn_id;
    RETURN QUERY
    SELECT jsonb_build_object('kind', 'history', 'event_id', h.event_id, 'user_id', h.user_id, 'memory_id', h.memory_id, 'event', h.event,
               'old_content', h.old_content, 'new_content', h.new_content, 'old_metadata', h.old_metadata,
               'new_metadata', h.new_metadata, 'actor_agent_id', h.actor_agent_id, 'actor_role', h.actor_role,
               'created_at', h.created_at, 'related_id', h.related_id)
    FROM pgmem.history h WHERE h.user_id = v_user ORDER BY h.event_id;
END
$$;

COMMENT ON FUNCTION pgmem.export_user(p_embeddings boolean) IS 'Everything pgmem holds of the current user, one JSON object per row: kind memory (all of them: expired, superseded included; with embedding and extra vectors unless p_embeddings is false, and source turn ids), kind turn, kind history. pgmem.import_user reads it back.';

CREATE FUNCTION pgmem.get(p_id uuid) RETURNS SETOF pgmem.memory
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_user text := pgmem._require_user();
BEGIN
    RETURN QUERY
    SELECT (pgmem._to_memory(m, s.name, NULL, s.memory_ttl)).* FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
    WHERE m.user_id = v_user AND m.id = p_id AND pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now();
END
$$;

COMMENT ON FUNCTION pgmem.get(p_id uuid) IS 'One memory of the current user by id, also when superseded (see valid_to, superseded_by): one row, or none when it does not exist, has expired or belongs to another user.';

CREATE FUNCTION pgmem.history(p_id uuid) RETURNS TABLE(event_id bigint, memory_id uuid, event text, old_content text, new_content text, old_metadata jsonb, new_metadata jsonb, actor_agent_id text, actor_role name, created_at timestamp with time zone, related_id uuid)
    LANGUAGE plpgsql STABLE
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

COMMENT ON FUNCTION pgmem.history(p_id uuid) IS 'Every event of one memory of the current user, oldest first (also after the memory was deleted; after expiry only the EXPIRE tombstone). related_id: the successor of a SUPERSEDE.';

CREATE FUNCTION pgmem.import_user(p_rows jsonb[]) RETURNS TABLE(kind text, imported bigint, skipped bigint)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_row jsonb;
    v_space pgmem.spaces;
    v_new bigint;
    v_id uuid;
    v_map jsonb := '{}';
    v_mem_in bigint := 0; v_mem_skip bigint := 0;
    v_turn_in bigint := 0;
    v_turn_skip bigint := 0;
    v_hist_skip bigint := 0;
    v_k text;
BEGIN
    -- Turns first (they get new ids; sources are mapped to them), then memories in their export order. A turn
    -- already present (same space, session, role, content and time) is not added again: its id is reused.
    FOR v_row IN SELECT r FROM unnest(p_rows) r WHERE r ->> 'kind' = 'turn' ORDER BY (r ->> 'turn_id')::bigint LOOP
        v_space := pgmem._checked_space(v_row ->> 'space', (v_row ->> 'embedding')::vector, NULL);
        SELECT t.turn_id INTO v_new FROM pgmem.turns t
        WHERE t.user_id = v_user AND t.space_id = v_space.space_id AND t.session_id = v_row ->> 'session_id'
          AND t.role = v_row ->> 'role' AND t.content = v_row ->> 'content'
          AND t.created_at = (v_row ->> 'created_at')::timestamptz
        LIMIT 1;
        IF FOUND THEN
            v_map := v_map || jsonb_build_object(v_row ->> 'turn_id', v_new);
            v_turn_skip := v_turn_skip + 1;
            CONTINUE;
        END IF;
        INSERT INTO pgmem.turns (user_id, space_id, session_id, agent_id, role, content, embedding, metadata, created_at, expires_at, consolidated_at)
        VALUES (v_user, v_space.space_id, v_row ->> 'session_id', v_row ->> 'agent_id', v_row ->> 'role', v_row ->> 'content',
                (v_row ->> 'embedding')::vector, coalesce(v_row -> 'metadata', '{}'), (v_row ->> 'created_at')::timestamptz,
                (v_row ->> 'expires_at')::timestamptz, (v_row ->> 'consolidated_at')::timestamptz)
        RETURNING turns.turn_id INTO v_new;
        v_map := v_map || jsonb_build_object(v_row ->> 'turn_id', v_new);
        v_turn_in := v_turn_in + 1;
    END LOOP;
    FOR v_row IN SELECT r FROM unnest(p_rows) WITH ORDINALITY AS x(r, o) WHERE r ->> 'kind' = 'memory' ORDER BY o LOOP
        IF v_row -> 'embedding' IS NULL OR jsonb_typeof(v_row -> 'embedding') <> 'array' THEN
            RAISE EXCEPTION 'memory % has no embedding in the export', v_row ->> 'id'
                USING ERRCODE = 'PGM08', HINT = 'Export with embeddings to import: `pgmem export` without --no-embeddings, or pgmem.export_user(true).';
        END IF;
        v_space := pgmem._checked_space(v_row ->> 'space', (v_row ->> 'embedding')::vector, NULL);
        INSERT INTO pgmem.memories AS m (user_id, id, space_id, agent_id, session_id, content, embedding, metadata, created_at,
                                         expires_at, valid_from, valid_to, superseded_by)
        VALUES (v_user, (v_row ->> 'id')::uuid, v_space.space_id, v_row ->> 'agent_id', v_row ->> 'session_id', v_row ->> 'content',
                (v_row ->> 'embedding')::vector, coalesce(v_row -> 'metadata', '{}'), (v_row ->> 'created_at')::timestamptz,
                (v_row ->> 'expires_at')::timestamptz, (v_row ->> 'valid_from')::timestamptz, (v_row ->> 'valid_to')::timestamptz,
                (v_row ->> 'superseded_by')::uuid)
        ON CONFLICT DO NOTHING
        RETURNING m.id INTO v_id;
        IF v_id IS NULL THEN
            v_mem_skip := v_mem_skip + 1;
            CONTINUE;
        END IF;
        v_mem_in := v_mem_in + 1;
        INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
        SELECT v_user, v_id, e.o, e.v ->> 'kind', (e.v ->> 'embedding')::vector
        FROM jsonb_array_elements(coalesce(v_row -> 'vectors', '[]')) WITH ORDINALITY AS e(v, o);
        INSERT INTO pgmem.memory_sources (user_id, memory_id, turn_id)
        SELECT v_user, v_id, coalesce((v_map ->> (s.t #>> '{}'))::bigint, (s.t #>> '{}')::bigint)
        FROM jsonb_array_elements(coalesce(v_row -> 'sources', '[]')) AS s(t)
        ON CONFLICT DO NOTHING;
    END LOOP;
    SELECT count(*) INTO v_hist_skip FROM unnest(p_rows) r WHERE r ->> 'kind' = 'history';
    FOR v_k IN SELECT DISTINCT r ->> 'kind' FROM unnest(p_rows) r WHERE coalesce(r ->> 'kind', '') NOT IN ('memory', 'turn', 'history') LOOP
        RAISE EXCEPTION 'unknown row kind %', quote_nullable(v_k) USING ERRCODE = 'PGM08';
    END LOOP;
    kind := 'memory'; imported := v_mem_in; skipped := v_mem_skip; RETURN NEXT;
    kind := 'turn'; imported := v_turn_in; skipped := v_turn_skip; RETURN NEXT;
    kind := 'history'; imported := 0; skipped := v_hist_skip; RETURN NEXT;
END
$$;

COMMENT ON FUNCTION pgmem.import_user(p_rows jsonb[]) IS 'Read rows of pgmem.export_user back in for the current user, all or nothing: memories keep their ids, times, validity, metadata, embeddings, extra vectors and source links; turns get new ids (links follow them); a turn already present (same space, session, role, content, time) is skipped. History rows are not replayed (the import writes its own ADD events); they are counted as skipped. A memory whose id or current content already exists is skipped.';

CREATE FUNCTION pgmem.invalidate(p_id uuid, p_valid_to timestamp with time zone DEFAULT NULL::timestamp with time zone, p_agent_id text DEFAULT NULL::text) RETURNS SETOF pgmem.memory
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_user text := pgmem._require_user();
    v_row pgmem.memories := pgmem._lock_current(v_user, p_id);
    v_at timestamptz := coalesce(p_valid_to, now());
BEGIN
    IF v_at < v_row.valid_from THEN
        RAISE EXCEPTION 'a fact cannot stop holding at %, before it began (%)', v_at, v_row.valid_from USING ERRCODE = 'PGM08';
    END IF;
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
    PERFORM set_config('pgmem.event', 'INVALIDATE', true);
    UPDATE pgmem.memories m SET valid_to = v_at WHERE m.user_id = v_user AND m.id = p_id RETURNING * INTO v_row;
    PERFORM set_config('pgmem.event', '', true);
    PERFORM set_config('pgmem.actor', '', true);
    RETURN NEXT (SELECT pgmem._to_memory(v_row, s.name, NULL, s.memory_ttl) FROM pgmem.spaces s WHERE s.space_id = v_row.space_id);
END
$$;

COMMENT ON FUNCTION pgmem.invalidate(p_id uuid, p_valid_to timestamp with time zone, p_agent_id text) IS 'Mark a fact as no longer holding from p_valid_to (default now), without a successor and without deleting it. Returns the memory.';

CREATE FUNCTION pgmem.list(p_space text, p_agent_id text DEFAULT NULL::text, p_session_id text DEFAULT NULL::text, p_filter jsonb DEFAULT NULL::jsonb, p_limit integer DEFAULT 50, p_after_created_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_after_id uuid DEFAULT NULL::uuid, p_created_after timestamp with time zone DEFAULT NULL::timestamp with time zone, p_created_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_contains text DEFAULT NULL::text, p_as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF pgmem.memory
    LANGUAGE plpgsql STABLE
    AS $_$
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
$_$;

COMMENT ON FUNCTION pgmem.list(p_space text, p_agent_id text, p_session_id text, p_filter jsonb, p_limit integer, p_after_created_at timestamp with time zone, p_after_id uuid, p_created_after timestamp with time zone, p_created_before timestamp with time zone, p_contains text, p_as_of timestamp with time zone) IS 'The current user''s memories in a space that hold now (or at p_as_of), oldest first, with keyset pagination: pass the last row''s (created_at, id) as the cursor. Filters: agent, session, metadata, created_at range [after, before), literal content substring (p_contains: plain text, case-sensitive).';

CREATE FUNCTION pgmem.pending_turns(p_space text, p_session_id text, p_n integer DEFAULT 1000) RETURNS SETOF pgmem.turn
    LANGUAGE plpgsql STABLE
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

COMMENT ON FUNCTION pgmem.pending_turns(p_space text, p_session_id text, p_n integer) IS 'The live turns of a session not yet consolidated (the last n, 1..10000), oldest first: the input of a consolidation.';

CREATE FUNCTION pgmem.purge(p_limit integer DEFAULT 10000) RETURNS TABLE(memories bigint, turns bigint, history bigint)
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pgmem._require_maintainer('purge expired rows');
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be at least 1, got %', p_limit USING ERRCODE = 'PGM08';
    END IF;
    PERFORM set_config('pgmem.event', 'EXPIRE', true);
    WITH x AS (
        SELECT m.user_id, m.id FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
        WHERE pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) <= now()
        LIMIT p_limit FOR UPDATE OF m SKIP LOCKED
    ), d AS (
        DELETE FROM pgmem.memories m USING x WHERE m.user_id = x.user_id AND m.id = x.id RETURNING 1
    )
    SELECT count(*) INTO memories FROM d;
    PERFORM set_config('pgmem.event', '', true);
    -- An expired memory keeps only its tombstone: the content in its earlier events goes too.
    WITH d AS (
        DELETE FROM pgmem.history h USING pgmem.history t
        WHERE t.event = 'EXPIRE' AND h.user_id = t.user_id AND h.memory_id = t.memory_id AND h.event <> 'EXPIRE'
        RETURNING 1
    )
    SELECT count(*) INTO history FROM d;
    WITH x AS (
        SELECT t.user_id, t.turn_id FROM pgmem.turns t JOIN pgmem.spaces s USING (space_id)
        WHERE pgmem._expiry(t.expires_at, t.created_at, s.turn_ttl) <= now()
        LIMIT p_limit FOR UPDATE OF t SKIP LOCKED
    ), d AS (
        DELETE FROM pgmem.turns t USING x WHERE t.user_id = x.user_id AND t.turn_id = x.turn_id RETURNING 1
    )
    SELECT count(*) INTO turns FROM d;
    RETURN NEXT;
END
$$;

COMMENT ON FUNCTION pgmem.purge(p_limit integer) IS 'Physically remove expired memories (leaving an EXPIRE tombstone in history and removing their other history events, content included) and expired turns, at most p_limit of each per call; returns the counts. Expired rows are already invisible; this frees them. Run it from a scheduler (pgmem.schedule_purge with pg_cron, or `pgmem purge`), as a superuser or a BYPASSRLS role.';

CREATE FUNCTION pgmem.recent_turns(p_space text, p_session_id text, p_n integer DEFAULT 20) RETURNS SETOF pgmem.turn
    LANGUAGE plpgsql STABLE
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

COMMENT ON FUNCTION pgmem.recent_turns(p_space text, p_session_id text, p_n integer) IS 'The last n (1..1000) live turns of one session of the current user, oldest first.';

CREATE FUNCTION pgmem.schedule_purge(p_schedule text DEFAULT '*/10 * * * *'::text) RETURNS bigint
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_job bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron') THEN
        RAISE EXCEPTION 'pg_cron is not installed in this database' USING ERRCODE = 'PGM00',
            HINT = 'Install pg_cron (CREATE EXTENSION pg_cron), or run `pgmem purge` from cron, a systemd timer or a Kubernetes CronJob.';
    END IF;
    EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO v_job
    USING 'pgmem-purge', p_schedule, 'SELECT * FROM pgmem.purge()';
    RETURN v_job;
END
$_$;

COMMENT ON FUNCTION pgmem.schedule_purge(p_schedule text) IS 'With pg_cron: schedule SELECT * FROM pgmem.purge() as job ''pgmem-purge'' (cron syntax, default every 10 minutes), as the calling role; returns the job id. Without pg_cron: error PGM00.';

CREATE FUNCTION pgmem.search(p_space text, p_embedding public.vector, p_k integer DEFAULT 10, p_agent_id text DEFAULT NULL::text, p_session_id text DEFAULT NULL::text, p_filter jsonb DEFAULT NULL::jsonb, p_min_similarity double precision DEFAULT NULL::double precision, p_model text DEFAULT NULL::text, p_created_after timestamp with time zone DEFAULT NULL::timestamp with time zone, p_created_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF pgmem.memory
    LANGUAGE plpgsql
    SET "hnsw.ef_search" TO '40'
    SET "hnsw.iterative_scan" TO 'relaxed_order'
    SET "hnsw.max_scan_tuples" TO '20000'
    SET enable_sort TO 'on'
    AS $_$
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
$_$;

COMMENT ON FUNCTION pgmem.search(p_space text, p_embedding public.vector, p_k integer, p_agent_id text, p_session_id text, p_filter jsonb, p_min_similarity double precision, p_model text, p_created_after timestamp with time zone, p_created_before timestamp with time zone, p_as_of timestamp with time zone) IS 'Nearest memories of the current user that hold now (or at p_as_of), by cosine similarity (1 - cosine distance, clamped to [-1, 1]), highest first, at most k (1..1000): min(k, matching rows) whatever the tenant''s size. Routes to an exact scan when at most pgmem.exact_search_max_rows (default 5000) rows match, else HNSW with iterative scan (ef_search max(100, 2k), relaxed order re-sorted), falling back to exact when the index returns fewer than k.';

CREATE FUNCTION pgmem.search_hybrid(p_space text, p_query text, p_embedding public.vector DEFAULT NULL::public.vector, p_k integer DEFAULT 10, p_agent_id text DEFAULT NULL::text, p_session_id text DEFAULT NULL::text, p_filter jsonb DEFAULT NULL::jsonb, p_created_after timestamp with time zone DEFAULT NULL::timestamp with time zone, p_created_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_text_weight double precision DEFAULT 0.4, p_vector_weight double precision DEFAULT 0.6, p_speaker_weight double precision DEFAULT 0.2, p_session_weight double precision DEFAULT 0.4, p_model text DEFAULT NULL::text, p_as_of timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF pgmem.hybrid_hit
    LANGUAGE plpgsql
    SET "hnsw.ef_search" TO '40'
    SET "hnsw.iterative_scan" TO 'relaxed_order'
    SET "hnsw.max_scan_tuples" TO '20000'
    SET enable_sort TO 'on'
    AS $_$
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
    v_n := pgmem._matching_rows(v_user, v_space, v_scope.o_sql, v_scope.o_filter, v_threshold,
                                p_agent_id, p_session_id, p_created_after, p_created_before, p_filter, p_as_of);
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
$_$;

COMMENT ON FUNCTION pgmem.search_hybrid(p_space text, p_query text, p_embedding public.vector, p_k integer, p_agent_id text, p_session_id text, p_filter jsonb, p_created_after timestamp with time zone, p_created_before timestamp with time zone, p_text_weight double precision, p_vector_weight double precision, p_speaker_weight double precision, p_session_weight double precision, p_model text, p_as_of timestamp with time zone) IS 'Hybrid recall for the current user over the memories that hold now (or at p_as_of): BM25 over the query''s lexemes (each memory''s text plus a +-2 window of its session, per-user statistics) fused with vector similarity (best sentence + context), + speaker match (metadata.speaker named in the query) + session boost; min(k, matching rows), highest score first. Without p_embedding: full-text only. Same filters and routing as pgmem.search: exact over <= pgmem.exact_search_max_rows rows, else candidate pools (GIN + HNSW). Method: docs/recall.md.';

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
        SELECT pgmem._to_memory(m, v_space.name, NULL, v_space.memory_ttl) AS r, m.created_at AS c, m.seq AS q FROM pgmem.memories m
        WHERE m.user_id = v_user AND m.space_id = v_space.space_id AND m.session_id = p_session_id
          AND pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl) > now()
        ORDER BY m.created_at DESC, m.seq DESC LIMIT p_n
    ) t ORDER BY t.c, t.q;
END
$$;

COMMENT ON FUNCTION pgmem.session_tail(p_space text, p_session_id text, p_n integer) IS 'The last n (1..100) memories of one session of the current user, in write order (created_at, then write sequence): the context a new memory of that session follows.';

CREATE FUNCTION pgmem.set_retention(p_space text, p_memory_ttl interval, p_turn_ttl interval DEFAULT NULL::interval) RETURNS pgmem.spaces
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgmem'
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

COMMENT ON FUNCTION pgmem.set_retention(p_space text, p_memory_ttl interval, p_turn_ttl interval) IS 'Schema owner and gateways: a space''s default time-to-live of memories (NULL: keep until deleted) and of turns (NULL: unchanged). Applies at once to every memory and turn without its own expires_at, counted from its created_at.';

CREATE FUNCTION pgmem.sources(p_id uuid) RETURNS TABLE(turn_id bigint, session_id text, role text, content text, created_at timestamp with time zone)
    LANGUAGE plpgsql STABLE
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

COMMENT ON FUNCTION pgmem.sources(p_id uuid) IS 'The turns a consolidated memory came from, in order; session, role, content and time are NULL once the turn is purged.';

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

COMMENT ON FUNCTION pgmem.space(p_name text) IS 'The embedding space of that name (error PGM03 when missing).';

CREATE FUNCTION pgmem.stats(p_space text DEFAULT NULL::text) RETURNS TABLE(space text, memories bigint, agents bigint, sessions bigint, oldest timestamp with time zone, newest timestamp with time zone)
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
      ON m.space_id = s.space_id AND m.user_id = v_user AND pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()
         AND m.valid_to IS NULL
    WHERE p_space IS NULL OR s.name = p_space
    GROUP BY s.name ORDER BY s.name;
END
$$;

COMMENT ON FUNCTION pgmem.stats(p_space text) IS 'Per space: the current user''s live memories that hold now, distinct agents and sessions, oldest and newest created_at.';

CREATE FUNCTION pgmem.supersede(p_id uuid, p_content text, p_embedding public.vector, p_metadata jsonb DEFAULT NULL::jsonb, p_valid_from timestamp with time zone DEFAULT NULL::timestamp with time zone, p_agent_id text DEFAULT NULL::text, p_expected_version integer DEFAULT NULL::integer, p_model text DEFAULT NULL::text, p_vector_kinds text[] DEFAULT NULL::text[], p_vectors public.vector[] DEFAULT NULL::public.vector[]) RETURNS SETOF pgmem.memory
    LANGUAGE plpgsql
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
    IF v_at < v_old.valid_from THEN
        RAISE EXCEPTION 'the new fact cannot hold from % , before the old one began (%)', v_at, v_old.valid_from USING ERRCODE = 'PGM08';
    END IF;
    PERFORM set_config('pgmem.actor', coalesce(p_agent_id, ''), true);
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
    PERFORM set_config('pgmem.event', 'SUPERSEDE', true);
    UPDATE pgmem.memories m SET valid_to = v_at, superseded_by = v_new WHERE m.user_id = v_user AND m.id = p_id;
    PERFORM set_config('pgmem.event', '', true);
    PERFORM set_config('pgmem.actor', '', true);
    SELECT * INTO v_row FROM pgmem.memories m WHERE m.user_id = v_user AND m.id = v_new;
    RETURN NEXT pgmem._to_memory(v_row, v_space.name, NULL, v_space.memory_ttl);
END
$$;

COMMENT ON FUNCTION pgmem.supersede(p_id uuid, p_content text, p_embedding public.vector, p_metadata jsonb, p_valid_from timestamp with time zone, p_agent_id text, p_expected_version integer, p_model text, p_vector_kinds text[], p_vectors public.vector[]) IS 'Replace a fact without losing it: the memory p_id stops holding at p_valid_from (default now) and points to its successor, a new memory with p_content (metadata: the old merged with p_metadata; same session and expiry) holding from then on. Returns the successor. Search shows only what holds now unless asked as of a past time; pgmem.chain lists the whole line. Errors: PGM03 not found, PGM04 already superseded or version mismatch.';

CREATE FUNCTION pgmem.token_count(p_text text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT coalesce(sum(CASE WHEN r.m[1] ~ '^[A-Za-z0-9]' THEN (char_length(r.m[1]) + 3) / 4 ELSE 1 END), 0)::integer
    FROM regexp_matches(p_text, '[A-Za-z0-9]+|[^A-Za-z0-9[:space:]]', 'g') AS r(m)
$$;

COMMENT ON FUNCTION pgmem.token_count(p_text text) IS 'Estimated tokens of a text, offline: each run of ASCII letters and digits counts ceil(length / 4), each other non-space character 1; white space counts 0. The unit of context budgets.';

CREATE FUNCTION pgmem.unbind_role(p_role name) RETURNS boolean
    LANGUAGE sql
    AS $$
    WITH d AS (DELETE FROM pgmem.role_bindings WHERE role_name = p_role RETURNING 1) SELECT count(*) > 0 FROM d
$$;

COMMENT ON FUNCTION pgmem.unbind_role(p_role name) IS 'Schema owner only: remove a login role''s binding. Returns whether one existed.';

CREATE FUNCTION pgmem.update(p_id uuid, p_content text DEFAULT NULL::text, p_embedding public.vector DEFAULT NULL::public.vector, p_metadata jsonb DEFAULT NULL::jsonb, p_replace_metadata boolean DEFAULT false, p_expected_version integer DEFAULT NULL::integer, p_agent_id text DEFAULT NULL::text, p_model text DEFAULT NULL::text, p_vector_kinds text[] DEFAULT NULL::text[], p_vectors public.vector[] DEFAULT NULL::public.vector[]) RETURNS SETOF pgmem.memory
    LANGUAGE plpgsql
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
    RETURN NEXT pgmem._to_memory(v_row, v_space.name, NULL, v_space.memory_ttl);
END
$$;

COMMENT ON FUNCTION pgmem.update(p_id uuid, p_content text, p_embedding public.vector, p_metadata jsonb, p_replace_metadata boolean, p_expected_version integer, p_agent_id text, p_model text, p_vector_kinds text[], p_vectors public.vector[]) IS 'Update a memory that still holds: content (with its new embedding), metadata merged into the old (top-level keys) unless p_replace_metadata. p_expected_version makes it optimistic (PGM04 on mismatch; also when the memory was superseded or invalidated). Returns the new row; PGM03 when not found or expired.';

CREATE TABLE pgmem.history (
    user_id text NOT NULL,
    event_id bigint NOT NULL,
    memory_id uuid NOT NULL,
    event text NOT NULL,
    old_content text,
    new_content text,
    old_metadata jsonb,
    new_metadata jsonb,
    actor_agent_id text,
    actor_role name DEFAULT SESSION_USER NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    related_id uuid,
    CONSTRAINT history_event_check CHECK ((event = ANY (ARRAY['ADD'::text, 'UPDATE'::text, 'EDIT'::text, 'DELETE'::text, 'SUPERSEDE'::text, 'INVALIDATE'::text, 'EXPIRE'::text])))
);

ALTER TABLE ONLY pgmem.history FORCE ROW LEVEL SECURITY;

COMMENT ON TABLE pgmem.history IS 'Append-only log of every change to a memory (ADD, UPDATE, EDIT, DELETE, SUPERSEDE, INVALIDATE, EXPIRE) with old and new content and metadata, actor and time. Written only by trigger. EXPIRE is a tombstone without content: pgmem.purge removes the other events of an expired memory.';

COMMENT ON COLUMN pgmem.history.related_id IS 'SUPERSEDE: the memory that replaced this one.';

ALTER TABLE pgmem.history ALTER COLUMN event_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgmem.history_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE SEQUENCE pgmem.memories_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE pgmem.memories_seq OWNED BY pgmem.memories.seq;

COMMENT ON SEQUENCE pgmem.memories_seq IS 'Write order of memories (ties of created_at within a session).';

CREATE VIEW pgmem.memories_view WITH (security_invoker='true') AS
 SELECT m.user_id,
    m.agent_id,
    m.session_id,
    m.content,
    date_trunc('second'::text, (now() - m.created_at)) AS age,
    m.metadata,
    s.name AS space,
    m.id,
    m.created_at,
    m.version
   FROM (pgmem.memories m
     JOIN pgmem.spaces s USING (space_id))
  WHERE ((m.user_id = ( SELECT pgmem.current_user_id() AS current_user_id)) AND (pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()) AND (m.valid_to IS NULL));

COMMENT ON VIEW pgmem.memories_view IS 'The current user''s live memories that hold now: SET pgmem.user_id = ''alice''; SELECT * FROM pgmem.memories_view;';

CREATE TABLE pgmem.memory_sources (
    user_id text NOT NULL,
    memory_id uuid NOT NULL,
    turn_id bigint NOT NULL
);

ALTER TABLE ONLY pgmem.memory_sources FORCE ROW LEVEL SECURITY;

COMMENT ON TABLE pgmem.memory_sources IS 'Links from a consolidated memory to the turns it was made from (turn ids stay after the turns expire).';

CREATE TABLE pgmem.memory_vectors (
    user_id text NOT NULL,
    memory_id uuid NOT NULL,
    n smallint NOT NULL,
    kind text NOT NULL,
    embedding public.vector NOT NULL,
    CONSTRAINT memory_vectors_kind_check CHECK ((kind = ANY (ARRAY['sentence'::text, 'context'::text])))
);

ALTER TABLE ONLY pgmem.memory_vectors FORCE ROW LEVEL SECURITY;

COMMENT ON TABLE pgmem.memory_vectors IS 'Extra embeddings of a memory (per sentence, and with its session''s previous memory as context), same space and dims as the memory; deleted with it and replaced when its content changes.';

CREATE TABLE pgmem.role_bindings (
    role_name name NOT NULL,
    user_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT role_bindings_user_id_check CHECK (((user_id <> ''::text) AND (length(user_id) <= 256)))
);

COMMENT ON TABLE pgmem.role_bindings IS 'Login roles bound to one pgmem user (tenant). A bound login always acts as that user, whatever it sets. Readable only by the schema owner.';

ALTER TABLE pgmem.spaces ALTER COLUMN space_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgmem.spaces_space_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE pgmem.tenant_sizes (
    user_id text NOT NULL,
    space_id integer NOT NULL,
    rows bigint NOT NULL,
    complete boolean NOT NULL,
    counted_at timestamp with time zone NOT NULL
);

ALTER TABLE ONLY pgmem.tenant_sizes FORCE ROW LEVEL SECURITY;

COMMENT ON TABLE pgmem.tenant_sizes IS 'Routing cache: the users with more memories in a space than an exact scan should take (rows: at least that many; complete = false), counted by search at most every pgmem.route_cache_seconds (default 60). Smaller tenants are counted on each search instead (cheap), so that their searches stay reads.';

CREATE TABLE pgmem.turns (
    user_id text NOT NULL,
    turn_id bigint NOT NULL,
    space_id integer NOT NULL,
    session_id text NOT NULL,
    agent_id text,
    role text NOT NULL,
    content text NOT NULL,
    embedding public.vector,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    consolidated_at timestamp with time zone,
    CONSTRAINT turns_agent_id_check CHECK ((length(agent_id) <= 256)),
    CONSTRAINT turns_content_check CHECK (((char_length(content) >= 1) AND (char_length(content) <= 100000))),
    CONSTRAINT turns_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text)),
    CONSTRAINT turns_role_check CHECK ((role = ANY (ARRAY['user'::text, 'assistant'::text, 'system'::text, 'tool'::text]))),
    CONSTRAINT turns_session_id_check CHECK (((session_id <> ''::text) AND (length(session_id) <= 256))),
    CONSTRAINT turns_user_id_check CHECK (((user_id <> ''::text) AND (length(user_id) <= 256)))
);

ALTER TABLE ONLY pgmem.turns FORCE ROW LEVEL SECURITY;

COMMENT ON TABLE pgmem.turns IS 'Conversation turns per user and session (short-term memory), in write order (turn_id), with a time-to-live (own expires_at, else the space''s turn_ttl after created_at). consolidated_at: when pgmem.consolidate turned them into memories.';

ALTER TABLE pgmem.turns ALTER COLUMN turn_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgmem.turns_turn_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY pgmem.memories ALTER COLUMN seq SET DEFAULT nextval('pgmem.memories_seq'::regclass);

ALTER TABLE ONLY pgmem.history
    ADD CONSTRAINT history_pkey PRIMARY KEY (user_id, event_id);

ALTER TABLE ONLY pgmem.memories
    ADD CONSTRAINT memories_pkey PRIMARY KEY (user_id, id);

ALTER TABLE ONLY pgmem.memory_sources
    ADD CONSTRAINT memory_sources_pkey PRIMARY KEY (user_id, memory_id, turn_id);

ALTER TABLE ONLY pgmem.memory_vectors
    ADD CONSTRAINT memory_vectors_pkey PRIMARY KEY (user_id, memory_id, n);

ALTER TABLE ONLY pgmem.role_bindings
    ADD CONSTRAINT role_bindings_pkey PRIMARY KEY (role_name);

ALTER TABLE ONLY pgmem.spaces
    ADD CONSTRAINT spaces_name_key UNIQUE (name);

ALTER TABLE ONLY pgmem.spaces
    ADD CONSTRAINT spaces_pkey PRIMARY KEY (space_id);

ALTER TABLE ONLY pgmem.tenant_sizes
    ADD CONSTRAINT tenant_sizes_pkey PRIMARY KEY (user_id, space_id);

ALTER TABLE ONLY pgmem.turns
    ADD CONSTRAINT turns_pkey PRIMARY KEY (user_id, turn_id);

CREATE INDEX history_expire_idx ON pgmem.history USING btree (user_id, memory_id) WHERE (event = 'EXPIRE'::text);

CREATE INDEX history_user_memory_idx ON pgmem.history USING btree (user_id, memory_id, event_id);

CREATE UNIQUE INDEX memories_content_key ON pgmem.memories USING btree (user_id, space_id, content_hash) WHERE (valid_to IS NULL);

CREATE INDEX memories_expires_at_idx ON pgmem.memories USING btree (expires_at) WHERE (expires_at IS NOT NULL);

CREATE INDEX memories_fts_idx ON pgmem.memories USING gin (fts);

CREATE INDEX memories_user_agent_idx ON pgmem.memories USING btree (user_id, agent_id);

CREATE INDEX memories_user_session_idx ON pgmem.memories USING btree (user_id, session_id, created_at, seq);

CREATE INDEX memories_user_space_created_idx ON pgmem.memories USING btree (user_id, space_id, created_at, id);

CREATE INDEX memories_user_superseded_by_idx ON pgmem.memories USING btree (user_id, superseded_by) WHERE (superseded_by IS NOT NULL);

CREATE INDEX memory_sources_turn_idx ON pgmem.memory_sources USING btree (user_id, turn_id);

CREATE INDEX turns_created_at_idx ON pgmem.turns USING btree (created_at);

CREATE INDEX turns_user_session_idx ON pgmem.turns USING btree (user_id, space_id, session_id, turn_id);

CREATE TRIGGER history_append_only BEFORE UPDATE ON pgmem.history FOR EACH ROW EXECUTE FUNCTION pgmem._history_append_only();

CREATE TRIGGER memories_before_write BEFORE INSERT OR UPDATE ON pgmem.memories FOR EACH ROW EXECUTE FUNCTION pgmem._memories_before_write();

CREATE TRIGGER memories_history AFTER INSERT OR DELETE OR UPDATE ON pgmem.memories FOR EACH ROW EXECUTE FUNCTION pgmem._memories_history();

CREATE TRIGGER memory_vectors_before_insert BEFORE INSERT ON pgmem.memory_vectors FOR EACH ROW EXECUTE FUNCTION pgmem._memory_vectors_before_insert();

ALTER TABLE ONLY pgmem.memories
    ADD CONSTRAINT memories_space_fkey FOREIGN KEY (space_id) REFERENCES pgmem.spaces(space_id);

ALTER TABLE ONLY pgmem.memory_sources
    ADD CONSTRAINT memory_sources_memory_fkey FOREIGN KEY (user_id, memory_id) REFERENCES pgmem.memories(user_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY pgmem.memory_vectors
    ADD CONSTRAINT memory_vectors_memory_fkey FOREIGN KEY (user_id, memory_id) REFERENCES pgmem.memories(user_id, id) ON DELETE CASCADE;

ALTER TABLE ONLY pgmem.tenant_sizes
    ADD CONSTRAINT tenant_sizes_space_fkey FOREIGN KEY (space_id) REFERENCES pgmem.spaces(space_id);

ALTER TABLE ONLY pgmem.turns
    ADD CONSTRAINT turns_space_fkey FOREIGN KEY (space_id) REFERENCES pgmem.spaces(space_id);

ALTER TABLE pgmem.history ENABLE ROW LEVEL SECURITY;

CREATE POLICY history_tenant ON pgmem.history USING ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id))) WITH CHECK ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id)));

ALTER TABLE pgmem.memories ENABLE ROW LEVEL SECURITY;

CREATE POLICY memories_tenant ON pgmem.memories USING ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id))) WITH CHECK ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id)));

ALTER TABLE pgmem.memory_sources ENABLE ROW LEVEL SECURITY;

CREATE POLICY memory_sources_tenant ON pgmem.memory_sources USING ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id))) WITH CHECK ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id)));

ALTER TABLE pgmem.memory_vectors ENABLE ROW LEVEL SECURITY;

CREATE POLICY memory_vectors_tenant ON pgmem.memory_vectors USING ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id))) WITH CHECK ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id)));

ALTER TABLE pgmem.tenant_sizes ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_sizes_tenant ON pgmem.tenant_sizes USING ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id))) WITH CHECK ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id)));

ALTER TABLE pgmem.turns ENABLE ROW LEVEL SECURITY;

CREATE POLICY turns_tenant ON pgmem.turns USING ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id))) WITH CHECK ((user_id = ( SELECT pgmem.current_user_id() AS current_user_id)));
