-- pgmem: _expiry is STABLE, not IMMUTABLE (timestamptz + interval depends on TimeZone), so PostgreSQL inlines it
-- depends: 0004.pgmem-search-plans

-- pgmem._expiry(expires_at, created_at, ttl) = coalesce(expires_at, created_at + ttl, 'infinity') was declared
-- IMMUTABLE, but adding an interval to a timestamptz is STABLE: a TTL in days crosses a change of summer time
-- in the session's TimeZone (tests/test_lifecycle.py shows one instant giving two results). PostgreSQL does not
-- inline a SQL function whose body is more volatile than its declaration, so every use called it once per
-- row (1.5 us against 0.6 us for the expression inline; bench/FINDINGS.md S9): in the liveness conditions of
-- get, list, stats and purge, over every row they look at, and in the columns of search results. Declared
-- STABLE it is inlined everywhere. No index or constraint uses it (that would need IMMUTABLE).
ALTER FUNCTION pgmem._expiry(timestamptz, timestamptz, interval) STABLE;
