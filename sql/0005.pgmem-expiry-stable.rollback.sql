-- Undo 0005: pgmem._expiry declared IMMUTABLE again, as 0003 made it.
ALTER FUNCTION pgmem._expiry(timestamptz, timestamptz, interval) IMMUTABLE;
