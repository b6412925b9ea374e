-- pgmem current schema, part 85: the HTTP service's state (pgmem serve): API keys, dashboard accounts and
-- sessions, the setup token, the users it knows, exports, the request log. Tables granted to nobody, reached
-- through owner-run definer functions granted to pgmem_gateway (99-privileges.sql).

-- The HTTP service (`pgmem serve`, docs/service.md) keeps its own state here, beside the memories, so that
-- one backup holds everything. None of these tables holds memory contents and none is granted to anyone:
-- the service reaches them only through the SECURITY DEFINER functions below, which EXECUTE is granted to
-- pgmem_gateway only (the role the service connects as). Secrets are never stored: API keys, session tokens
-- and the setup token as SHA-256 digests of high-entropy random values, passwords as argon2id hashes made
-- in Python (argon2-cffi).

-- One row: the one-time setup link's token, while no dashboard account exists.
CREATE TABLE pgmem.service_setup (
    singleton   boolean     NOT NULL DEFAULT true,
    token_hash  bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    CONSTRAINT service_setup_pkey PRIMARY KEY (singleton),
    CONSTRAINT service_setup_singleton_check CHECK (singleton)
);
COMMENT ON TABLE pgmem.service_setup IS
    'The one-time setup token of pgmem serve (SHA-256 digest), present only until the first dashboard account is created.';


CREATE TABLE pgmem.service_accounts (
    account_id     bigint      GENERATED ALWAYS AS IDENTITY,
    username       text        NOT NULL,
    password_hash  text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    last_login_at  timestamptz,
    CONSTRAINT service_accounts_pkey PRIMARY KEY (account_id),
    CONSTRAINT service_accounts_username_key UNIQUE (username),
    CONSTRAINT service_accounts_username_check CHECK (username ~ '^[A-Za-z0-9._@-]{1,64}$'),
    CONSTRAINT service_accounts_password_hash_check CHECK (password_hash LIKE '$argon2%')
);
COMMENT ON TABLE pgmem.service_accounts IS
    'Dashboard accounts of pgmem serve (administrators); passwords as argon2id hashes.';


CREATE TABLE pgmem.service_sessions (
    session_hash  bytea       NOT NULL,
    account_id    bigint      NOT NULL REFERENCES pgmem.service_accounts ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    CONSTRAINT service_sessions_pkey PRIMARY KEY (session_hash)
);
CREATE INDEX service_sessions_expires_at_idx ON pgmem.service_sessions (expires_at);
COMMENT ON TABLE pgmem.service_sessions IS
    'Dashboard sessions of pgmem serve: SHA-256 digests of the session cookies, with their expiry.';


CREATE TABLE pgmem.service_keys (
    key_id        bigint      GENERATED ALWAYS AS IDENTITY,
    prefix        text        NOT NULL,
    key_hash      bytea       NOT NULL,
    label         text        NOT NULL,
    kind          text        NOT NULL,
    user_id       text,
    agent_id      text,
    users         text[],
    scope         text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text,
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    CONSTRAINT service_keys_pkey PRIMARY KEY (key_id),
    CONSTRAINT service_keys_prefix_key UNIQUE (prefix),
    CONSTRAINT service_keys_key_hash_key UNIQUE (key_hash),
    CONSTRAINT service_keys_label_check CHECK (length(label) BETWEEN 1 AND 200),
    CONSTRAINT service_keys_scope_check CHECK (scope IN ('read', 'write')),
    CONSTRAINT service_keys_kind_check CHECK (
        (kind = 'user' AND user_id IS NOT NULL AND users IS NULL)
        OR (kind = 'admin' AND user_id IS NULL AND agent_id IS NULL AND cardinality(users) >= 1)),
    CONSTRAINT service_keys_user_id_check CHECK (user_id <> '' AND length(user_id) <= 256),
    CONSTRAINT service_keys_agent_id_check CHECK (agent_id <> '' AND length(agent_id) <= 256)
);
COMMENT ON TABLE pgmem.service_keys IS
    'API keys of pgmem serve: a prefix shown to people, the SHA-256 digest of the whole key, and what it may reach: one user (optionally as one agent), or, for an admin key, the users it names.';


