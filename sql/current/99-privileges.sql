-- pgmem current schema, part 99: who may do what. Every GRANT and REVOKE, every owner other than the schema
-- owner, every SECURITY DEFINER, and the planner-statistics setting, in one file for review
-- (docs/security.md is the threat model). Loaded last: it applies to every object of the other files.
--
--   API (owned by pgmem_api, SECURITY DEFINER; EXECUTE: pgmem_agent, so gateways too): the calls agents make.
--   Owner-run (owned by the schema owner, SECURITY DEFINER): identity (current_user_id, act_as), and the
--     gateway's space administration, which writes DDL (create_space, set_retention; EXECUTE: pgmem_gateway),
--     and _build_knn, which writes the generated search functions.
--   Invoker, callable by agents: pure helpers (token_count, count_occurrences, content_hash, as_user) and
--     maintenance that checks for a superuser or BYPASSRLS caller itself (purge, erase_user).
--   Internal: EXECUTE for pgmem_api only (called inside the API); owner only: bindings, migration helpers.
-- A new function gets its lines here: SECURITY DEFINER and OWNER (if it is API), and its EXECUTE grants.

-- ---------------------------------------------------------------------------------------------------------
-- The schema
-- ---------------------------------------------------------------------------------------------------------
REVOKE ALL ON SCHEMA pgmem FROM PUBLIC;
GRANT USAGE ON SCHEMA pgmem TO pgmem_agent, pgmem_gateway;
GRANT USAGE ON SCHEMA pgmem TO pgmem_api;

-- ---------------------------------------------------------------------------------------------------------
-- Definer functions run as their owner. Owner-run ones stay with the schema owner:
-- ---------------------------------------------------------------------------------------------------------

