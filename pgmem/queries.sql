-- Every statement the Python wrapper runs. One block per query: a "-- name -- route" line, then one statement
-- calling one pgmem function with named arguments and explicit casts. Python never assembles SQL text: it
-- looks a statement up by name and runs it by the route its block declares.
--
-- Routes: how a call carries the pgmem user it acts for (docs/security.md, "Roles and identity in practice").
--   as_user   One statement, in autocommit mode (it is its own transaction, as every pgmem function is):
--             the first argument is wrapped in pgmem.as_user(%(pgmem_user_id)s::text, ...), which runs
--             pgmem.act_as before the function body reads the identity. Only for PL/pgSQL functions: a
--             LANGUAGE sql function may be inlined into the statement and read the identity before its
--             arguments are evaluated (checked against pg_proc by the tests). A client acting for no user
--             (a login bound with pgmem.bind_role, the schema owner) runs the same call without the wrapper.
--   act_as    A transaction: pgmem.act_as(user) first when the client acts for a user, then the statement
--             (LANGUAGE sql functions, calls without arguments, the HTTP service's own state).
--   as_login  A transaction beginning with SET LOCAL ROLE NONE: the login itself, not the role the client
--             switched to, for the schema owner's calls (set_retention).
-- A call on the caller's own connection (conn=) always takes the act_as route, inside the caller's
-- transaction if one is open.
--
-- Vectors go in binary (%(...)b): psycopg would format every float of a vector list as text in Python
-- (0.8 ms a 384-dim vector; bench/FINDINGS.md, I1).

-- act_as -- act_as
SELECT pgmem.act_as(p_user_id => %(user_id)s::text)

-- bind_role -- act_as
SELECT pgmem.bind_role(p_role => %(role)s::name, p_user_id => %(user_id)s::text)

-- current_user_id -- act_as
SELECT pgmem.current_user_id() AS user_id

-- create_space -- as_user
SELECT * FROM pgmem.create_space(p_name => pgmem.as_user(%(pgmem_user_id)s::text, %(name)s::text),
    p_model => %(model)s::text, p_dims => %(dims)s::integer, p_distance => %(distance)s::text,
    p_hnsw_m => %(hnsw_m)s::integer, p_hnsw_ef_construction => %(hnsw_ef_construction)s::integer,
    p_text_config => %(text_config)s::regconfig)

-- space -- as_user
SELECT * FROM pgmem.space(p_name => pgmem.as_user(%(pgmem_user_id)s::text, %(name)s::text))

-- list_spaces -- act_as
SELECT * FROM pgmem.list_spaces()

-- drop_space -- as_user
SELECT * FROM pgmem.drop_space(p_name => pgmem.as_user(%(pgmem_user_id)s::text, %(name)s::text))

-- add -- as_user
SELECT * FROM pgmem.add(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_content => %(content)s::text, p_embedding => %(embedding)b::vector, p_agent_id => %(agent_id)s::text,
    p_session_id => %(session_id)s::text, p_metadata => %(metadata)s::jsonb,
    p_expires_at => %(expires_at)s::timestamptz, p_model => %(model)s::text, p_vector_kinds => %(vector_kinds)s::text[],
    p_vectors => %(vectors)b::vector[])

-- add_batch -- as_user
SELECT * FROM pgmem.add_batch(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_contents => %(contents)s::text[], p_embeddings => %(embeddings)b::vector[], p_agent_ids => %(agent_ids)s::text[],
    p_session_ids => %(session_ids)s::text[], p_metadata => %(metadata)s::jsonb[],
    p_expires_at => %(expires_at)s::timestamptz[], p_model => %(model)s::text,
    p_created_at => %(created_at)s::timestamptz[], p_vector_items => %(vector_items)s::integer[],
    p_vector_kinds => %(vector_kinds)s::text[], p_vectors => %(vectors)b::vector[], p_ids => %(ids)s::uuid[],
    p_user_ids => %(user_ids)s::text[])

-- get -- as_user
SELECT * FROM pgmem.get(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid))

-- list -- as_user
SELECT * FROM pgmem.list(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_agent_id => %(agent_id)s::text, p_session_id => %(session_id)s::text, p_filter => %(filter)s::jsonb,
    p_limit => %(limit)s::integer, p_after_created_at => %(after_created_at)s::timestamptz,
    p_after_id => %(after_id)s::uuid, p_created_after => %(created_after)s::timestamptz,
    p_created_before => %(created_before)s::timestamptz, p_contains => %(contains)s::text,
    p_as_of => %(as_of)s::timestamptz)

-- search -- as_user
SELECT * FROM pgmem.search(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_embedding => %(embedding)b::vector, p_k => %(k)s::integer, p_agent_id => %(agent_id)s::text,
    p_session_id => %(session_id)s::text, p_filter => %(filter)s::jsonb,
    p_min_similarity => %(min_similarity)s::double precision, p_model => %(model)s::text,
    p_created_after => %(created_after)s::timestamptz, p_created_before => %(created_before)s::timestamptz,
    p_as_of => %(as_of)s::timestamptz)