-- The users the service knows of (named by a key, or opened in the dashboard): the dashboard's entity list.
-- Memories are under row-level security, so nobody can list every user from them; this list is the service's.
CREATE TABLE pgmem.service_users (
    user_id    text        NOT NULL,
    added_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT service_users_pkey PRIMARY KEY (user_id),
    CONSTRAINT service_users_user_id_check CHECK (user_id <> '' AND length(user_id) <= 256)
);
COMMENT ON TABLE pgmem.service_users IS 'Users known to pgmem serve (named by a key or opened in the dashboard).';


-- Exports downloaded from the dashboard: erasing a user needs a recent export by the same account.
CREATE TABLE pgmem.service_exports (
    account_id   bigint      NOT NULL REFERENCES pgmem.service_accounts ON DELETE CASCADE,
    user_id      text        NOT NULL,
    exported_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT service_exports_pkey PRIMARY KEY (account_id, user_id)
);
COMMENT ON TABLE pgmem.service_exports IS 'When a dashboard account last downloaded the export of a user (erasure needs one).';


-- The request log: one row per HTTP request, never a body or a memory's content.
CREATE TABLE pgmem.service_audit (
    audit_id    bigint      GENERATED ALWAYS AS IDENTITY,
    at          timestamptz NOT NULL,
    method      text        NOT NULL,
    route       text        NOT NULL,
    status      integer     NOT NULL,
    latency_ms  real        NOT NULL,
    key_prefix  text,
    user_id     text,
    account     text,
    CONSTRAINT service_audit_pkey PRIMARY KEY (audit_id)
);
CREATE INDEX service_audit_at_idx ON pgmem.service_audit (at);
COMMENT ON TABLE pgmem.service_audit IS
    'Request log of pgmem serve: time, method, route template, status, latency, key prefix, user, dashboard account. Kept for the configured retention (pgmem.service_audit_purge).';


-- --- setup and accounts ----------------------------------------------------------------------------------

CREATE FUNCTION pgmem.service_setup_begin(p_token_hash bytea, p_ttl interval) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    LOCK TABLE pgmem.service_setup IN EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM pgmem.service_accounts) THEN
        DELETE FROM pgmem.service_setup;
        RETURN false;
    END IF;
    INSERT INTO pgmem.service_setup (token_hash, expires_at) VALUES (p_token_hash, now() + p_ttl)
    ON CONFLICT (singleton) DO UPDATE SET token_hash = EXCLUDED.token_hash, created_at = now(),
                                          expires_at = EXCLUDED.expires_at;
    RETURN true;
END
$$;
COMMENT ON FUNCTION pgmem.service_setup_begin(bytea, interval) IS
    'pgmem serve at start: while no dashboard account exists, store the digest of a new one-time setup token (replacing an older one) valid for p_ttl and return true; once an account exists, return false.';

CREATE FUNCTION pgmem.service_bootstrap(p_token_hash bytea, p_username text, p_password_hash text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    LOCK TABLE pgmem.service_setup IN EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM pgmem.service_accounts)
       OR NOT EXISTS (SELECT 1 FROM pgmem.service_setup s WHERE s.token_hash = p_token_hash AND s.expires_at > now()) THEN
        RETURN NULL;
    END IF;
    INSERT INTO pgmem.service_accounts (username, password_hash) VALUES (p_username, p_password_hash)
    RETURNING account_id INTO v_id;
    DELETE FROM pgmem.service_setup;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION pgmem.service_bootstrap(bytea, text, text) IS
    'Create the first dashboard account with the one-time setup token (its digest), consuming it; NULL when the token is wrong or expired or an account exists already.';

CREATE FUNCTION pgmem.service_setup_state() RETURNS TABLE (accounts bigint, setup_pending boolean)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT (SELECT count(*) FROM pgmem.service_accounts),
           EXISTS (SELECT 1 FROM pgmem.service_setup s WHERE s.expires_at > now())
$$;
COMMENT ON FUNCTION pgmem.service_setup_state() IS
    'How many dashboard accounts exist, and whether a setup token is waiting to be used.';