-- The API is owned by pgmem_api (no superuser, no BYPASSRLS: row-level security still applies to it).
-- pgmem_api may create in the schema only while it takes over its functions (ALTER ... OWNER TO needs it).
GRANT CREATE ON SCHEMA pgmem TO pgmem_api;
ALTER FUNCTION pgmem.space(text) OWNER TO pgmem_api;
-- The calls a Citus coordinator delegates to a worker (95-cluster.sql).
ALTER FUNCTION pgmem.add_for(text, text, text, @vector@.vector, text, text, jsonb, timestamptz, text, text[], @vector@.vector[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.add_batch_for(text, text, text[], @vector@.vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], @vector@.vector[], uuid[], text[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.get_for(text, uuid) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.list_for(text, text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text, timestamptz) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.edit_for(text, uuid, text, text, @vector@.vector, integer, text, text, text[], @vector@.vector[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.search_for(text, text, @vector@.vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.search_hybrid_for(text, text, text, @vector@.vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text, timestamptz, double precision) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.add(text, text, @vector@.vector, text, text, jsonb, timestamptz, text, text[], @vector@.vector[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.add_batch(text, text[], @vector@.vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], @vector@.vector[], uuid[], text[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.get(uuid) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.update(uuid, text, @vector@.vector, jsonb, boolean, integer, text, text, text[], @vector@.vector[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.edit(uuid, text, text, @vector@.vector, integer, text, text, text[], @vector@.vector[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.delete(uuid, text) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.delete_all(text, text, text, jsonb, boolean, text) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.stats(text) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.session_tail(text, text, integer) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.known_hashes(text, bytea[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.supersede(uuid, text, @vector@.vector, jsonb, timestamptz, text, integer, text, text[], @vector@.vector[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.invalidate(uuid, timestamptz, text) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.chain(uuid) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.list(text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text, timestamptz) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.search(text, @vector@.vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.search_hybrid(text, text, @vector@.vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text, timestamptz, double precision) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.history(uuid) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.append_turn(text, text, text, text, text, @vector@.vector, jsonb, timestamptz, text, timestamptz) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.recent_turns(text, text, integer) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.put_keyed(text, text[], text[], @vector@.vector[], jsonb[], text[], timestamptz[], interval[], text[], text, text, integer[], text[], @vector@.vector[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.set_expiry(uuid[], interval[], text) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.get_keyed(text, text[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.metadata_values(text, text, jsonb, jsonb, integer, integer, integer) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.clear_session(text, text) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.pending_turns(text, text, integer) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.consolidate(text, text, bigint[], text[], @vector@.vector[], jsonb[], text, text, integer[], text[], @vector@.vector[]) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.sources(uuid) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.context(text, text, text, @vector@.vector, integer, integer, double precision, integer, text, jsonb, text) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.export_user(boolean) OWNER TO pgmem_api;
ALTER FUNCTION pgmem.import_user(jsonb[]) OWNER TO pgmem_api;
-- psql inspection: the view runs as its owner (pgmem_api, under RLS) and shows the caller's live memories,
-- never an embedding; security_barrier (in its definition, 70-reads.sql) keeps a caller's functions from
-- seeing rows before its filter.
ALTER VIEW pgmem.memories_view OWNER TO pgmem_api;
REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api;

-- ---------------------------------------------------------------------------------------------------------
-- EXECUTE: nothing for PUBLIC; everything for pgmem_api but owner-only tools; the API for agents; space
-- administration for gateways.
-- ---------------------------------------------------------------------------------------------------------
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmem FROM PUBLIC, pgmem_agent, pgmem_gateway;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgmem TO pgmem_api;
REVOKE EXECUTE ON FUNCTION
    pgmem.bind_role(name, text), pgmem.unbind_role(name), pgmem.schedule_purge(text), pgmem._build_knn(),
    pgmem._define(text), pgmem._vector_schema(), pgmem.create_space(text, text, integer, text, integer, integer, regconfig),
    pgmem.set_retention(text, interval, interval), pgmem.purge(integer), pgmem.erase_user(text),
    pgmem.list_spaces(), pgmem.drop_space(text)
FROM pgmem_api;
GRANT EXECUTE ON FUNCTION
    pgmem.space(text),
    pgmem.add_for(text, text, text, @vector@.vector, text, text, jsonb, timestamptz, text, text[], @vector@.vector[]),
    pgmem.add_batch_for(text, text, text[], @vector@.vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], @vector@.vector[], uuid[], text[]),
    pgmem.get_for(text, uuid),
    pgmem.list_for(text, text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text, timestamptz),
    pgmem.edit_for(text, uuid, text, text, @vector@.vector, integer, text, text, text[], @vector@.vector[]),
    pgmem.search_for(text, text, @vector@.vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz),
    pgmem.search_hybrid_for(text, text, text, @vector@.vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text, timestamptz, double precision),
    pgmem.add(text, text, @vector@.vector, text, text, jsonb, timestamptz, text, text[], @vector@.vector[]),
    pgmem.add_batch(text, text[], @vector@.vector[], text[], text[], jsonb[], timestamptz[], text, timestamptz[], integer[], text[], @vector@.vector[], uuid[], text[]),
    pgmem.get(uuid),
    pgmem.update(uuid, text, @vector@.vector, jsonb, boolean, integer, text, text, text[], @vector@.vector[]),
    pgmem.edit(uuid, text, text, @vector@.vector, integer, text, text, text[], @vector@.vector[]),
    pgmem.delete(uuid, text),
    pgmem.delete_all(text, text, text, jsonb, boolean, text),
    pgmem.stats(text),
    pgmem.session_tail(text, text, integer),
    pgmem.known_hashes(text, bytea[]),
    pgmem.supersede(uuid, text, @vector@.vector, jsonb, timestamptz, text, integer, text, text[], @vector@.vector[]),
    pgmem.invalidate(uuid, timestamptz, text),
    pgmem.chain(uuid),
    pgmem.list(text, text, text, jsonb, integer, timestamptz, uuid, timestamptz, timestamptz, text, timestamptz),
    pgmem.search(text, @vector@.vector, integer, text, text, jsonb, double precision, text, timestamptz, timestamptz, timestamptz),
    pgmem.search_hybrid(text, text, @vector@.vector, integer, text, text, jsonb, timestamptz, timestamptz, double precision, double precision, double precision, double precision, text, timestamptz, double precision),
    pgmem.history(uuid),
    pgmem.append_turn(text, text, text, text, text, @vector@.vector, jsonb, timestamptz, text, timestamptz),
    pgmem.recent_turns(text, text, integer),
    pgmem.put_keyed(text, text[], text[], @vector@.vector[], jsonb[], text[], timestamptz[], interval[], text[], text, text, integer[], text[], @vector@.vector[]),
    pgmem.set_expiry(uuid[], interval[], text),
    pgmem.get_keyed(text, text[]),
    pgmem.metadata_values(text, text, jsonb, jsonb, integer, integer, integer),
    pgmem.clear_session(text, text),
    pgmem.pending_turns(text, text, integer),
    pgmem.consolidate(text, text, bigint[], text[], @vector@.vector[], jsonb[], text, text, integer[], text[], @vector@.vector[]),
    pgmem.sources(uuid),
    pgmem.context(text, text, text, @vector@.vector, integer, integer, double precision, integer, text, jsonb, text),
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
-- put_keyed's lock rows: made (INSERT) and locked (SELECT ... FOR UPDATE needs UPDATE).
GRANT SELECT, INSERT, UPDATE ON pgmem.key_locks TO pgmem_api;
GRANT SELECT, INSERT, DELETE ON pgmem.memory_vectors TO pgmem_api;
-- The text side's postings and statistics, kept by the memories triggers as the writer, read by search_hybrid.
GRANT SELECT, INSERT, UPDATE, DELETE ON pgmem.memory_terms, pgmem.term_stats TO pgmem_api;
GRANT SELECT, INSERT ON pgmem.history, pgmem.memory_sources, pgmem.turns TO pgmem_api;
-- clear_session deletes a session's turns.
GRANT DELETE ON pgmem.turns TO pgmem_api;
GRANT UPDATE (consolidated_at) ON pgmem.turns TO pgmem_api;
GRANT SELECT ON pgmem.spaces TO pgmem_api;
GRANT USAGE ON SEQUENCE pgmem.memories_seq TO pgmem_api;
GRANT SELECT ON pgmem.memories_view TO pgmem_agent;

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
                                      'pgmem.memory_sources', 'pgmem.tenant_sizes', 'pgmem.role_bindings',
                                      'pgmem.key_locks', 'pgmem.memory_terms', 'pgmem.term_stats']::regclass[])
          AND a.attnum > 0 AND NOT a.attisdropped
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET STATISTICS 0', v_rel, v_att);
    END LOOP;
END
$pgmem$;
-- ... nor on the expression columns of their indexes (ANALYZE keeps statistics of an index expression, such as
-- memories_user_key_idx's metadata->>'pgmem:key': every tenant's keys; migration 0022). Each space's HNSW index
-- gets the same setting from create_space.
DO $pgmem$
DECLARE
    v_idx regclass;
    v_col integer;
BEGIN
    FOR v_idx, v_col IN
        SELECT i.indexrelid::regclass, k.n FROM pg_catalog.pg_index i
        CROSS JOIN LATERAL generate_subscripts(i.indkey, 1) AS k(n)
        WHERE i.indrelid = ANY (ARRAY['pgmem.memories', 'pgmem.history', 'pgmem.memory_vectors', 'pgmem.turns',
                                      'pgmem.memory_sources', 'pgmem.tenant_sizes', 'pgmem.role_bindings',
                                      'pgmem.key_locks', 'pgmem.memory_terms', 'pgmem.term_stats']::regclass[])
          AND i.indkey[k.n] = 0
    LOOP
        EXECUTE pg_catalog.format('ALTER INDEX %s ALTER COLUMN %s SET STATISTICS 0', v_idx, v_col + 1);
    END LOOP;
END
$pgmem$;

-- The generated search statements (60-search.sql), written last so that they see every space.
DO $pgmem$ BEGIN PERFORM pgmem._build_knn(); END $pgmem$;

-- Space-wide settings are the owner's (migration 0008): a space's TTL applies to every tenant at once. Space
-- creation and retention wait at most 5 s for their locks.
REVOKE EXECUTE ON FUNCTION pgmem.set_retention(text, interval, interval) FROM pgmem_gateway;
ALTER FUNCTION pgmem.create_space(text, text, integer, text, integer, integer, regconfig) SET lock_timeout = '5s';
ALTER FUNCTION pgmem.set_retention(text, interval, interval) SET lock_timeout = '5s';

-- ---------------------------------------------------------------------------------------------------------
-- Space administration (20-spaces.sql): list_spaces for every pgmem role, drop_space for the owner only.
-- ---------------------------------------------------------------------------------------------------------
GRANT EXECUTE ON FUNCTION pgmem.list_spaces() TO pgmem_agent, pgmem_gateway;

-- ---------------------------------------------------------------------------------------------------------
-- The HTTP service's state (85-service.sql): its tables for nobody, its functions for pgmem_gateway only.
-- ---------------------------------------------------------------------------------------------------------
REVOKE ALL ON pgmem.service_setup FROM PUBLIC;
REVOKE ALL ON pgmem.service_accounts FROM PUBLIC;
REVOKE ALL ON pgmem.service_sessions FROM PUBLIC;
REVOKE ALL ON pgmem.service_keys FROM PUBLIC;
REVOKE ALL ON pgmem.service_users FROM PUBLIC;
REVOKE ALL ON pgmem.service_exports FROM PUBLIC;
REVOKE ALL ON pgmem.service_audit FROM PUBLIC;
-- (PUBLIC's EXECUTE went with every function's above; the service's functions are the gateway's, never the API's.)
REVOKE EXECUTE ON FUNCTION
    pgmem.service_setup_begin(bytea, interval), pgmem.service_bootstrap(bytea, text, text), pgmem.service_setup_state(),
    pgmem.service_account(text), pgmem.service_account_rehash(bigint, text),
    pgmem.service_session_create(bytea, bigint, interval), pgmem.service_session(bytea), pgmem.service_session_end(bytea),
    pgmem.service_key_create(text, bytea, text, text, text, text, text[], text, text), pgmem.service_key_lookup(bytea),
    pgmem.service_keys(), pgmem.service_key_revoke(bigint), pgmem.service_users(), pgmem.service_user_add(text),
    pgmem.service_agents(), pgmem.service_export_mark(bigint, text), pgmem.service_export_recent(bigint, text, interval),
    pgmem.service_user_forget(text),
    pgmem.service_log(timestamptz[], text[], text[], integer[], real[], text[], text[], text[]),
    pgmem.service_audit(integer, bigint, text, integer), pgmem.service_audit_purge(interval), pgmem.service_migrations()
FROM pgmem_api;
GRANT EXECUTE ON FUNCTION
    pgmem.service_setup_begin(bytea, interval), pgmem.service_bootstrap(bytea, text, text), pgmem.service_setup_state(),
    pgmem.service_account(text), pgmem.service_account_rehash(bigint, text),
    pgmem.service_session_create(bytea, bigint, interval), pgmem.service_session(bytea), pgmem.service_session_end(bytea),
    pgmem.service_key_create(text, bytea, text, text, text, text, text[], text, text), pgmem.service_key_lookup(bytea),
    pgmem.service_keys(), pgmem.service_key_revoke(bigint), pgmem.service_users(), pgmem.service_user_add(text),
    pgmem.service_agents(), pgmem.service_export_mark(bigint, text), pgmem.service_export_recent(bigint, text, interval),
    pgmem.service_user_forget(text),
    pgmem.service_log(timestamptz[], text[], text[], integer[], real[], text[], text[], text[]),
    pgmem.service_audit(integer, bigint, text, integer), pgmem.service_audit_purge(interval), pgmem.service_migrations()
TO pgmem_gateway;