-- update -- as_user
SELECT * FROM pgmem.update(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid), p_content => %(content)s::text,
    p_embedding => %(embedding)b::vector, p_metadata => %(metadata)s::jsonb,
    p_replace_metadata => %(replace_metadata)s::boolean, p_expected_version => %(expected_version)s::integer,
    p_agent_id => %(agent_id)s::text, p_model => %(model)s::text, p_vector_kinds => %(vector_kinds)s::text[],
    p_vectors => %(vectors)b::vector[])

-- edit -- as_user
SELECT * FROM pgmem.edit(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid), p_needle => %(needle)s::text,
    p_replacement => %(replacement)s::text, p_embedding => %(embedding)b::vector,
    p_expected_version => %(expected_version)s::integer, p_agent_id => %(agent_id)s::text, p_model => %(model)s::text,
    p_vector_kinds => %(vector_kinds)s::text[], p_vectors => %(vectors)b::vector[])

-- delete -- as_user
SELECT pgmem.delete(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid),
    p_agent_id => %(agent_id)s::text) AS deleted

-- delete_all -- as_user
SELECT pgmem.delete_all(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_agent_id => %(agent_id)s::text, p_session_id => %(session_id)s::text, p_filter => %(filter)s::jsonb,
    p_confirm => %(confirm)s::boolean, p_actor => %(actor)s::text) AS deleted

-- history -- as_user
SELECT * FROM pgmem.history(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid))

-- stats -- as_user
SELECT * FROM pgmem.stats(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text))

-- session_tail -- as_user
SELECT * FROM pgmem.session_tail(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_session_id => %(session_id)s::text, p_n => %(n)s::integer)

-- search_hybrid -- as_user
SELECT * FROM pgmem.search_hybrid(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_query => %(query)s::text, p_embedding => %(embedding)b::vector, p_k => %(k)s::integer,
    p_agent_id => %(agent_id)s::text, p_session_id => %(session_id)s::text, p_filter => %(filter)s::jsonb,
    p_created_after => %(created_after)s::timestamptz, p_created_before => %(created_before)s::timestamptz,
    p_model => %(model)s::text, p_as_of => %(as_of)s::timestamptz, p_min_score => %(min_score)s::float8)

-- supersede -- as_user
SELECT * FROM pgmem.supersede(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid),
    p_content => %(content)s::text, p_embedding => %(embedding)b::vector, p_metadata => %(metadata)s::jsonb,
    p_valid_from => %(valid_from)s::timestamptz, p_agent_id => %(agent_id)s::text,
    p_expected_version => %(expected_version)s::integer, p_model => %(model)s::text,
    p_vector_kinds => %(vector_kinds)s::text[], p_vectors => %(vectors)b::vector[])

-- invalidate -- as_user
SELECT * FROM pgmem.invalidate(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid),
    p_valid_to => %(valid_to)s::timestamptz, p_agent_id => %(agent_id)s::text)

-- chain -- as_user
SELECT * FROM pgmem.chain(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid))

-- set_retention -- as_login
SELECT * FROM pgmem.set_retention(p_space => %(space)s::text, p_memory_ttl => %(memory_ttl)s::interval,
    p_turn_ttl => %(turn_ttl)s::interval)

-- append_turn -- as_user
SELECT * FROM pgmem.append_turn(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_session_id => %(session_id)s::text, p_role => %(role)s::text, p_content => %(content)s::text, p_agent_id => %(agent_id)s::text, p_embedding => %(embedding)b::vector,
    p_metadata => %(metadata)s::jsonb, p_expires_at => %(expires_at)s::timestamptz, p_model => %(model)s::text,
    p_created_at => %(created_at)s::timestamptz)

-- recent_turns -- as_user
SELECT * FROM pgmem.recent_turns(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_session_id => %(session_id)s::text, p_n => %(n)s::integer)

-- pending_turns -- as_user
SELECT * FROM pgmem.pending_turns(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_session_id => %(session_id)s::text, p_n => %(n)s::integer)

-- consolidate -- as_user
SELECT * FROM pgmem.consolidate(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_session_id => %(session_id)s::text, p_turn_ids => %(turn_ids)s::bigint[], p_contents => %(contents)s::text[],
    p_embeddings => %(embeddings)b::vector[], p_metadata => %(metadata)s::jsonb[], p_agent_id => %(agent_id)s::text,
    p_model => %(model)s::text, p_vector_items => %(vector_items)s::integer[],
    p_vector_kinds => %(vector_kinds)s::text[], p_vectors => %(vectors)b::vector[])

-- sources -- as_user
SELECT * FROM pgmem.sources(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid))

