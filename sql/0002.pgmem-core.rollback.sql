-- Remove the pgmem schema and everything in it. The cluster-wide roles stay when other databases use them.
-- drops: the pgmem schema and every memory in it
DROP SCHEMA pgmem CASCADE;
DO $pgmem$
BEGIN
    BEGIN
        REVOKE pgmem_agent FROM pgmem_gateway;
        DROP ROLE IF EXISTS pgmem_gateway;
        DROP ROLE IF EXISTS pgmem_agent;
    EXCEPTION WHEN dependent_objects_still_exist OR insufficient_privilege OR object_in_use THEN
        RAISE NOTICE 'pgmem roles kept: %', SQLERRM;
    END;
END
$pgmem$;
