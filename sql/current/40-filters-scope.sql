-- pgmem current schema, part 40: metadata filters and the scope of a read. _compile_filter turns a JSON
-- filter into SQL with its keys and values in parameters; _scope_sql writes the WHERE text that list,
-- search, search_hybrid and delete_all share. The positional parameters of every generated statement are
-- defined here, once (below).

-- ---------------------------------------------------------------------------------------------------------
-- Metadata filters, compiled to SQL whose only variable parts are $n[i] references: keys and values are
-- passed as parameters (text[] and jsonb[]), never written into the SQL text.
-- ---------------------------------------------------------------------------------------------------------
CREATE TYPE pgmem.compiled_filter AS (sql text, keys text[], vals jsonb[]);
COMMENT ON TYPE pgmem.compiled_filter IS 'Internal: a metadata filter compiled to SQL text plus its key and value parameters.';

CREATE FUNCTION pgmem._compile_filter(
    p_filter jsonb,
    p_keys_param integer,
    p_vals_param integer,
    p_acc pgmem.compiled_filter DEFAULT ROW('true'::text, '{}'::text[], '{}'::jsonb[])::pgmem.compiled_filter,
    p_depth integer DEFAULT 0
) RETURNS pgmem.compiled_filter
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgmem, pg_temp
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
$$;
COMMENT ON FUNCTION pgmem._compile_filter(jsonb, integer, integer, pgmem.compiled_filter, integer) IS
    'Internal: compile a metadata filter ({"key": value}, {"key": {"op": value}}, $and/$or/$not) to SQL over m.metadata; keys and values stay in parameters $keys_param (text[]) and $vals_param (jsonb[]).';

-- Internal: pgmem._scope_sql (below) for the memories that hold now.
CREATE FUNCTION pgmem._scope_sql(p_space_id integer, p_filter jsonb, OUT o_sql text, OUT o_filter pgmem.compiled_filter)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$ SELECT * FROM pgmem._scope_sql(p_space_id, p_filter, NULL::timestamptz) $$;
COMMENT ON FUNCTION pgmem._scope_sql(integer, jsonb) IS 'Internal: pgmem._scope_sql for the memories that hold now.';

-- ---------------------------------------------------------------------------------------------------------
-- The positional parameters of the generated statements. Every statement built from a scope (list,
-- delete_all, the exact and HNSW routes of search and search_hybrid, and the functions _build_knn
-- generates, whose arguments come in the same order) is run with these slots:
--    $1 user id (text)              $5 created_before (timestamptz)     $9  query embedding (vector)
--    $2 agent_id (text)             $6 filter keys (text[])             $10 k (integer)
--    $3 session_id (text)           $7 filter values (jsonb[])          $11 the space's name (_exact_sql),
--    $4 created_after (timestamptz) $8 content substring (text)             or a cap on rows (_exact_ids_sql)
--                                                                       $12 min_similarity (float8, _exact_sql)
-- $1..$8 are the scope: the WHERE text below names them (a NULL slot matches everything); $9..$12 belong
-- to the statement that adds to it (60-search.sql). The filter's keys and values stay in $6 and $7, never
-- in the text. The space's TTL and the as-of time are written in as literals (%L): they select the plan.
-- ---------------------------------------------------------------------------------------------------------
-- Internal: the WHERE clause shared by list, search, search_hybrid and delete_all, with the slots above.
CREATE FUNCTION pgmem._scope_sql(
    p_space_id integer,
    p_filter jsonb,
    p_as_of timestamptz,
    OUT o_sql text,
    OUT o_filter pgmem.compiled_filter
)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
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
$$;
COMMENT ON FUNCTION pgmem._scope_sql(integer, jsonb, timestamptz) IS
    'Internal: SQL for the live rows of one user and space that hold now (or at p_as_of) and match agent, session, time range, content substring and metadata filter.';
