"""pgmem inside agent hosts: the hermes-agent memory provider (:mod:`pgmem.integrations.hermes`) and the
installer of plugin shims (:mod:`pgmem.integrations.install`, ``pgmem install-plugin``). See
docs/integrations.md."""
