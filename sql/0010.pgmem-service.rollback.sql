-- Undo 0009: the service's functions and tables (API keys, dashboard accounts and sessions, request log) dropped; memories untouched.
-- drops: the service's API keys, dashboard accounts and request log
DROP FUNCTION pgmem.service_setup_begin(bytea, interval), pgmem.service_bootstrap(bytea, text, text),
    pgmem.service_setup_state(), pgmem.service_account(text), pgmem.service_account_rehash(bigint, text),
    pgmem.service_session_create(bytea, bigint, interval), pgmem.service_session(bytea), pgmem.service_session_end(bytea),
    pgmem.service_key_create(text, bytea, text, text, text, text, text[], text, text), pgmem.service_key_lookup(bytea),
    pgmem.service_keys(), pgmem.service_key_revoke(bigint), pgmem.service_users(), pgmem.service_user_add(text),
    pgmem.service_agents(), pgmem.service_export_mark(bigint, text), pgmem.service_export_recent(bigint, text, interval),
    pgmem.service_user_forget(text),
    pgmem.service_log(timestamptz[], text[], text[], integer[], real[], text[], text[], text[]),
    pgmem.service_audit(integer, bigint, text, integer), pgmem.service_audit_purge(interval), pgmem.service_migrations();
DROP TABLE pgmem.service_audit, pgmem.service_exports, pgmem.service_users, pgmem.service_keys, pgmem.service_sessions,
    pgmem.service_accounts, pgmem.service_setup;
