-- pgmem API-only access: agents and gateways execute the API functions and hold nothing on the tables
-- depends: 0006.pgmem-exact-plans

-- What this migration changes (docs/security.md is the threat model):
--   * A NOLOGIN role pgmem_api owns the API functions, which run as SECURITY DEFINER. pgmem_agent and
--     pgmem_gateway keep EXECUTE on the API and lose every privilege on tables and sequences (no SELECT,
--     UPDATE, DELETE, TRUNCATE, LOCK), so an agent cannot run its own scan over the shared HNSW index or
--     lock a shared table. pgmem_api is no superuser and has no BYPASSRLS: row-level security still decides
--     which rows an API call sees, whoever the schema owner is.
--   * Every function of the schema pins search_path = pg_catalog, pgmem, pg_temp (pg_temp last, never
--     public). pgvector's objects are written schema-qualified: its schema is looked up here, at migration
--     time, and put in place of @vector@ by pgmem._define (never assumed to be public).
--   * Identity: role bindings are keyed by the role's OID (a dropped role's binding does not pass to a new
--     role of the same name). The history trigger takes the event from the row itself (SUPERSEDE,
--     INVALIDATE, EXPIRE) and trusts the actor only from the API functions, which set it on every write.
--   * Sizes are enforced in SQL too: content before its full-text vector is built, metadata bytes, filter
--     size and conditions.
--   * Planner statistics of tenant tables are not collected (statistics target 0) and the existing ones
--     are removed, so EXPLAIN's estimates do not reveal another tenant's row counts or values.
-- Released migrations (0001-0006) stay as they are.

DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;

-- ---------------------------------------------------------------------------------------------------------
-- The role that owns the API functions
-- ---------------------------------------------------------------------------------------------------------
DO $pgmem$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_api') THEN
        CREATE ROLE pgmem_api NOLOGIN NOINHERIT NOBYPASSRLS;
        -- (commenting on a role needs CREATEROLE: only where it is created)
        COMMENT ON ROLE pgmem_api IS 'pgmem: owns the API functions (SECURITY DEFINER) and holds the table privileges they need; never a login, no BYPASSRLS.';
    END IF;
    -- The schema owner hands its functions to pgmem_api (ALTER FUNCTION ... OWNER TO), so it must be able
    -- to SET ROLE pgmem_api. A superuser can anyway; a role that just created pgmem_api holds ADMIN on it.
    IF NOT pg_catalog.pg_has_role(current_user, 'pgmem_api', 'SET') THEN
        EXECUTE pg_catalog.format('GRANT pgmem_api TO %I', current_user);
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE EXCEPTION 'pgmem needs the role pgmem_api, granted to the schema owner "%", and that role may not create or grant it', current_user
        USING ERRCODE = 'PGM00',
              HINT = pg_catalog.format('Ask a DBA to run: CREATE ROLE pgmem_api NOLOGIN NOINHERIT NOBYPASSRLS; GRANT pgmem_api TO %I;', current_user);
END
$pgmem$;

GRANT USAGE ON SCHEMA pgmem TO pgmem_api;

-- pgvector's schema, and the helper that writes it into a definition. Owner only.
CREATE FUNCTION pgmem._vector_schema() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT n.nspname::text FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'vector'
$$;
COMMENT ON FUNCTION pgmem._vector_schema() IS 'Internal: the schema pgvector is installed in (pg_extension), which definitions name in place of @vector@.';

CREATE FUNCTION pgmem._define(p_sql text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_schema text := pgmem._vector_schema();
BEGIN
    IF v_schema IS NULL THEN
        RAISE EXCEPTION 'pgvector is not installed in this database' USING ERRCODE = 'PGM00', HINT = 'CREATE EXTENSION vector;';
    END IF;
    EXECUTE replace(p_sql, '@vector@', quote_ident(v_schema));
END
$$;
COMMENT ON FUNCTION pgmem._define(text) IS
    'Migrations only (schema owner): run a definition after putting pgvector''s schema, quoted, in place of every @vector@, so that definer functions name pgvector''s types, functions and operators schema-qualified.';

-- ---------------------------------------------------------------------------------------------------------
-- Identity: bindings keyed by the role's OID
-- ---------------------------------------------------------------------------------------------------------
ALTER TABLE pgmem.role_bindings ADD COLUMN role_oid oid;
UPDATE pgmem.role_bindings b SET role_oid = r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = b.role_name;
DELETE FROM pgmem.role_bindings WHERE role_oid IS NULL;  -- bindings of roles dropped since: no one may inherit them
ALTER TABLE pgmem.role_bindings DROP CONSTRAINT role_bindings_pkey;
ALTER TABLE pgmem.role_bindings ALTER COLUMN role_oid SET NOT NULL;
ALTER TABLE pgmem.role_bindings ADD CONSTRAINT role_bindings_pkey PRIMARY KEY (role_oid);
COMMENT ON COLUMN pgmem.role_bindings.role_oid IS 'The bound role (pg_roles.oid): a role dropped and created again under the same name is not bound.';
COMMENT ON COLUMN pgmem.role_bindings.role_name IS 'The role''s name when it was bound (for people; identity is role_oid).';

CREATE OR REPLACE FUNCTION pgmem.current_user_id() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT CASE WHEN b.found THEN b.user_id
                WHEN pg_catalog.pg_has_role(session_user, 'pgmem_gateway', 'MEMBER')
                THEN nullif(pg_catalog.current_setting('pgmem.user_id', true), '')
           END
    FROM (SELECT count(*) > 0 AS found, max(rb.user_id) AS user_id FROM pgmem.role_bindings rb
          WHERE rb.role_oid = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)) b
