"""One embedder configuration for every surface: :func:`load_config` reads the environment and the config
file, :func:`from_config` builds the embedder they name, :func:`default_embedder` is what the library uses
when given none, and :func:`available` says whether its packages are installed (docs/embedders.md)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from ..errors import EmbedderError
from .e5 import E5_DIMS, E5_MODEL, E5_PACKAGE, E5SmallEmbedder
from .http import OpenAIEmbedder
from .minilm import MINILM_DIMS, MINILM_MODEL, MINILM_RUNTIMES, MiniLMEmbedder
from .protocol import Embedder
from .sentence_transformer import SentenceTransformerEmbedder


def default_embedder() -> Embedder:
    """The embedder used when none is given: :func:`from_config` (all-MiniLM-L6-v2 in numpy unless the
    environment or the config file names another)."""
    return from_config()


KINDS = ("local", "e5", "http", "sentence-transformers")
# setting -> environment variable (PGMEM_EMBED_API_KEY holds the key itself and is read from the environment only)
ENV_VARS = {"embedder": "PGMEM_EMBEDDER", "model": "PGMEM_EMBED_MODEL", "dims": "PGMEM_EMBED_DIMS",
            "url": "PGMEM_EMBED_URL", "api_key_env": "PGMEM_EMBED_API_KEY_ENV", "model_dir": "PGMEM_EMBED_MODEL_DIR",
            "runtime": "PGMEM_EMBED_RUNTIME"}
FILE_KEYS = frozenset(ENV_VARS)


@dataclass(frozen=True)
class EmbedderConfig:
    """The embedder settings in force, and where each came from (``sources``: setting -> ``"argument"``,
    ``"$VAR"`` or the config file's path).

    - ``embedder``: ``local`` (all-MiniLM-L6-v2 in numpy, the default), ``e5`` (multilingual-e5-small, 4-bit,
      :class:`E5SmallEmbedder`), ``http`` (an OpenAI-compatible endpoint), ``sentence-transformers`` (any model of that library, with torch), or ``package.module:Factory``
      (called with no arguments). ``openai:MODEL:DIMS`` is read as ``http`` with that model and dims.
    - ``model``, ``dims``: the model bound to the space and its vector length (``http``: both required).
    - ``url``: the endpoint's base URL (``http``; default ``$PGMEM_EMBEDDINGS_URL``, ``$OPENAI_BASE_URL``, then
      ``https://api.openai.com/v1``); ``api_key_env``: the variable holding its key (default ``OPENAI_API_KEY``;
      ``$PGMEM_EMBED_API_KEY`` wins when set).
    - ``model_dir``: a directory holding all-MiniLM-L6-v2's files (``local``).
    - ``runtime``: what computes the ``local`` model: ``numpy`` (default) or ``onnx`` (onnxruntime, the
      ``onnx`` extra; the same vectors, faster in batches, slower to load: :class:`MiniLMEmbedder`).
    """

    embedder: str = "local"
    model: str | None = None
    dims: int | None = None
    url: str | None = None
    api_key_env: str | None = None
    model_dir: str | None = None
    runtime: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)


def config_path() -> Path:
    """The config file: ``$PGMEM_CONFIG``, else ``platformdirs.user_config_dir("pgmem")/config.toml``
    (``~/.config/pgmem/config.toml`` on Linux)."""
    if os.environ.get("PGMEM_CONFIG"):
        return Path(os.environ["PGMEM_CONFIG"]).expanduser()
    import warnings

    warnings.filterwarnings("ignore", module="platformdirs")
    import platformdirs

    return Path(platformdirs.user_config_dir("pgmem")) / "config.toml"


def _read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        if os.environ.get("PGMEM_CONFIG"):
            raise EmbedderError(f"config file {path} (from $PGMEM_CONFIG) does not exist")
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EmbedderError(f"config file {path}: {exc}") from None
    section = data.get("embedder", {})
    if not isinstance(section, dict):
        raise EmbedderError(f"config file {path}: [embedder] must be a table")
    unknown = sorted(set(section) - FILE_KEYS)
    if unknown:
        extra = " (keys are read from the environment only: PGMEM_EMBED_API_KEY or api_key_env)" \
            if "api_key" in unknown else ""
        raise EmbedderError(f"config file {path}: unknown key(s) in [embedder]: {', '.join(unknown)}{extra}",
                            hint="known keys: " + ", ".join(sorted(FILE_KEYS)))
    return section


def _normalise(layer: dict[str, Any], label: str) -> dict[str, Any]:
    """One layer's settings, checked and with ``openai:MODEL:DIMS`` expanded. ``label``: where they come from
    (``environment`` names each variable)."""
    out: dict[str, Any] = {}
    for key, value in layer.items():
        if value is None or value == "":
            continue
        where = f"${ENV_VARS[key]}" if label == "environment" else label
        if key == "dims":
            if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isdigit())):
                raise EmbedderError(f"dims ({where}) must be a positive integer, got {value!r}")
            value = int(value)
            if value < 1:
                raise EmbedderError(f"dims ({where}) must be a positive integer, got {value}")
        elif not isinstance(value, str):
            raise EmbedderError(f"{key} ({where}) must be a string, got {type(value).__name__}")
        else:
            value = value.strip()
        if key == "runtime" and value not in MINILM_RUNTIMES:
            raise EmbedderError(f"runtime ({where}) must be {' or '.join(MINILM_RUNTIMES)}, got {value!r}")
        out[key] = value
    kind = out.get("embedder")
    where = "$PGMEM_EMBEDDER" if label == "environment" else label
    if kind is not None:
        if kind.startswith("openai:"):
            parts = kind.split(":")
            if len(parts) < 3 or not parts[-1].isdigit() or not ":".join(parts[1:-1]):
                raise EmbedderError(f"embedder {kind!r} ({where}): expected openai:MODEL:DIMS")
            out.update(embedder="http", model=":".join(parts[1:-1]), dims=int(parts[-1]))
        elif kind not in KINDS and not _is_factory(kind):
            raise EmbedderError(f"unknown embedder {kind!r} ({where})",
                                hint="use local, e5, http, sentence-transformers, openai:MODEL:DIMS or "
                                     "package.module:Factory")
    return out


def _is_factory(spec: str) -> bool:
    module, _, attr = spec.partition(":")
    return bool(module) and bool(attr) and all(p.isidentifier() for p in module.split(".")) and attr.isidentifier()


def load_config(**overrides: Any) -> EmbedderConfig:
    """The embedder settings, merged setting by setting, the first that sets one winning:

    1. ``overrides`` (keyword arguments named as :class:`EmbedderConfig`'s fields; ``None`` sets nothing);
    2. the environment (``PGMEM_EMBEDDER``, ``PGMEM_EMBED_MODEL``, ``PGMEM_EMBED_DIMS``, ``PGMEM_EMBED_URL``,
       ``PGMEM_EMBED_API_KEY_ENV``, ``PGMEM_EMBED_MODEL_DIR``, ``PGMEM_EMBED_RUNTIME``);
    3. the ``[embedder]`` table of the config file (:func:`config_path`);
    4. the defaults (``local``).

    A layer whose ``embedder`` differs from the one in force contributes nothing else (a file configuring an
    HTTP model does not leak its ``model`` into ``PGMEM_EMBEDDER=local``). Raises :class:`EmbedderError` for an
    unreadable file, an unknown key or kind, or a bad value, naming where it came from.
    """
    unknown = sorted(set(overrides) - FILE_KEYS)
    if unknown:
        raise EmbedderError(f"unknown embedder setting(s): {', '.join(unknown)}")
    path = config_path()
    args = _normalise(dict(overrides), "argument")
    env = _normalise({k: os.environ.get(v) for k, v in ENV_VARS.items()}, "environment")
    kind_var = os.environ.get("PGMEM_EMBEDDER", "")
    env_where = {k: "$PGMEM_EMBEDDER" if kind_var.startswith("openai:") and k in ("model", "dims") else f"${ENV_VARS[k]}"
                 for k in env}
    file_layer = _normalise(_read_file(path), str(path))
    layers = [(args, {k: "argument" for k in args}), (env, env_where), (file_layer, {k: str(path) for k in file_layer})]
    kind, kind_layer = "local", None
    for i, (layer, _) in enumerate(layers):
        if "embedder" in layer:
            kind, kind_layer = layer["embedder"], i
            break
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for i, (layer, where) in enumerate(layers):
        if kind_layer is not None and i > kind_layer and layer.get("embedder", kind) != kind:
            continue
        for key, value in layer.items():
            if key not in merged:
                merged[key], sources[key] = value, where[key]
    merged["embedder"] = kind
    return EmbedderConfig(**merged, sources=sources)


def _where(cfg: EmbedderConfig, key: str) -> str:
    return f" ({cfg.sources[key]})" if key in cfg.sources else ""


def from_config(**overrides: Any) -> Embedder:
    """The embedder :func:`load_config` describes; what the library uses when given none, and what the CLI,
    the MCP server and the hermes provider build. Nothing is loaded or contacted yet (the model loads, or the
    endpoint is called, on the first ``embed``). Raises :class:`EmbedderError` for an incomplete or
    contradictory configuration (``http`` without ``model`` and ``dims``; ``local`` or ``e5`` with another model)."""
    cfg = load_config(**overrides)
    if cfg.embedder == "local":
        if cfg.model not in (None, MINILM_MODEL, "all-MiniLM-L6-v2"):
            raise EmbedderError(f"the local embedder computes only {MINILM_MODEL}, not {cfg.model!r}"
                                f"{_where(cfg, 'model')}",
                                hint="for another model use PGMEM_EMBEDDER=sentence-transformers or http")
        if cfg.dims not in (None, MINILM_DIMS):
            raise EmbedderError(f"{MINILM_MODEL} has {MINILM_DIMS} dimensions, not {cfg.dims}{_where(cfg, 'dims')}")
        return MiniLMEmbedder(model_dir=cfg.model_dir, runtime=cfg.runtime or "numpy")
    if cfg.embedder == "e5":
        if cfg.model not in (None, E5_MODEL):
            raise EmbedderError(f"the e5 embedder computes only {E5_MODEL!r}, not {cfg.model!r}{_where(cfg, 'model')}",
                                hint="for another model use PGMEM_EMBEDDER=sentence-transformers or http")
        if cfg.dims not in (None, E5_DIMS):
            raise EmbedderError(f"{E5_MODEL} has {E5_DIMS} dimensions, not {cfg.dims}{_where(cfg, 'dims')}")
        return E5SmallEmbedder()
    if cfg.embedder == "http":
        if not cfg.model or not cfg.dims:
            raise EmbedderError("the http embedder needs a model and its dims",
                                hint="set PGMEM_EMBED_MODEL and PGMEM_EMBED_DIMS (or model/dims under [embedder] "
                                     "in the config file)")
        return OpenAIEmbedder(cfg.model, cfg.dims, base_url=cfg.url, api_key_env=cfg.api_key_env or "OPENAI_API_KEY",
                              api_key=os.environ.get("PGMEM_EMBED_API_KEY") or None)
    if cfg.embedder == "sentence-transformers":
        return SentenceTransformerEmbedder(cfg.model if cfg.model not in (MINILM_MODEL,) else None, dims=cfg.dims)
    module, _, attr = cfg.embedder.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr)
        return factory()
    except Exception as exc:
        raise EmbedderError(f"embedder factory {cfg.embedder!r}{_where(cfg, 'embedder')} failed: "
                            f"{type(exc).__name__}: {exc}") from exc


def available(spec: str | None = None) -> bool:
    """Whether the packages the configured embedder (or ``spec``, an ``embedder`` value) needs are installed
    (for ``local`` with ``runtime = "onnx"``, onnx and onnxruntime too); imports nothing heavy and contacts nothing. False for a configuration :func:`load_config` refuses."""
    try:
        cfg = load_config(embedder=spec or None)
    except EmbedderError:
        return False
    kind = cfg.embedder
    local = ("tokenizers", "safetensors") + (("onnx", "onnxruntime") if cfg.runtime == "onnx" else ())
    needs = {"local": local, "e5": (E5_PACKAGE,), "http": ("httpx",),
             "sentence-transformers": ("sentence_transformers",)}.get(kind, (kind.partition(":")[0],))
    try:
        return all(importlib.util.find_spec(m) is not None for m in needs)
    except (ImportError, ValueError):
        return False
