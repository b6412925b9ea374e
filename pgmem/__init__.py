"""pgmem: shared, durable memory for fleets of AI agents, on PostgreSQL and pgvector.

The API lives in SQL (schema ``pgmem``); this package is a thin psycopg 3 wrapper over it. Start with
:class:`Memory` (``AsyncMemory`` for asyncio; ``Memory.writer()`` for a background writer).
"""

from .aio import AsyncMemory
from .client import (
    AddResult, Context, ContextItem, HistoryEvent, Memory, MemoryRecord, Page, PurgeResult, Source, Space, SpaceStats,
    Turn,
)
from .embedders import Embedder, OpenAIEmbedder, SentenceTransformerEmbedder, default_embedder
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
    SummariserError,
    ValidationError,
    VersionConflict,
)
from .writer import BackgroundWriter, QueueFull, WriterClosed, WriterReport

__version__ = "0.1.0"

__all__ = [
    "AddResult", "AmbiguousEdit", "AsyncMemory", "BackgroundWriter", "DatabaseError", "DatabaseUnavailable",
    "DimensionMismatch", "DuplicateMemory",
    "EditError", "Embedder", "EmbedderError", "EmbeddingSpaceMismatch", "HistoryEvent", "IdentityError",
    "InvalidFilter", "Memory", "MemoryRecord", "NeedleNotFound", "NotFound", "Page", "PermissionDenied",
    "OpenAIEmbedder", "PgmemError", "SchemaError", "ScopeRequired", "SentenceTransformerEmbedder", "SummariserError", "Space", "SpaceStats",
    "QueueFull", "ValidationError", "Context", "ContextItem", "PurgeResult", "Source", "Turn", "VersionConflict", "WriterClosed", "WriterReport", "default_embedder",
]