$$;

CREATE OR REPLACE FUNCTION pgmem.act_as(p_user_id text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_bound text;
BEGIN
    IF p_user_id IS NULL OR p_user_id = '' OR length(p_user_id) > 256 THEN
        RAISE EXCEPTION 'user id must be a non-empty text of at most 256 characters' USING ERRCODE = 'PGM08';
    END IF;
    SELECT b.user_id INTO v_bound FROM pgmem.role_bindings b
    WHERE b.role_oid = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user);
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

CREATE OR REPLACE FUNCTION pgmem.bind_role(p_role name, p_user_id text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_oid oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
BEGIN
    IF v_oid IS NULL THEN
        RAISE EXCEPTION 'role "%" does not exist', p_role USING ERRCODE = 'PGM03';
    END IF;
    IF p_user_id IS NULL OR p_user_id = '' OR length(p_user_id) > 256 THEN
        RAISE EXCEPTION 'user id must be a non-empty text of at most 256 characters' USING ERRCODE = 'PGM08';
    END IF;
    -- A binding left by a dropped role of the same name goes (its OID is gone).
    DELETE FROM pgmem.role_bindings b
    WHERE b.role_name = p_role AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = b.role_oid);
    INSERT INTO pgmem.role_bindings (role_oid, role_name, user_id) VALUES (v_oid, p_role, p_user_id)
    ON CONFLICT (role_oid) DO UPDATE SET role_name = EXCLUDED.role_name, user_id = EXCLUDED.user_id, created_at = now();
END
$$;
COMMENT ON FUNCTION pgmem.bind_role(name, text) IS
    'Schema owner only: bind a login role (by its OID) to one pgmem user. The role must also be granted pgmem_agent. A role dropped and created again under the same name must be bound again.';

CREATE OR REPLACE FUNCTION pgmem.unbind_role(p_role name) RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    WITH d AS (
        DELETE FROM pgmem.role_bindings b
        WHERE b.role_name = p_role OR b.role_oid = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role)
        RETURNING 1)
    SELECT count(*) > 0 FROM d
$$;

-- ---------------------------------------------------------------------------------------------------------
-- History: the event comes from the row, the actor only from pgmem's own code
-- ---------------------------------------------------------------------------------------------------------
-- Runs as the writer (SECURITY INVOKER): for the API that is pgmem_api, whose functions set pgmem.actor
-- (and pgmem.event for UPDATE or EDIT) right before every write, so a value a caller SET beforehand never
-- reaches history. Writes by anyone else (the schema owner at psql, a superuser) are recorded with no
-- actor and events judged from the rows alone. SUPERSEDE, INVALIDATE and EXPIRE are read off the row;
-- nothing suppresses a history row (erase_user deletes history after the memories).
CREATE OR REPLACE FUNCTION pgmem._memories_history() RETURNS trigger
LANGUAGE plpgsql
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
            VALUES (OLD.user_id, OLD.id, 'EXPIRE', v_actor);
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