CREATE FUNCTION pgmem.service_account(
    p_username text
) RETURNS TABLE (account_id bigint, username text, password_hash text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT a.account_id, a.username, a.password_hash FROM pgmem.service_accounts a WHERE a.username = p_username
$$;
COMMENT ON FUNCTION pgmem.service_account(text) IS
    'The dashboard account of this user name with its argon2 password hash, for the service to verify a login.';

CREATE FUNCTION pgmem.service_account_rehash(p_account_id bigint, p_password_hash text) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    UPDATE pgmem.service_accounts SET password_hash = p_password_hash WHERE account_id = p_account_id
$$;
COMMENT ON FUNCTION pgmem.service_account_rehash(bigint, text) IS
    'Replace an account''s password hash (after a login whose hash used older argon2 parameters).';

-- --- sessions --------------------------------------------------------------------------------------------

CREATE FUNCTION pgmem.service_session_create(
    p_session_hash bytea,
    p_account_id bigint,
    p_ttl interval
) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_expires timestamptz := now() + p_ttl;
BEGIN
    DELETE FROM pgmem.service_sessions WHERE expires_at <= now();
    INSERT INTO pgmem.service_sessions (session_hash, account_id, expires_at) VALUES (p_session_hash, p_account_id, v_expires);
    UPDATE pgmem.service_accounts SET last_login_at = now() WHERE account_id = p_account_id;
    RETURN v_expires;
END
$$;
COMMENT ON FUNCTION pgmem.service_session_create(bytea, bigint, interval) IS
    'Open a dashboard session (the digest of its cookie) for p_ttl; removes expired sessions; returns the expiry.';

CREATE FUNCTION pgmem.service_session(
    p_session_hash bytea
) RETURNS TABLE (account_id bigint, username text, expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT a.account_id, a.username, s.expires_at
    FROM pgmem.service_sessions s JOIN pgmem.service_accounts a USING (account_id)
    WHERE s.session_hash = p_session_hash AND s.expires_at > now()
$$;
COMMENT ON FUNCTION pgmem.service_session(bytea) IS 'The account of an unexpired dashboard session (by the digest of its cookie).';

CREATE FUNCTION pgmem.service_session_end(p_session_hash bytea) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    DELETE FROM pgmem.service_sessions WHERE session_hash = p_session_hash;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION pgmem.service_session_end(bytea) IS 'Log out: remove a dashboard session; true when it existed.';

-- --- API keys --------------------------------------------------------------------------------------------

CREATE FUNCTION pgmem.service_key_create(
    p_prefix text,
    p_key_hash bytea,
    p_label text,
    p_kind text,
    p_user_id text,
    p_agent_id text,
    p_users text[],
    p_scope text,
    p_created_by text
) RETURNS TABLE (key_id bigint, prefix text, created_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgmem.service_accounts) THEN
        RAISE EXCEPTION 'no dashboard account exists yet: keys are issued only after setup'
            USING ERRCODE = 'PGM01', HINT = 'Open the setup link that pgmem serve printed at its first start.';
    END IF;
    INSERT INTO pgmem.service_users (user_id)
    SELECT u FROM unnest(coalesce(p_users, ARRAY[p_user_id])) u ON CONFLICT DO NOTHING;
    RETURN QUERY
    INSERT INTO pgmem.service_keys AS k (prefix, key_hash, label, kind, user_id, agent_id, users, scope, created_by)
    VALUES (p_prefix, p_key_hash, p_label, p_kind, p_user_id, p_agent_id, p_users, p_scope, p_created_by)
    RETURNING k.key_id, k.prefix, k.created_at;
END
$$;
COMMENT ON FUNCTION pgmem.service_key_create(text, bytea, text, text, text, text, text[], text, text) IS
    'Issue an API key (its prefix and SHA-256 digest; the key itself is never stored): kind user (p_user_id, optionally p_agent_id) or admin (p_users), scope read or write. Refused (PGM01) before the first dashboard account exists.';

CREATE FUNCTION pgmem.service_key_lookup(
    p_key_hash bytea
) RETURNS TABLE (
    key_id bigint,
    prefix text,
    label text,
    kind text,
    user_id text,
    agent_id text,
    users text[],
    scope text
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT k.key_id, k.prefix, k.label, k.kind, k.user_id, k.agent_id, k.users, k.scope
    FROM pgmem.service_keys k WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
$$;
COMMENT ON FUNCTION pgmem.service_key_lookup(bytea) IS 'The unrevoked API key with this SHA-256 digest, and what it may reach.';

CREATE FUNCTION pgmem.service_keys() RETURNS TABLE (
    key_id bigint,
    prefix text,
    label text,
    kind text,
    user_id text,
    agent_id text,
    users text[],
    scope text,
    created_at timestamptz,
    created_by text,
    last_used_at timestamptz,
    revoked_at timestamptz
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT k.key_id, k.prefix, k.label, k.kind, k.user_id, k.agent_id, k.users, k.scope, k.created_at, k.created_by,
           k.last_used_at, k.revoked_at
    FROM pgmem.service_keys k ORDER BY k.revoked_at IS NOT NULL, k.created_at DESC, k.key_id DESC
$$;
COMMENT ON FUNCTION pgmem.service_keys() IS 'Every API key (active first, newest first) without its digest, for the dashboard.';

CREATE FUNCTION pgmem.service_key_revoke(p_key_id bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    UPDATE pgmem.service_keys SET revoked_at = now() WHERE key_id = p_key_id AND revoked_at IS NULL;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION pgmem.service_key_revoke(bigint) IS 'Revoke an API key at once; true when it was active.';

-- --- users known to the service, exports, erasure bookkeeping ---------------------------------------------

CREATE FUNCTION pgmem.service_users() RETURNS TABLE (user_id text, added_at timestamptz, keys bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT u.user_id, u.added_at,
           (SELECT count(*) FROM pgmem.service_keys k
            WHERE k.revoked_at IS NULL AND (k.user_id = u.user_id OR u.user_id = ANY (k.users)))
    FROM pgmem.service_users u ORDER BY u.user_id
$$;
COMMENT ON FUNCTION pgmem.service_users() IS 'Users known to the service (named by a key or opened in the dashboard) with their active keys.';

CREATE FUNCTION pgmem.service_user_add(p_user_id text) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    INSERT INTO pgmem.service_users (user_id) VALUES (p_user_id) ON CONFLICT DO NOTHING
$$;
COMMENT ON FUNCTION pgmem.service_user_add(text) IS 'Remember a user in the service''s entity list (idempotent).';

CREATE FUNCTION pgmem.service_agents() RETURNS TABLE (space text, agent_id text, memories bigint, newest timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT s.name, m.agent_id, count(*), max(m.created_at)
    FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
    WHERE m.user_id = pgmem._require_user()
      AND pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()
    GROUP BY s.name, m.agent_id ORDER BY s.name, count(*) DESC, m.agent_id NULLS LAST
$$;
COMMENT ON FUNCTION pgmem.service_agents() IS
    'The current user''s agents with their memory counts per space (row-level security applies: the identity is the caller''s, via pgmem.act_as).';

CREATE FUNCTION pgmem.service_export_mark(p_account_id bigint, p_user_id text) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    INSERT INTO pgmem.service_exports (account_id, user_id) VALUES (p_account_id, p_user_id)
    ON CONFLICT (account_id, user_id) DO UPDATE SET exported_at = now()
$$;
COMMENT ON FUNCTION pgmem.service_export_mark(bigint, text) IS 'Record that a dashboard account downloaded the export of a user.';

CREATE FUNCTION pgmem.service_export_recent(p_account_id bigint, p_user_id text, p_within interval) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM pgmem.service_exports e
                   WHERE e.account_id = p_account_id AND e.user_id = p_user_id AND e.exported_at > now() - p_within)
$$;
COMMENT ON FUNCTION pgmem.service_export_recent(bigint, text, interval) IS
    'Whether this dashboard account downloaded the export of this user within p_within.';

CREATE FUNCTION pgmem.service_user_forget(p_user_id text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_keys bigint;
BEGIN
    UPDATE pgmem.service_keys SET revoked_at = now() WHERE revoked_at IS NULL AND user_id = p_user_id;
    GET DIAGNOSTICS v_keys = ROW_COUNT;
    DELETE FROM pgmem.service_exports WHERE user_id = p_user_id;
    DELETE FROM pgmem.service_users WHERE user_id = p_user_id;
    RETURN v_keys;
END
$$;
COMMENT ON FUNCTION pgmem.service_user_forget(text) IS
    'After a user is erased: revoke the keys bound to that user and drop it from the service''s lists; returns the keys revoked. Admin keys naming it keep their other users.';

-- --- the request log -------------------------------------------------------------------------------------

CREATE FUNCTION pgmem.service_log(
    p_at timestamptz[],
    p_method text[],
    p_route text[],
    p_status integer[],
    p_latency_ms real[],
    p_key_prefix text[],
    p_user_id text[],
    p_account text[]
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_n integer;
BEGIN
    INSERT INTO pgmem.service_audit (at, method, route, status, latency_ms, key_prefix, user_id, account)
    SELECT * FROM unnest(p_at, p_method, p_route, p_status, p_latency_ms, p_key_prefix, p_user_id, p_account);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE pgmem.service_keys k SET last_used_at = u.at
    FROM (SELECT x.prefix, max(x.at) AS at FROM unnest(p_key_prefix, p_at) AS x(prefix, at)
          WHERE x.prefix IS NOT NULL GROUP BY x.prefix) u
    WHERE k.prefix = u.prefix AND (k.last_used_at IS NULL OR k.last_used_at < u.at);
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION pgmem.service_log(timestamptz[], text[], text[], integer[], real[], text[], text[], text[]) IS
    'Append a batch of request-log rows (parallel arrays; never bodies) and move the last_used_at of the keys they name; returns the rows written.';

CREATE FUNCTION pgmem.service_audit(
    p_limit integer,
    p_before_id bigint,
    p_key_prefix text,
    p_min_status integer
) RETURNS TABLE (
    audit_id bigint,
    at timestamptz,
    method text,
    route text,
    status integer,
    latency_ms real,
    key_prefix text,
    user_id text,
    account text
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT a.audit_id, a.at, a.method, a.route, a.status, a.latency_ms, a.key_prefix, a.user_id, a.account
    FROM pgmem.service_audit a
    WHERE (p_before_id IS NULL OR a.audit_id < p_before_id)
      AND (p_key_prefix IS NULL OR a.key_prefix = p_key_prefix)
      AND (p_min_status IS NULL OR a.status >= p_min_status)
    ORDER BY a.audit_id DESC LIMIT least(greatest(p_limit, 1), 1000)
$$;
COMMENT ON FUNCTION pgmem.service_audit(integer, bigint, text, integer) IS
    'The request log, newest first, at most p_limit (<= 1000) rows before p_before_id (keyset pagination), optionally of one key prefix or at least one status.';

CREATE FUNCTION pgmem.service_audit_purge(p_keep interval) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    v_n bigint;
BEGIN
    DELETE FROM pgmem.service_audit WHERE at < now() - p_keep;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    DELETE FROM pgmem.service_sessions WHERE expires_at <= now();
    DELETE FROM pgmem.service_setup WHERE expires_at <= now();
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION pgmem.service_audit_purge(interval) IS
    'Remove request-log rows older than p_keep (and expired sessions and setup tokens); returns the log rows removed.';

-- --- readiness -------------------------------------------------------------------------------------------

CREATE FUNCTION pgmem.service_migrations() RETURNS TABLE (migration_id text, migration_hash text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF to_regclass('public._yoyo_migration') IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE 'SELECT migration_id::text, migration_hash::text FROM public._yoyo_migration';
END
$$;
COMMENT ON FUNCTION pgmem.service_migrations() IS
    'yoyo''s record of applied migrations (public._yoyo_migration, read as the schema owner), so that the service''s readiness check sees whether migrations are current without reading the table itself; no rows when it does not exist.';
