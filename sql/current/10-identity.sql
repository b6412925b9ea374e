-- pgmem current schema, part 10: identity. Who a statement acts for: a login bound to one user
-- (role_bindings, keyed by the role's OID), or a gateway that names the user per transaction (act_as).
-- Row-level security everywhere compares user_id with pgmem.current_user_id().

-- Login roles bound to one user, keyed by the role's OID: a role dropped and created again under the same
-- name is not bound (its new OID differs). The schema owner writes them (bind_role, unbind_role).
CREATE TABLE pgmem.role_bindings (
    role_name   name        NOT NULL,
    user_id     text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    role_oid    oid         NOT NULL,
    CONSTRAINT role_bindings_pkey PRIMARY KEY (role_oid),
    CONSTRAINT role_bindings_user_id_check CHECK (user_id <> '' AND length(user_id) <= 256)
);
COMMENT ON TABLE pgmem.role_bindings IS
    'Login roles bound to one pgmem user (tenant). A bound login always acts as that user, whatever it sets. Readable only by the schema owner.';
COMMENT ON COLUMN pgmem.role_bindings.role_oid IS 'The bound role (pg_roles.oid): a role dropped and created again under the same name is not bound.';
COMMENT ON COLUMN pgmem.role_bindings.role_name IS 'The role''s name when it was bound (for people; identity is role_oid).';

-- The identity of this statement: the user a bound login is bound to; otherwise, for members of
-- pgmem_gateway (superusers included), the transaction's pgmem.user_id setting; otherwise NULL (no rows).
-- session_user, not current_user: SET ROLE cannot change it, so a bound agent cannot shed its binding.
-- A session of pgmem_api itself (never a login on a single server; on a Citus cluster the coordinator's
-- connection to a worker, made as the functions' owner) acts for the pgmem.user_id the coordinator set
-- (pgmem._require_user sets it to the user it resolved), without reading role_bindings: a policy checked row
-- by row on a shard would otherwise run that read as a nested distributed query per row.
CREATE FUNCTION pgmem.current_user_id() RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text;
BEGIN
    IF session_user = 'pgmem_api' THEN
        RETURN nullif(pg_catalog.current_setting('pgmem.user_id', true), '');
    END IF;
    -- PL/pgSQL keeps the lookup's plan for the connection, and the role's OID comes from the role cache
    -- (to_regrole of the quoted name: the same role as pg_roles.rolname = session_user): 9-12 us a call
    -- against 20-37 us for the SQL function before (run once per statement by every policy; bench/FINDINGS.md S11).
    SELECT rb.user_id INTO v_user FROM pgmem.role_bindings rb
    WHERE rb.role_oid = pg_catalog.to_regrole(pg_catalog.quote_ident(session_user))::oid;
    IF FOUND THEN
        RETURN v_user;
    END IF;
    IF pg_catalog.pg_has_role(session_user, 'pgmem_gateway', 'MEMBER') THEN
        RETURN nullif(pg_catalog.current_setting('pgmem.user_id', true), '');
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION pgmem.current_user_id() IS
    'The pgmem user (tenant) this statement acts for: the binding of a bound login role, else pgmem.user_id for gateway members, else NULL (sees no rows).';

-- VOLATILE: it may SET LOCAL pgmem.user_id to the user it resolved (a bound login's user), so that on a
-- Citus cluster the workers, which see the coordinator's connection and not the caller's login, act for the
-- same user (citus.propagate_set_commands = 'local' sends SET LOCAL, not set_config, to them).
CREATE FUNCTION pgmem._require_user() RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_user text := pgmem.current_user_id();
BEGIN
    IF v_user IS NULL THEN
        RAISE EXCEPTION 'no pgmem identity: this login is not bound to a user and no user was named'
            USING ERRCODE = 'PGM01',
                  HINT = 'A gateway runs SELECT pgmem.act_as(''<user id>'') in the transaction; an agent login is bound with pgmem.bind_role().';
    END IF;
    IF current_setting('pgmem.user_id', true) IS DISTINCT FROM v_user THEN
        EXECUTE pg_catalog.format('SET LOCAL pgmem.user_id = %L', v_user);
    END IF;
    RETURN v_user;
END
$$;
COMMENT ON FUNCTION pgmem._require_user() IS 'Internal: the current pgmem user, or error PGM01 when none is set; sets pgmem.user_id to it for the rest of the transaction.';

CREATE FUNCTION pgmem.act_as(p_user_id text) RETURNS text
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
    WHERE b.role_oid = pg_catalog.to_regrole(pg_catalog.quote_ident(session_user))::oid;
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
    EXECUTE pg_catalog.format('SET LOCAL pgmem.user_id = %L', p_user_id);
    RETURN p_user_id;
END
$$;
COMMENT ON FUNCTION pgmem.act_as(text) IS
    'Gateway roles: act for this user until the end of the transaction. Bound logins: succeeds only for their own user. Returns the user id.';

CREATE FUNCTION pgmem.bind_role(p_role name, p_user_id text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_oid oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
    v_now timestamptz := now();
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
    -- The time as a value (v_now): Citus refuses now() in ON CONFLICT DO UPDATE SET on a reference table.
    INSERT INTO pgmem.role_bindings (role_oid, role_name, user_id) VALUES (v_oid, p_role, p_user_id)
    ON CONFLICT (role_oid) DO UPDATE SET role_name = EXCLUDED.role_name, user_id = EXCLUDED.user_id, created_at = v_now;
END
$$;
COMMENT ON FUNCTION pgmem.bind_role(name, text) IS
    'Schema owner only: bind a login role (by its OID) to one pgmem user. The role must also be granted pgmem_agent. A role dropped and created again under the same name must be bound again.';

-- PL/pgSQL, not LANGUAGE sql: Citus cannot plan a parameterised SQL function's statement on a reference
-- table; the role's OID is looked up first.
CREATE FUNCTION pgmem.unbind_role(p_role name) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_oid oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = p_role);
BEGIN
    DELETE FROM pgmem.role_bindings b WHERE b.role_name = p_role OR b.role_oid = v_oid;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION pgmem.unbind_role(name) IS 'Schema owner only: remove a login role''s binding. Returns whether one existed.';

-- On a Citus cluster the identity it sets stays on the coordinator (SET LOCAL reaches the workers only in a
-- transaction block), so the call would read nothing and write for no one: there it refuses (PGM11), and a
-- client that connected before pgmem distribute switches to cluster mode and calls again.
CREATE FUNCTION pgmem.as_user(p_user_id text, p_value anyelement) RETURNS anyelement
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = 'pgmem.memories'::regclass) THEN
            RAISE EXCEPTION 'pgmem.as_user cannot carry the identity on a Citus cluster (schema pgmem is distributed)'
                USING ERRCODE = 'PGM11',
                      HINT = 'Run the call in a transaction after pgmem.act_as, or call its *_for function; pgmem clients switch by themselves.';
        END IF;
    END IF;
    PERFORM pgmem.act_as(p_user_id);
    RETURN p_value;
END
$$;
COMMENT ON FUNCTION pgmem.as_user(text, anyelement) IS
    'pgmem.act_as(p_user_id), then p_value: wraps one argument of a PL/pgSQL API call so that the call acts for that user in one statement. Same checks and errors as act_as; PGM11 on a Citus cluster (distributed schema), where it cannot carry the identity.';