-- ---------------------------------------------------------------------------------------------------------
-- Definitions that name pgvector's objects (@vector@), the filter compiler with its limits, and the
-- generator of search's statements. Bodies otherwise as in migrations 0002-0006.
-- ---------------------------------------------------------------------------------------------------------
DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._compile_filter(p_filter jsonb, p_keys_param integer, p_vals_param integer, p_acc pgmem.compiled_filter DEFAULT ROW('true'::text, '{}'::text[], '{}'::jsonb[])::pgmem.compiled_filter, p_depth integer DEFAULT 0)
 RETURNS pgmem.compiled_filter
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
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
    -- Bounded before any work (a 4,000-clause $or took seconds): at most 64 KiB of JSON and 256 objects.
    IF p_depth = 0 AND p_filter IS NOT NULL THEN
        IF octet_length(p_filter::text) > 65536 THEN
            RAISE EXCEPTION 'invalid filter: % bytes as JSON; the limit is 65536', octet_length(p_filter::text) USING ERRCODE = 'PGM07';
        END IF;
        IF (SELECT count(*) FROM jsonb_path_query(p_filter, 'strict $.**') AS x(v) WHERE jsonb_typeof(x.v) = 'object') > 256 THEN
            RAISE EXCEPTION 'invalid filter: more than 256 conditions' USING ERRCODE = 'PGM07',
                HINT = 'Use $in with a list of values instead of many $or clauses on one key.';
        END IF;
    END IF;
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
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._memories_before_write()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
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
        IF NEW.embedding OPERATOR(@vector@.=) OLD.embedding THEN
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
    IF @vector@.vector_dims(NEW.embedding) <> v_space.dims THEN
        RAISE EXCEPTION 'expected % dimensions, got % (space "%", model "%")',
            v_space.dims, @vector@.vector_dims(NEW.embedding), v_space.name, v_space.model USING ERRCODE = 'PGM02';
    END IF;
    IF @vector@.vector_norm(NEW.embedding) = 0 OR (NEW.embedding OPERATOR(@vector@.<=>) NEW.embedding) = 'NaN'::float8 THEN
        RAISE EXCEPTION 'a zero vector (or one whose float4 squared norm underflows or overflows) has no cosine similarity' USING ERRCODE = 'PGM08';
    END IF;
    RETURN NEW;
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._memory_vectors_before_insert()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
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
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.create_space(p_name text, p_model text, p_dims integer, p_distance text DEFAULT 'cosine'::text, p_hnsw_m integer DEFAULT 16, p_hnsw_ef_construction integer DEFAULT 64, p_text_config regconfig DEFAULT 'english'::regconfig)
 RETURNS pgmem.spaces
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
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
        EXECUTE format('CREATE INDEX memories_space_%s_hnsw ON pgmem.memories USING hnsw ((embedding::@vector@.vector(%s)) @vector@.vector_cosine_ops) WITH (m = %s, ef_construction = %s) WHERE space_id = %s',
                       v_space.space_id, p_dims, p_hnsw_m, p_hnsw_ef_construction, v_space.space_id);
    ELSIF v_kind = 'hnsw_halfvec' THEN
        EXECUTE format('CREATE INDEX memories_space_%s_hnsw ON pgmem.memories USING hnsw ((embedding::@vector@.halfvec(%s)) @vector@.halfvec_cosine_ops) WITH (m = %s, ef_construction = %s) WHERE space_id = %s',
                       v_space.space_id, p_dims, p_hnsw_m, p_hnsw_ef_construction, v_space.space_id);
    END IF;
    IF v_kind <> 'exact' THEN
        PERFORM pgmem._build_knn();  -- the new space's HNSW statement, planned once per connection
    END IF;
    RETURN v_space;
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._checked_space(p_space text, p_embedding @vector@.vector, p_model text)
 RETURNS pgmem.spaces
 LANGUAGE plpgsql
 STABLE
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
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
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.search(p_space text, p_embedding @vector@.vector, p_k integer DEFAULT 10, p_agent_id text DEFAULT NULL::text, p_session_id text DEFAULT NULL::text, p_filter jsonb DEFAULT NULL::jsonb, p_min_similarity double precision DEFAULT NULL::double precision, p_model text DEFAULT NULL::text, p_created_after timestamp with time zone DEFAULT NULL::timestamp with time zone, p_created_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_as_of timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF pgmem.memory
 LANGUAGE plpgsql
 SET "hnsw.ef_search" TO '100'
 SET "hnsw.iterative_scan" TO 'relaxed_order'
 SET "hnsw.max_scan_tuples" TO '20000'
 SET enable_sort TO 'on'
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
DECLARE
    v_user text := pgmem._require_user();
    v_space pgmem.spaces := pgmem._checked_space(p_space, p_embedding, p_model);
    v_threshold integer := coalesce(nullif(current_setting('pgmem.exact_search_max_rows', true), '')::integer, 5000);
    v_plain boolean := p_agent_id IS NULL AND p_session_id IS NULL AND p_created_after IS NULL
                       AND p_created_before IS NULL AND p_as_of IS NULL AND (p_filter IS NULL OR p_filter = '{}'::jsonb);
    v_static boolean := p_as_of IS NULL AND (p_filter IS NULL OR p_filter = '{}'::jsonb);
    v_scope record;
    v_n bigint;
    v_stored bigint;
    v_fresh_large boolean;
    v_exact record;
    v_ids uuid[];
    v_ef integer;
    v_ef_setting text;
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

    -- Routing. A shared HNSW index post-filters: for a tenant (or filter) holding a small share of the
    -- space it returns too few rows. So count the matching rows, capped, and scan them exactly when few.
    -- A plain search of a large tenant whose size is cached (pgmem.tenant_sizes) needs no count at all.
    IF v_space.index_kind <> 'exact' THEN
        IF v_plain THEN
            SELECT t.rows, t.rows > v_threshold
                   AND t.counted_at > now() - make_interval(secs => coalesce(nullif(current_setting('pgmem.route_cache_seconds', true), '')::integer, 60))
            INTO v_stored, v_fresh_large
            FROM pgmem.tenant_sizes t WHERE t.user_id = v_user AND t.space_id = v_space.space_id;
            IF v_fresh_large THEN
                v_n := v_stored;
            END IF;
        END IF;
        -- No filter, no as-of, no stored size (one that is not fresh, or no longer large, is checked by
        -- _matching_rows below, which stores the new count or removes it): the generated statement (migration
        -- 0006) counts the matching rows, capped, and finds the k nearest of them in the same pass.
        IF v_n IS NULL AND v_static AND v_stored IS NULL THEN
            -- (An assignment, not SELECT ... INTO: PL/pgSQL evaluates a lone function call without a statement.)
            v_exact := pgmem._exact_ids(v_user, p_agent_id, p_session_id, p_created_after, p_created_before, NULL, NULL, NULL,
                                        p_embedding, p_k, v_threshold + 1, v_space.space_id, v_space.memory_ttl);
            v_n := v_exact.o_rows;
            v_ids := v_exact.o_ids;
            IF v_n > v_threshold THEN
                v_ids := NULL;  -- many rows: HNSW below
                IF v_plain THEN
                    v_n := NULL;  -- a large tenant without a stored size: counted again just below, which stores it
                END IF;
            END IF;
        END IF;
        IF v_n IS NULL THEN
            v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
            v_n := pgmem._matching_rows(v_user, v_space, v_scope.o_sql, v_scope.o_filter, v_threshold,
                                        p_agent_id, p_session_id, p_created_after, p_created_before, p_filter, p_as_of);
        END IF;
    END IF;

    IF v_ids IS NULL AND v_space.index_kind <> 'exact' AND v_n > v_threshold THEN
        -- ef_search: max(pgmem.hnsw_ef_search (default 100), 2k), at most 1000 (pgvector's limit).
        v_ef_setting := nullif(current_setting('pgmem.hnsw_ef_search', true), '');
        IF v_ef_setting IS NOT NULL AND (v_ef_setting !~ '^[0-9]{1,4}$' OR v_ef_setting::integer NOT BETWEEN 1 AND 1000) THEN
            RAISE EXCEPTION 'pgmem.hnsw_ef_search must be an integer from 1 to 1000, got %', quote_literal(v_ef_setting)
                USING ERRCODE = 'PGM08';
        END IF;
        v_ef := least(1000, greatest(coalesce(v_ef_setting::integer, 100), 2 * p_k));
        IF v_ef <> 100 THEN
            PERFORM set_config('hnsw.ef_search', v_ef::text, true);
        END IF;
        IF p_k > 100 THEN
            PERFORM set_config('hnsw.max_scan_tuples', (200 * p_k)::text, true);
        END IF;
        IF v_static THEN
            v_ids := pgmem._knn(v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
                                NULL, NULL, NULL, p_embedding, p_k, v_space.space_id, v_space.memory_ttl);
        END IF;
        IF v_ids IS NULL THEN  -- a metadata filter or as-of (or a space _knn does not know): the same, dynamic
            IF v_scope IS NULL THEN
                v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
            END IF;
            PERFORM set_config('enable_sort', 'off', true);
            EXECUTE pgmem._knn_sql(v_space, v_scope.o_sql) INTO v_ids
            USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
                  (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text, p_embedding, p_k;
            PERFORM set_config('enable_sort', 'on', true);
        END IF;
        IF coalesce(cardinality(v_ids), 0) < p_k THEN
            -- The index gave fewer than k rows (a filter selective across the whole index): fall back to the
            -- exact scan below, which returns min(k, matching rows).
            v_ids := NULL;
        END IF;
    END IF;

    IF v_ids IS NOT NULL THEN
        -- The k nearest by the HNSW index (its order approximate: halfvec, relaxed_order) or by the generated
        -- exact statement: the rows come back in exact order.
        RETURN QUERY
            SELECT m.id, m.user_id, v_space.name, m.agent_id, m.session_id, m.content, m.metadata, m.created_at,
                   m.updated_at, nullif(pgmem._expiry(m.expires_at, m.created_at, v_space.memory_ttl), 'infinity'),
                   m.version, greatest(-1, least(1, 1 - (m.embedding OPERATOR(@vector@.<=>) p_embedding))),
                   m.valid_from, m.valid_to, m.superseded_by
            -- unnest + join, not id = ANY(...): the cached generic plan of the latter scanned
            -- memories_user_space_created_idx instead of the primary key (1.5 ms instead of 0.3).
            FROM unnest(v_ids) AS u(id) JOIN pgmem.memories m ON m.user_id = v_user AND m.id = u.id
            WHERE p_min_similarity IS NULL OR 1 - (m.embedding OPERATOR(@vector@.<=>) p_embedding) >= p_min_similarity
            ORDER BY m.embedding OPERATOR(@vector@.<=>) p_embedding, m.id;
        RETURN;
    END IF;

    IF v_scope IS NULL THEN
        v_scope := pgmem._scope_sql(v_space.space_id, p_filter, p_as_of);
    END IF;
    RETURN QUERY EXECUTE pgmem._exact_sql(v_space, v_scope.o_sql)
    USING v_user, p_agent_id, p_session_id, p_created_after, p_created_before,
          (v_scope.o_filter).keys, (v_scope.o_filter).vals, NULL::text,
          p_embedding, p_k, v_space.name, p_min_similarity;
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.search_hybrid(p_space text, p_query text, p_embedding @vector@.vector DEFAULT NULL::@vector@.vector, p_k integer DEFAULT 10, p_agent_id text DEFAULT NULL::text, p_session_id text DEFAULT NULL::text, p_filter jsonb DEFAULT NULL::jsonb, p_created_after timestamp with time zone DEFAULT NULL::timestamp with time zone, p_created_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_text_weight double precision DEFAULT 0.4, p_vector_weight double precision DEFAULT 0.6, p_speaker_weight double precision DEFAULT 0.2, p_session_weight double precision DEFAULT 0.4, p_model text DEFAULT NULL::text, p_as_of timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF pgmem.hybrid_hit
 LANGUAGE plpgsql
 SET "hnsw.ef_search" TO '40'
 SET "hnsw.iterative_scan" TO 'relaxed_order'
 SET "hnsw.max_scan_tuples" TO '20000'
 SET enable_sort TO 'on'
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
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
            v_cast := CASE v_space.index_kind WHEN 'hnsw_halfvec' THEN '@vector@.halfvec' ELSE '@vector@.vector' END || '(' || v_space.dims || ')';
            PERFORM set_config('hnsw.ef_search', least(1000, v_pool)::text, true);
            PERFORM set_config('hnsw.max_scan_tuples', greatest(20000, 200 * p_k)::text, true);
            PERFORM set_config('enable_sort', 'off', true);
            EXECUTE format(
                'SELECT array(SELECT c.id FROM (SELECT m.id FROM pgmem.memories m WHERE %1$s AND m.fts @@ $14'
                || ' ORDER BY ts_rank(m.fts, $14) DESC LIMIT %2$s) c'
                || CASE WHEN p_embedding IS NULL THEN '' ELSE
                   ' UNION SELECT d.id FROM (SELECT m.id FROM pgmem.memories m WHERE %1$s'
                   || ' ORDER BY (m.embedding::%3$s) OPERATOR(@vector@.<=>) (@vector@.l2_normalize($9)::%3$s) LIMIT %2$s) d' END || ')',
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
            SELECT u.id, 1 - (u.embedding OPERATOR(@vector@.<=>) $9) AS sim,
                   greatest(1 - (u.embedding OPERATOR(@vector@.<=>) $9),
                            coalesce((SELECT max(1 - (v.embedding OPERATOR(@vector@.<=>) $9)) FROM pgmem.memory_vectors v
                                      WHERE v.user_id = $1 AND v.memory_id = u.id AND v.kind = 'sentence'), -1))
                 + coalesce((SELECT 1 - (v.embedding OPERATOR(@vector@.<=>) $9) FROM pgmem.memory_vectors v
                             WHERE v.user_id = $1 AND v.memory_id = u.id AND v.kind = 'context' ORDER BY v.n LIMIT 1),
                            1 - (u.embedding OPERATOR(@vector@.<=>) $9)) AS s
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
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.import_user(p_rows jsonb[])
 RETURNS TABLE(kind text, imported bigint, skipped bigint)
 LANGUAGE plpgsql
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
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
        v_space := pgmem._checked_space(v_row ->> 'space', (v_row ->> 'embedding')::@vector@.vector, NULL);
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
                (v_row ->> 'embedding')::@vector@.vector, coalesce(v_row -> 'metadata', '{}'), (v_row ->> 'created_at')::timestamptz,
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
        v_space := pgmem._checked_space(v_row ->> 'space', (v_row ->> 'embedding')::@vector@.vector, NULL);
        INSERT INTO pgmem.memories AS m (user_id, id, space_id, agent_id, session_id, content, embedding, metadata, created_at,
                                         expires_at, valid_from, valid_to, superseded_by)
        VALUES (v_user, (v_row ->> 'id')::uuid, v_space.space_id, v_row ->> 'agent_id', v_row ->> 'session_id', v_row ->> 'content',
                (v_row ->> 'embedding')::@vector@.vector, coalesce(v_row -> 'metadata', '{}'), (v_row ->> 'created_at')::timestamptz,
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
        SELECT v_user, v_id, e.o, e.v ->> 'kind', (e.v ->> 'embedding')::@vector@.vector
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
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._knn_sql(p_space pgmem.spaces, p_scope text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
    -- The query is normalised first (cosine ignores length), so its halfvec copy neither overflows
    -- (components beyond +-65504) nor underflows to a zero vector.
    SELECT format('SELECT array_agg(h.id) FROM (SELECT m.id FROM pgmem.memories m WHERE %2$s'
                  ' ORDER BY (m.embedding::%1$s) OPERATOR(@vector@.<=>) (@vector@.l2_normalize($9)::%1$s) LIMIT $10) h',
                  CASE p_space.index_kind WHEN 'hnsw_halfvec' THEN '@vector@.halfvec' ELSE '@vector@.vector' END || '(' || p_space.dims || ')',
                  p_scope)
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._build_knn()
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
DECLARE
    v_space pgmem.spaces;
    v_body text := '';
    v_exact text := '';
    v_scope text;
    v_test text;
BEGIN
    -- Two sessions creating spaces at once would otherwise both replace the function ("tuple concurrently
    -- updated").
    PERFORM pg_advisory_xact_lock(hashtext('pgmem._build_knn'));
    FOR v_space IN SELECT * FROM pgmem.spaces s WHERE s.index_kind <> 'exact' ORDER BY s.space_id LOOP
        v_scope := (pgmem._scope_sql(v_space.space_id, NULL::jsonb, NULL::timestamptz)).o_sql;
        v_test := format('p_space_id = %s AND p_ttl IS NOT DISTINCT FROM %L::interval', v_space.space_id, v_space.memory_ttl);
        v_body := v_body || format(E'    IF %s THEN\n        RETURN (%s);\n    END IF;\n',
            v_test, pgmem._knn_sql(v_space, v_scope));
        v_exact := v_exact || format(E'    IF %s THEN\n        %s INTO o_rows, o_ids;\n        RETURN;\n    END IF;\n',
            v_test, pgmem._exact_ids_sql(v_scope));
    END LOOP;
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION pgmem._knn(
    p_user text, p_agent_id text, p_session_id text, p_created_after timestamptz, p_created_before timestamptz,
    p_keys text[], p_vals jsonb[], p_contains text, p_embedding @vector@.vector, p_k integer, p_space_id integer, p_ttl interval
) RETURNS uuid[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp SET plan_cache_mode = force_generic_plan SET enable_sort = off
AS $knn$
BEGIN
    -- Generated by pgmem._build_knn() from pgmem.spaces: do not edit.
%s    RETURN NULL;  -- not generated for this space or TTL: the caller runs the same statement as dynamic SQL
END
$knn$;
$f$, v_body);
    COMMENT ON FUNCTION pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, integer, interval) IS
        'Internal, generated by pgmem._build_knn(): the ids of the k nearest memories of the current user in a space by its HNSW index (plain scope), or NULL when not generated for that space and TTL.';
    REVOKE EXECUTE ON FUNCTION pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, integer, interval) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION pgmem._knn(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, integer, interval) TO pgmem_api;

    -- The exact route's statement (migration 0006), for the same spaces and TTLs.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION pgmem._exact_ids(
    p_user text, p_agent_id text, p_session_id text, p_created_after timestamptz, p_created_before timestamptz,
    p_keys text[], p_vals jsonb[], p_contains text, p_embedding @vector@.vector, p_k integer, p_cap bigint,
    p_space_id integer, p_ttl interval, OUT o_rows bigint, OUT o_ids uuid[]
)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp SET plan_cache_mode = force_generic_plan
AS $exact$
BEGIN
    -- Generated by pgmem._build_knn() from pgmem.spaces: do not edit.
%s    -- not generated for this space or TTL (o_rows NULL): the caller runs the dynamic statements
END
$exact$;
$f$, v_exact);
    COMMENT ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, bigint, integer, interval) IS
        'Internal, generated by pgmem._build_knn(): how many memories of the current user in a space match the plain scope (agent, session, time range), at most p_cap, and the ids of the k nearest of them by exact cosine distance; o_rows NULL when not generated for that space and TTL.';
    REVOKE EXECUTE ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, bigint, integer, interval) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION pgmem._exact_ids(text, text, text, timestamptz, timestamptz, text[], jsonb[], text, @vector@.vector, integer, bigint, integer, interval) TO pgmem_api;
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem.add_batch(p_space text, p_contents text[], p_embeddings @vector@.vector[], p_agent_ids text[] DEFAULT NULL::text[], p_session_ids text[] DEFAULT NULL::text[], p_metadata jsonb[] DEFAULT NULL::jsonb[], p_expires_at timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_model text DEFAULT NULL::text, p_created_at timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_vector_items integer[] DEFAULT NULL::integer[], p_vector_kinds text[] DEFAULT NULL::text[], p_vectors @vector@.vector[] DEFAULT NULL::@vector@.vector[], p_ids uuid[] DEFAULT NULL::uuid[], p_user_ids text[] DEFAULT NULL::text[])
 RETURNS TABLE(ordinal integer, id uuid, created boolean)
 LANGUAGE plpgsql
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
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
    v_out_o integer[] := '{}';
    v_out_id uuid[] := '{}';
    v_out_created boolean[] := '{}';
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
    IF coalesce(cardinality(p_vector_items), 0) <> coalesce(cardinality(p_vector_kinds), 0)
       OR coalesce(cardinality(p_vector_items), 0) <> coalesce(cardinality(p_vectors), 0) THEN
        RAISE EXCEPTION 'extra vectors: items, kinds and vectors must have the same length' USING ERRCODE = 'PGM08';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_vector_items) AS e(item) WHERE e.item IS NULL OR e.item < 0 OR e.item >= v_n) THEN
        RAISE EXCEPTION 'extra vectors: item numbers must be from 0 to %', v_n - 1 USING ERRCODE = 'PGM08';
    END IF;

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
        -- seq follows item order (the order of turns), whatever order the rows are inserted in.
        WITH items AS MATERIALIZED (
            SELECT g.o, nextval('pgmem.memories_seq') AS seq
            FROM unnest(v_sel) AS g(o) LEFT JOIN unnest(v_known) AS kn(id) ON kn.id = p_ids[g.o]
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
            RETURNING m.id, m.seq
        )
        SELECT coalesce(array_agg(ins.id ORDER BY items.o), '{}') INTO v_created
        FROM ins JOIN items ON items.seq = ins.seq;
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
            INSERT INTO pgmem.memory_vectors (user_id, memory_id, n, kind, embedding)
            SELECT v_user, s.id, row_number() OVER (PARTITION BY e.item ORDER BY e.i), e.kind, e.emb
            FROM unnest(p_vector_items, p_vector_kinds, p_vectors) WITH ORDINALITY AS e(item, kind, emb, i)
            JOIN unnest(v_sel, v_ids, v_flags) AS s(o, id, created) ON s.o = e.item + 1
            WHERE s.created;
        END IF;
        v_out_o := v_out_o || v_sel;
        v_out_id := v_out_id || v_ids;
        v_out_created := v_out_created || v_flags;
    END LOOP;
    IF p_user_ids IS NOT NULL THEN
        PERFORM set_config('pgmem.user_id', coalesce(v_prev_user, ''), true);  -- the caller's identity again
    END IF;
    RETURN QUERY SELECT (r.o - 1)::integer, r.id, r.created FROM unnest(v_out_o, v_out_id, v_out_created) AS r(o, id, created) ORDER BY r.o;
