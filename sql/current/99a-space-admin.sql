-- Space administration (migration 0009, as written there): list_spaces for every pgmem role, drop_space for
-- the owner. After 99-privileges.sql, whose REVOKE ... ON ALL FUNCTIONS would undo its grants.
-- pgmem space administration: list the embedding spaces (any pgmem role), drop one with everything in it (schema owner only)

-- Why: agents and gateways read no table directly, so the command line (`pgmem space list`, and the list of
-- known spaces an unknown --space prints) needs a function that lists the spaces; and a space created by a
-- typing mistake had no way out. Only new functions here: no existing one changes.

DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;

CREATE FUNCTION pgmem.list_spaces() RETURNS TABLE (
    space_id integer, name text, model text, dims integer, distance text, index_kind text, hnsw_m integer,
    hnsw_ef_construction integer, text_config text, memory_ttl interval, turn_ttl interval, created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT s.space_id, s.name, s.model, s.dims, s.distance, s.index_kind, s.hnsw_m, s.hnsw_ef_construction,
           s.text_config::text, s.memory_ttl, s.turn_ttl, s.created_at
    FROM pgmem.spaces s ORDER BY s.name
$$;
COMMENT ON FUNCTION pgmem.list_spaces() IS
    'Every embedding space, by name: model, dims, distance, index kind and HNSW parameters, full-text configuration, retention (memory and turn TTL), creation time. Configuration only: no counts of any user''s rows. Any pgmem role may call it.';
REVOKE EXECUTE ON FUNCTION pgmem.list_spaces() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgmem.list_spaces() TO pgmem_agent, pgmem_gateway;

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
REVOKE EXECUTE ON FUNCTION pgmem.drop_space(text) FROM PUBLIC;