-- context -- as_user
SELECT * FROM pgmem.context(p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text),
    p_session_id => %(session_id)s::text, p_query => %(query)s::text, p_embedding => %(embedding)b::vector,
    p_budget_tokens => %(budget_tokens)s::integer, p_max_turns => %(max_turns)s::integer,
    p_turn_share => %(turn_share)s::double precision, p_k => %(k)s::integer, p_agent_id => %(agent_id)s::text,
    p_filter => %(filter)s::jsonb, p_model => %(model)s::text)

-- token_count -- act_as
SELECT pgmem.token_count(p_text => %(text)s::text) AS tokens

-- purge -- as_user
SELECT * FROM pgmem.purge(p_limit => pgmem.as_user(%(pgmem_user_id)s::text, %(limit)s::integer))

-- erase_user -- as_user
SELECT * FROM pgmem.erase_user(p_user_id => pgmem.as_user(%(pgmem_user_id)s::text, %(user_id)s::text))

-- export_user -- as_user
SELECT row FROM pgmem.export_user(p_embeddings => pgmem.as_user(%(pgmem_user_id)s::text, %(embeddings)s::boolean)) AS row

-- import_user -- as_user
SELECT * FROM pgmem.import_user(p_rows => pgmem.as_user(%(pgmem_user_id)s::text, %(rows)s::jsonb[]))

-- The HTTP service's own state (migration 0009, pgmem/service/store.py), for the gateway role only.

-- service_setup_begin -- act_as
SELECT pgmem.service_setup_begin(p_token_hash => %(token_hash)s::bytea, p_ttl => %(ttl)s::interval) AS started

-- service_bootstrap -- act_as
SELECT pgmem.service_bootstrap(p_token_hash => %(token_hash)s::bytea, p_username => %(username)s::text,
    p_password_hash => %(password_hash)s::text) AS account_id

-- service_setup_state -- act_as
SELECT * FROM pgmem.service_setup_state()

-- service_account -- act_as
SELECT * FROM pgmem.service_account(p_username => %(username)s::text)

-- service_account_rehash -- act_as
SELECT pgmem.service_account_rehash(p_account_id => %(account_id)s::bigint, p_password_hash => %(password_hash)s::text) AS done

-- service_session_create -- act_as
SELECT pgmem.service_session_create(p_session_hash => %(session_hash)s::bytea, p_account_id => %(account_id)s::bigint,
    p_ttl => %(ttl)s::interval) AS expires_at

-- service_session -- act_as
SELECT * FROM pgmem.service_session(p_session_hash => %(session_hash)s::bytea)

-- service_session_end -- act_as
SELECT pgmem.service_session_end(p_session_hash => %(session_hash)s::bytea) AS ended

-- service_key_create -- act_as
SELECT * FROM pgmem.service_key_create(p_prefix => %(prefix)s::text, p_key_hash => %(key_hash)s::bytea,
    p_label => %(label)s::text, p_kind => %(kind)s::text, p_user_id => %(user_id)s::text, p_agent_id => %(agent_id)s::text,
    p_users => %(users)s::text[], p_scope => %(scope)s::text, p_created_by => %(created_by)s::text)

-- service_key_lookup -- act_as
SELECT * FROM pgmem.service_key_lookup(p_key_hash => %(key_hash)s::bytea)

-- service_keys -- act_as
SELECT * FROM pgmem.service_keys()

-- service_key_revoke -- act_as
SELECT pgmem.service_key_revoke(p_key_id => %(key_id)s::bigint) AS revoked

-- service_users -- act_as
SELECT * FROM pgmem.service_users()

-- service_user_add -- act_as
SELECT pgmem.service_user_add(p_user_id => %(user_id)s::text) AS done

-- service_agents -- act_as
SELECT * FROM pgmem.service_agents()

-- service_export_mark -- act_as
SELECT pgmem.service_export_mark(p_account_id => %(account_id)s::bigint, p_user_id => %(user_id)s::text) AS done

-- service_export_recent -- act_as
SELECT pgmem.service_export_recent(p_account_id => %(account_id)s::bigint, p_user_id => %(user_id)s::text,
    p_within => %(within)s::interval) AS recent

-- service_user_forget -- act_as
SELECT pgmem.service_user_forget(p_user_id => %(user_id)s::text) AS keys_revoked

-- service_log -- act_as
SELECT pgmem.service_log(p_at => %(at)s::timestamptz[], p_method => %(method)s::text[], p_route => %(route)s::text[],
    p_status => %(status)s::integer[], p_latency_ms => %(latency_ms)s::real[], p_key_prefix => %(key_prefix)s::text[],
    p_user_id => %(user_id)s::text[], p_account => %(account)s::text[]) AS written

-- service_audit -- act_as
SELECT * FROM pgmem.service_audit(p_limit => %(limit)s::integer, p_before_id => %(before_id)s::bigint,
    p_key_prefix => %(key_prefix)s::text, p_min_status => %(min_status)s::integer)

-- service_audit_purge -- act_as
SELECT pgmem.service_audit_purge(p_keep => %(keep)s::interval) AS removed

-- service_migrations -- act_as
SELECT * FROM pgmem.service_migrations()