END
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._exact_sql(p_space pgmem.spaces, p_scope text)
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
    SELECT format('SELECT %2$s FROM pgmem.memories m WHERE %1$s'
                  ' AND ($12::float8 IS NULL OR 1 - (m.embedding OPERATOR(@vector@.<=>) $9) >= $12)'
                  ' ORDER BY m.embedding OPERATOR(@vector@.<=>) $9, m.id LIMIT $10', p_scope,
                  pgmem._memory_columns('$11', 'greatest(-1, least(1, 1 - (m.embedding OPERATOR(@vector@.<=>) $9)))', p_space.memory_ttl))
$function$
$def$); END $pgmem$;

DO $pgmem$ BEGIN PERFORM pgmem._define($def$
CREATE OR REPLACE FUNCTION pgmem._exact_ids_sql(p_scope text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path = pg_catalog, pgmem, pg_temp
AS $function$
    SELECT format('SELECT count(*), coalesce((array_agg(c.id ORDER BY c.d, c.id))[1:$10], ''{}'')'
                  ' FROM (SELECT m.id, m.embedding OPERATOR(@vector@.<=>) $9 AS d FROM pgmem.memories m WHERE %s LIMIT $11) c', p_scope)
$function$
$def$); END $pgmem$;


-- ---------------------------------------------------------------------------------------------------------
-- Privileges, in one place. Four kinds of function:
--   API (owned by pgmem_api, SECURITY DEFINER; EXECUTE: pgmem_agent, so gateways too): the calls agents make.
--   Owner-run (owned by the schema owner, SECURITY DEFINER): identity (current_user_id, act_as), and the
--     gateway's space administration, which writes DDL (create_space, set_retention; EXECUTE: pgmem_gateway).
--   Invoker, callable by agents: pure helpers (token_count, count_occurrences, content_hash, as_user) and
--     maintenance that checks for a superuser or BYPASSRLS caller itself (purge, erase_user).
--   Internal: EXECUTE for pgmem_api only (called inside the API); owner only: bindings, migrations helpers.
-- Every function pins search_path = pg_catalog, pgmem, pg_temp, the generated ones included (_build_knn).
-- ---------------------------------------------------------------------------------------------------------
DO $pgmem$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, pgmem, pg_temp', v_fn);
    END LOOP;
END
$pgmem$;

-- One exception, pgmem._expiry: a one-expression SQL function that PostgreSQL inlines into the statements
-- (and the view) that call it, which a SET clause would prevent (stats of a 30,000-row tenant 60 -> 117 ms,
-- bench/FINDINGS.md S9). Its body names only pg_catalog's coalesce, timestamptz + interval and the type
-- timestamptz, each an exact match that pg_catalog, searched first, always provides; tests/security checks
-- that the body stays so.
ALTER FUNCTION pgmem._expiry(timestamptz, timestamptz, interval) RESET search_path;

-- pgmem_api may create in the schema only while it takes over its functions (ALTER ... OWNER TO needs it).
GRANT CREATE ON SCHEMA pgmem TO pgmem_api;
DO $pgmem$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proname = ANY (ARRAY[
                    'space', 'add', 'add_batch', 'get', 'update', 'edit', 'delete', 'delete_all', 'stats', 'session_tail',
                    'supersede', 'invalidate', 'chain', 'list', 'search', 'search_hybrid', 'history',
                    'append_turn', 'recent_turns', 'pending_turns', 'consolidate', 'sources', 'context',
                    'export_user', 'import_user'])
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SECURITY DEFINER', v_fn);
        EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO pgmem_api', v_fn);
    END LOOP;
END
$pgmem$;
ALTER VIEW pgmem.memories_view OWNER TO pgmem_api;
REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api;

REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmem FROM PUBLIC, pgmem_agent, pgmem_gateway;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmem TO pgmem_api;
REVOKE EXECUTE ON FUNCTION
    pgmem.bind_role(name, text), pgmem.unbind_role(name), pgmem.schedule_purge(text), pgmem._build_knn(),
    pgmem._define(text), pgmem._vector_schema(), pgmem.create_space(text, text, integer, text, integer, integer, regconfig),
    pgmem.set_retention(text, interval, interval), pgmem.purge(integer), pgmem.erase_user(text)
FROM pgmem_api;
GRANT EXECUTE ON FUNCTION
    pgmem.space(text),
    pgmem.add(text, text, vector, text, text, jsonb, timestamptz, text, text[], vector[]),
    pgmem.add_batch(text, text[], vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], vector[], uuid[], text[]),
    pgmem.get(uuid),
    pgmem.update(uuid, text, vector, jsonb, boolean, integer, text, text, text[], vector[]),
    pgmem.edit(uuid, text, text, vector, integer, text, text, text[], vector[]),
    pgmem.delete(uuid, text),
    pgmem.delete_all(text, text, text, jsonb, boolean, text),
    pgmem.stats(text),
    pgmem.session_tail(text, text, integer),
    pgmem.supersede(uuid, text, vector, jsonb, timestamptz, text, integer, text, text[], vector[]),
    pgmem.invalidate(uuid, timestamptz, text),
    pgmem.chain(uuid),
    pgmem.list(text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text, timestamptz),
    pgmem.search(text, vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz),
    pgmem.search_hybrid(text, text, vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text, timestamptz),
    pgmem.history(uuid),
    pgmem.append_turn(text, text, text, text, text, vector, jsonb, timestamptz, text, timestamptz),
    pgmem.recent_turns(text, text, integer),
    pgmem.pending_turns(text, text, integer),
    pgmem.consolidate(text, text, bigint[], text[], vector[], jsonb[], text, text, integer[], text[], vector[]),
    pgmem.sources(uuid),
    pgmem.context(text, text, text, vector, integer, integer, double precision, integer, text, jsonb, text),
    pgmem.export_user(boolean),
    pgmem.import_user(jsonb[]),
    pgmem.current_user_id(), pgmem.act_as(text), pgmem.as_user(text, anyelement),
    pgmem.token_count(text), pgmem.count_occurrences(text, text), pgmem.content_hash(text),
    pgmem.purge(integer), pgmem.erase_user(text), pgmem._require_maintainer(text),
    pgmem._expiry(timestamptz, timestamptz, interval)  -- the view's expression: a view's functions run as its reader
