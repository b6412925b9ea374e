-- Undo 0008: the space administration functions go; no data involved.
DROP FUNCTION pgmem.drop_space(text);
DROP FUNCTION pgmem.list_spaces();
