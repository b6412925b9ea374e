-- pgmem current schema, part 95: the calls a Citus coordinator delegates to a worker (docs/scaling.md). Each
-- *_for function is an API call acting as its first argument, p_user_id: pgmem distribute makes them distributed
-- functions by that argument, colocated with pgmem.memories, so that the coordinator sends the whole call in
-- one remote command to the worker holding that user's shard group, which runs it there with the user's rows
-- local (no two-phase commit, no other worker contacted). The clients use them in cluster mode; on a single
-- server each is the call after pgmem.act_as.

-- Internal: p_user_id when this node holds the user's rows (a single server; a worker that a call was delegated
-- to; a coordinator holding shards), else error PGM11: a *_for function that Citus did not delegate (called in a
-- transaction block, or not distributed) would run on the coordinator, whose SET LOCAL of the user reaches the
-- workers only inside a transaction block: its reads would silently find nothing.
CREATE FUNCTION pgmem._delegated(p_user_id text) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = 'pgmem.memories'::regclass)
           AND NOT EXISTS (
               SELECT 1 FROM pg_catalog.pg_dist_placement pl
               WHERE pl.shardid = pg_catalog.get_shard_id_for_distribution_column('pgmem.memories', p_user_id)
                 AND pl.groupid = (SELECT g.groupid FROM pg_catalog.pg_dist_local_group g)) THEN
            RAISE EXCEPTION 'this node does not hold the rows of user %: the call was not delegated to its worker', p_user_id
                USING ERRCODE = 'PGM11',
                      HINT = 'Call a *_for function as one statement outside a transaction block (Citus delegates only those); run pgmem distribute if it is not distributed.';
        END IF;
    END IF;
    RETURN p_user_id;
END
$$;
COMMENT ON FUNCTION pgmem._delegated(text) IS
    'Internal: p_user_id when this node holds that user''s rows (or there is no Citus), else PGM11: a *_for call that Citus did not delegate.';

