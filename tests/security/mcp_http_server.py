"""A `pgmem mcp --transport streamable-http` server for tests/security/test_mcp_http.py (spawned with
sys.executable; not a test module), with the deterministic test embedder instead of the model:

    python tests/security/mcp_http_server.py DSN PORT      (the token from $PGMEM_MCP_TOKEN)

It serves user alice through the gateway role on 127.0.0.1:PORT until it is terminated.
"""

from __future__ import annotations

import sys

from pgmem.integrations import mcp as mcp_server
from pgmem.testing import HashEmbedder


def main() -> None:
    dsn, port = sys.argv[1], int(sys.argv[2])
    mcp_server.serve(dsn, user="alice", agent="http-agent", space="t64", role="pgmem_gateway",
                     transport="streamable-http", port=port, embedder=HashEmbedder(64))


if __name__ == "__main__":
    main()
