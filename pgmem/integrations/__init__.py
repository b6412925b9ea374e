"""pgmem inside agent hosts: the MCP server (:mod:`pgmem.integrations.mcp`, ``pgmem mcp``), the hermes-agent
memory provider (:mod:`pgmem.integrations.hermes`), the LangGraph store and LangChain chat history
(:mod:`pgmem.integrations.langgraph`, :mod:`pgmem.integrations.langchain`) and the installer of plugin shims
(:mod:`pgmem.integrations.install`, ``pgmem install-plugin``). See docs/integrations.md."""
