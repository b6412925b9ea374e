"""pgmem: shared, durable memory for fleets of AI agents, on PostgreSQL and pgvector.

The API lives in SQL (schema ``pgmem``); this package is a thin psycopg 3 wrapper over it. Start with
:class:`Memory` (``AsyncMemory`` for asyncio; ``Memory.writer()`` for a background writer).
"""

from typing import TYPE_CHECKING

from .errors import (
    AmbiguousEdit,
    DatabaseError,
    DatabaseUnavailable,
    DimensionMismatch,
    DuplicateMemory,
    EditError,
    EmbedderError,
    EmbeddingSpaceMismatch,
    IdentityError,
    InvalidFilter,
    NeedleNotFound,
    NotFound,
    PermissionDenied,
    PgmemError,
    SchemaError,
    ScopeRequired,
    UnsafePath,
    SummariserError,
    ValidationError,
    VersionConflict,
)

__version__ = "0.1.0"
#: The name pgmem is published under on PyPI (``pip install pgmem-agents``); ``pgmem`` there is another project.
DISTRIBUTION = "pgmem-agents"

__all__ = [
    "AddResult", "AmbiguousEdit", "DISTRIBUTION", "AsyncMemory", "BackgroundWriter", "DatabaseError", "DatabaseUnavailable",
    "DimensionMismatch", "DuplicateMemory",
    "EditError", "Embedder", "EmbedderConfig", "EmbedderError", "EmbeddingSpaceMismatch", "HistoryEvent", "IdentityError",
    "InvalidFilter", "Memory", "MemoryRecord", "NeedleNotFound", "NotFound", "Page", "PermissionDenied",
    "E5SmallEmbedder", "MiniLMEmbedder", "OpenAIEmbedder", "PgmemError", "SchemaError", "ScopeRequired", "SentenceTransformerEmbedder", "SummariserError", "Space", "SpaceStats",
    "QueueFull", "ValidationError", "Context", "ContextItem", "PurgeResult", "Source", "Turn", "UnsafePath", "VersionConflict", "WriterClosed", "WriterReport", "default_embedder", "from_config",
]

# The rest is imported on first use (PEP 562), so that `import pgmem` and a CLI command that needs no database
# client, no asyncio and no embedder do not pay for them.
_LAZY = {
    "AsyncMemory": "aio",
    "Memory": "client",
    **{name: "records" for name in ("AddResult", "Context", "ContextItem", "HistoryEvent", "MemoryRecord", "Page",
                                    "PurgeResult", "Source", "Space", "SpaceStats", "Turn")},
    **{name: "embedders" for name in ("E5SmallEmbedder", "Embedder", "EmbedderConfig", "MiniLMEmbedder", "OpenAIEmbedder",
                                      "SentenceTransformerEmbedder", "default_embedder", "from_config")},
    **{name: "writer" for name in ("BackgroundWriter", "QueueFull", "WriterClosed", "WriterReport")},
}

if TYPE_CHECKING:
    from .aio import AsyncMemory
    from .client import Memory
    from .records import (
        AddResult, Context, ContextItem, HistoryEvent, MemoryRecord, Page, PurgeResult, Source, Space, SpaceStats, Turn,
    )
    from .embedders import (
        E5SmallEmbedder, Embedder, EmbedderConfig, MiniLMEmbedder, OpenAIEmbedder, SentenceTransformerEmbedder,
        default_embedder, from_config,
    )
    from .writer import BackgroundWriter, QueueFull, WriterClosed, WriterReport


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pgmem' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