TO pgmem_agent;
GRANT EXECUTE ON FUNCTION
    pgmem.create_space(text, text, integer, text, integer, integer, regconfig), pgmem.set_retention(text, interval, interval)
TO pgmem_gateway;

-- Tables and sequences: nothing for agents and gateways; what the API needs for pgmem_api.
REVOKE ALL ON ALL TABLES IN SCHEMA pgmem FROM PUBLIC, pgmem_agent, pgmem_gateway;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgmem FROM PUBLIC, pgmem_agent, pgmem_gateway;
GRANT SELECT, INSERT, UPDATE, DELETE ON pgmem.memories, pgmem.tenant_sizes TO pgmem_api;
GRANT SELECT, INSERT, DELETE ON pgmem.memory_vectors TO pgmem_api;
GRANT SELECT, INSERT ON pgmem.history, pgmem.memory_sources, pgmem.turns TO pgmem_api;
GRANT UPDATE (consolidated_at) ON pgmem.turns TO pgmem_api;
GRANT SELECT ON pgmem.spaces TO pgmem_api;
GRANT USAGE ON SEQUENCE pgmem.memories_seq TO pgmem_api;

-- psql inspection: the view runs as its owner (pgmem_api, under RLS) and shows the caller's live memories,
-- never an embedding; security_barrier keeps a caller's functions from seeing rows before its filter.
DO $pgmem$
BEGIN
    IF current_setting('server_version_num')::integer >= 150000 THEN
        ALTER VIEW pgmem.memories_view RESET (security_invoker);
    END IF;