-- pgmem.add acting as p_user_id, run where that user's rows are: on a Citus cluster the coordinator delegates the
-- call to the worker holding the user's shard group (create_distributed_function by p_user_id, pgmem distribute),
-- one remote command; on a single server it is pgmem.add after pgmem.act_as.
CREATE FUNCTION pgmem.add_for(
    p_user_id text,
    p_space text,
    p_content text,
    p_embedding @vector@.vector,
    p_agent_id text DEFAULT NULL,
    p_session_id text DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}',
    p_expires_at timestamptz DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors @vector@.vector[] DEFAULT NULL
) RETURNS TABLE(id uuid, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    PERFORM pgmem._delegated(pgmem.act_as(p_user_id));
    RETURN QUERY SELECT * FROM pgmem.add(p_space => p_space, p_content => p_content, p_embedding => p_embedding, p_agent_id => p_agent_id, p_session_id => p_session_id, p_metadata => p_metadata, p_expires_at => p_expires_at, p_model => p_model, p_vector_kinds => p_vector_kinds, p_vectors => p_vectors);
END
$$;
COMMENT ON FUNCTION pgmem.add_for(text, text, text, @vector@.vector, text, text, jsonb, timestamptz, text, text[], @vector@.vector[]) IS
    'pgmem.add acting as p_user_id (pgmem.act_as rules, errors as both): on a Citus cluster, run by the worker holding that user''s rows (function call delegation by p_user_id).';

-- pgmem.add_batch acting as p_user_id, run where that user's rows are: on a Citus cluster the coordinator delegates the
-- call to the worker holding the user's shard group (create_distributed_function by p_user_id, pgmem distribute),
-- one remote command; on a single server it is pgmem.add_batch after pgmem.act_as.
CREATE FUNCTION pgmem.add_batch_for(
    p_user_id text,
    p_space text,
    p_contents text[],
    p_embeddings @vector@.vector[],
    p_agent_ids text[] DEFAULT NULL,
    p_session_ids text[] DEFAULT NULL,
    p_metadata jsonb[] DEFAULT NULL,
    p_expires_at timestamptz[] DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_created_at timestamptz[] DEFAULT NULL,
    p_vector_items integer[] DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors @vector@.vector[] DEFAULT NULL,
    p_ids uuid[] DEFAULT NULL,
    p_user_ids text[] DEFAULT NULL
) RETURNS TABLE(ordinal integer, id uuid, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    PERFORM pgmem._delegated(pgmem.act_as(p_user_id));
    RETURN QUERY SELECT * FROM pgmem.add_batch(p_space => p_space, p_contents => p_contents, p_embeddings => p_embeddings, p_agent_ids => p_agent_ids, p_session_ids => p_session_ids, p_metadata => p_metadata, p_expires_at => p_expires_at, p_model => p_model, p_created_at => p_created_at, p_vector_items => p_vector_items, p_vector_kinds => p_vector_kinds, p_vectors => p_vectors, p_ids => p_ids, p_user_ids => p_user_ids);
END
$$;
COMMENT ON FUNCTION pgmem.add_batch_for(text, text, text[], @vector@.vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], @vector@.vector[], uuid[], text[]) IS
    'pgmem.add_batch acting as p_user_id (pgmem.act_as rules, errors as both): on a Citus cluster, run by the worker holding that user''s rows (function call delegation by p_user_id).';

-- pgmem.get acting as p_user_id, run where that user's rows are: on a Citus cluster the coordinator delegates the
-- call to the worker holding the user's shard group (create_distributed_function by p_user_id, pgmem distribute),
-- one remote command; on a single server it is pgmem.get after pgmem.act_as.
CREATE FUNCTION pgmem.get_for(p_user_id text, p_id uuid) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    PERFORM pgmem._delegated(pgmem.act_as(p_user_id));
    RETURN QUERY SELECT * FROM pgmem.get(p_id => p_id);
END
$$;
COMMENT ON FUNCTION pgmem.get_for(text, uuid) IS
    'pgmem.get acting as p_user_id (pgmem.act_as rules, errors as both): on a Citus cluster, run by the worker holding that user''s rows (function call delegation by p_user_id).';

-- pgmem.list acting as p_user_id, run where that user's rows are: on a Citus cluster the coordinator delegates the
-- call to the worker holding the user's shard group (create_distributed_function by p_user_id, pgmem distribute),
-- one remote command; on a single server it is pgmem.list after pgmem.act_as.
CREATE FUNCTION pgmem.list_for(
    p_user_id text,
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
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    PERFORM pgmem._delegated(pgmem.act_as(p_user_id));
    RETURN QUERY SELECT * FROM pgmem.list(p_space => p_space, p_agent_id => p_agent_id, p_session_id => p_session_id, p_filter => p_filter, p_limit => p_limit, p_after_created_at => p_after_created_at, p_after_id => p_after_id, p_created_after => p_created_after, p_created_before => p_created_before, p_contains => p_contains, p_as_of => p_as_of);
END
$$;
COMMENT ON FUNCTION pgmem.list_for(text, text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text, timestamptz) IS
    'pgmem.list acting as p_user_id (pgmem.act_as rules, errors as both): on a Citus cluster, run by the worker holding that user''s rows (function call delegation by p_user_id).';

-- pgmem.edit acting as p_user_id, run where that user's rows are: on a Citus cluster the coordinator delegates the
-- call to the worker holding the user's shard group (create_distributed_function by p_user_id, pgmem distribute),
-- one remote command; on a single server it is pgmem.edit after pgmem.act_as.
CREATE FUNCTION pgmem.edit_for(
    p_user_id text,
    p_id uuid,
    p_needle text,
    p_replacement text,
    p_embedding @vector@.vector,
    p_expected_version integer DEFAULT NULL,
    p_agent_id text DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_vector_kinds text[] DEFAULT NULL,
    p_vectors @vector@.vector[] DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    PERFORM pgmem._delegated(pgmem.act_as(p_user_id));
    RETURN QUERY SELECT * FROM pgmem.edit(p_id => p_id, p_needle => p_needle, p_replacement => p_replacement, p_embedding => p_embedding, p_expected_version => p_expected_version, p_agent_id => p_agent_id, p_model => p_model, p_vector_kinds => p_vector_kinds, p_vectors => p_vectors);
END
$$;
COMMENT ON FUNCTION pgmem.edit_for(text, uuid, text, text, @vector@.vector, integer, text, text, text[], @vector@.vector[]) IS
    'pgmem.edit acting as p_user_id (pgmem.act_as rules, errors as both): on a Citus cluster, run by the worker holding that user''s rows (function call delegation by p_user_id).';

-- pgmem.search acting as p_user_id, run where that user's rows are: on a Citus cluster the coordinator delegates the
-- call to the worker holding the user's shard group (create_distributed_function by p_user_id, pgmem distribute),
-- one remote command; on a single server it is pgmem.search after pgmem.act_as.
CREATE FUNCTION pgmem.search_for(
    p_user_id text,
    p_space text,
    p_embedding @vector@.vector,
    p_k integer DEFAULT 10,
    p_agent_id text DEFAULT NULL,
    p_session_id text DEFAULT NULL,
    p_filter jsonb DEFAULT NULL,
    p_min_similarity double precision DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL,
    p_created_before timestamptz DEFAULT NULL,
    p_as_of timestamptz DEFAULT NULL
) RETURNS SETOF pgmem.memory
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    PERFORM pgmem._delegated(pgmem.act_as(p_user_id));
    RETURN QUERY SELECT * FROM pgmem.search(p_space => p_space, p_embedding => p_embedding, p_k => p_k, p_agent_id => p_agent_id, p_session_id => p_session_id, p_filter => p_filter, p_min_similarity => p_min_similarity, p_model => p_model, p_created_after => p_created_after, p_created_before => p_created_before, p_as_of => p_as_of);
END
$$;
COMMENT ON FUNCTION pgmem.search_for(text, text, @vector@.vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz) IS
    'pgmem.search acting as p_user_id (pgmem.act_as rules, errors as both): on a Citus cluster, run by the worker holding that user''s rows (function call delegation by p_user_id).';

-- pgmem.search_hybrid acting as p_user_id, run where that user's rows are: on a Citus cluster the coordinator delegates the
-- call to the worker holding the user's shard group (create_distributed_function by p_user_id, pgmem distribute),
-- one remote command; on a single server it is pgmem.search_hybrid after pgmem.act_as.
CREATE FUNCTION pgmem.search_hybrid_for(
    p_user_id text,
    p_space text,
    p_query text,
    p_embedding @vector@.vector DEFAULT NULL,
    p_k integer DEFAULT 10,
    p_agent_id text DEFAULT NULL,
    p_session_id text DEFAULT NULL,
    p_filter jsonb DEFAULT NULL,
    p_created_after timestamptz DEFAULT NULL,
    p_created_before timestamptz DEFAULT NULL,
    p_text_weight double precision DEFAULT NULL,
    p_vector_weight double precision DEFAULT NULL,
    p_speaker_weight double precision DEFAULT NULL,
    p_session_weight double precision DEFAULT NULL,
    p_model text DEFAULT NULL,
    p_as_of timestamptz DEFAULT NULL,
    p_min_score double precision DEFAULT NULL
) RETURNS SETOF pgmem.hybrid_hit
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    PERFORM pgmem._delegated(pgmem.act_as(p_user_id));
    RETURN QUERY SELECT * FROM pgmem.search_hybrid(p_space => p_space, p_query => p_query, p_embedding => p_embedding, p_k => p_k, p_agent_id => p_agent_id, p_session_id => p_session_id, p_filter => p_filter, p_created_after => p_created_after, p_created_before => p_created_before, p_text_weight => p_text_weight, p_vector_weight => p_vector_weight, p_speaker_weight => p_speaker_weight, p_session_weight => p_session_weight, p_model => p_model, p_as_of => p_as_of, p_min_score => p_min_score);
END
$$;
COMMENT ON FUNCTION pgmem.search_hybrid_for(text, text, text, @vector@.vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text, timestamptz, double precision) IS
    'pgmem.search_hybrid acting as p_user_id (pgmem.act_as rules, errors as both): on a Citus cluster, run by the worker holding that user''s rows (function call delegation by p_user_id).';
