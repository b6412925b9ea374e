-- The vector extension may serve other schemas of this database: rolling pgmem back leaves it in place.
DO $pgmem$ BEGIN NULL; END $pgmem$;