END
$pgmem$;
ALTER VIEW pgmem.memories_view SET (security_barrier = true);
GRANT SELECT ON pgmem.memories_view TO pgmem_agent;
COMMENT ON VIEW pgmem.memories_view IS
    'For people at psql: the current user''s memories that hold now (no embeddings), newest facts included. Runs as pgmem_api under row-level security; with no user set, no rows.';

-- ---------------------------------------------------------------------------------------------------------
-- Planner statistics: none on tenant tables (EXPLAIN estimates would show other tenants' counts and values)
-- ---------------------------------------------------------------------------------------------------------
DO $pgmem$
DECLARE
    v_rel regclass;
    v_att name;
BEGIN
    FOR v_rel, v_att IN
        SELECT a.attrelid::regclass, a.attname FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = ANY (ARRAY['pgmem.memories', 'pgmem.history', 'pgmem.memory_vectors', 'pgmem.turns',
                                      'pgmem.memory_sources', 'pgmem.tenant_sizes', 'pgmem.role_bindings']::regclass[])
          AND a.attnum > 0 AND NOT a.attisdropped
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET STATISTICS 0', v_rel, v_att);
        IF to_regprocedure('pg_catalog.pg_clear_attribute_stats(text, text, text, boolean)') IS NOT NULL THEN
            -- PostgreSQL 18 and later: the table owner may remove them.
            EXECUTE 'SELECT pg_catalog.pg_clear_attribute_stats($1, $2, $3, false)'
            USING 'pgmem', (SELECT c.relname::text FROM pg_catalog.pg_class c WHERE c.oid = v_rel), v_att::text;
        END IF;
    END LOOP;
    IF to_regprocedure('pg_catalog.pg_clear_attribute_stats(text, text, text, boolean)') IS NULL THEN
        IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
            DELETE FROM pg_catalog.pg_statistic WHERE starelid = ANY (ARRAY['pgmem.memories', 'pgmem.history',
                'pgmem.memory_vectors', 'pgmem.turns', 'pgmem.memory_sources', 'pgmem.tenant_sizes', 'pgmem.role_bindings']::regclass[]);
        ELSE
            RAISE WARNING 'pgmem: planner statistics collected before this migration remain until a superuser removes them'
                USING HINT = 'DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class WHERE relnamespace = ''pgmem''::regnamespace);';
        END IF;
    END IF;
END
$pgmem$;

-- The generated statements again, with qualified names, pinned search_path and pgmem_api's grants.
DO $pgmem$ BEGIN PERFORM pgmem._build_knn(); END $pgmem$;  -- DO, not SELECT: yoyo prints a SELECT's rows
