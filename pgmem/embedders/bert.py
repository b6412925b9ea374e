"""A BERT encoder in numpy: the forward pass of all-MiniLM-L6-v2 (and any BERT of that layout) without torch.

The computation is the one of Hugging Face ``transformers``' ``BertModel`` in inference mode (post-layer-norm
BERT: Devlin et al. 2019, "BERT", section 3; Vaswani et al. 2017 for the attention), followed by the
sentence-transformers pipeline the model card of all-MiniLM-L6-v2 describes: mean pooling over the attention
mask, then L2 normalisation. Everything is float32, as in the reference implementation on CPU.

Weights are read from a ``model.safetensors`` with the ``safetensors`` library (numpy arrays, no torch) and the
text is tokenised with the ``tokenizers`` library from the model's own ``tokenizer.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# erf by Abramowitz & Stegun, Handbook of Mathematical Functions (1964), formula 7.1.26: |error| <= 1.5e-7,
# below float32's resolution of the activations it feeds (exact GELU, config "hidden_act": "gelu").
_P = np.float32(0.3275911)
_A = [np.float32(a) for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)]
_SQRT_HALF = np.float32(0.7071067811865476)


def gelu_(x: np.ndarray, rows: int = 32) -> np.ndarray:
    """Exact GELU, ``x * (1 + erf(x / sqrt 2)) / 2`` (Hendrycks & Gimpel 2016), in place on a 2-D float32 ``x``
    and returned. Worked in blocks of ``rows`` rows with small scratch buffers, so the ~20 element-wise steps of
    the erf run in cache instead of allocating an array each (3x faster than the plain expression here)."""
    width = x.shape[1]
    a = np.empty((rows, width), dtype=np.float32)
    t = np.empty((rows, width), dtype=np.float32)
    s = np.empty((rows, width), dtype=np.float32)
    half = np.float32(0.5)
    for i in range(0, x.shape[0], rows):
        xb = x[i:i + rows]
        n = xb.shape[0]
        ab, tb, sb = a[:n], t[:n], s[:n]
        np.sign(xb, out=sb)
        np.abs(xb, out=ab)
        ab *= _SQRT_HALF                      # |z|, z = x / sqrt 2
        np.multiply(ab, _P, out=tb)
        tb += 1
        np.reciprocal(tb, out=tb)             # t = 1 / (1 + p|z|)
        p = tb * _A[4]
        for coef in (_A[3], _A[2], _A[1], _A[0]):
            p += coef
            p *= tb
        np.square(ab, out=ab)
        np.negative(ab, out=ab)
        np.exp(ab, out=ab)
        p *= ab                               # erfc(|z|)
        p *= -half
        p += half                             # erf(|z|) / 2
        p *= sb
        p += half                             # Phi(x) = (1 + erf(z)) / 2
        xb *= p
    return x


def layer_norm_(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """Layer normalisation over the last axis of a 2-D ``x``, in place and returned."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None] / np.float32(x.shape[-1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    x /= var
    x *= weight
    x += bias
    return x


def pad(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of one batch padded to its longest sequence: ``(tokens, mask)``, int64 and float32 of shape
    ``(len(ids), longest)``, the mask 1 for a token and 0 for padding."""
    n, length = len(ids), max(len(seq) for seq in ids)
    tokens = np.zeros((n, length), dtype=np.int64)
    mask = np.zeros((n, length), dtype=np.float32)
    for row, seq in enumerate(ids):
        tokens[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1.0
    return tokens, mask


class BertEncoder:
    """The weights of one BERT model, arranged for numpy (``x @ W`` with ``W`` of shape ``(in, out)``).

    ``model_dir`` must hold ``config.json``, ``model.safetensors`` and ``tokenizer.json``. ``max_seq_length``
    tokens at most per text (longer texts are truncated, as sentence-transformers does: 256 for all-MiniLM-L6-v2,
    from its ``sentence_bert_config.json``).
    """

    def __init__(self, model_dir: Path, max_seq_length: int | None = None) -> None:
        from safetensors import safe_open
        from tokenizers import Tokenizer

        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        if max_seq_length is None:
            st_cfg = model_dir / "sentence_bert_config.json"
            max_seq_length = (json.loads(st_cfg.read_text(encoding="utf-8")).get("max_seq_length")
                              if st_cfg.exists() else None) or cfg["max_position_embeddings"]
        self.max_seq_length = int(max_seq_length)
        self.hidden = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.head_dim = self.hidden // self.heads
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        if cfg.get("hidden_act", "gelu") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"unsupported BERT variant in {model_dir}: {cfg.get('hidden_act')}, "
                             f"{cfg.get('position_embedding_type')}")

        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()  # padded here, per batch of similar lengths
        self.tokenizer.enable_truncation(self.max_seq_length)

        with safe_open(str(model_dir / "model.safetensors"), framework="np") as f:
            names = set(f.keys())
            prefix = "bert." if "bert.embeddings.word_embeddings.weight" in names else ""

            def get(name: str) -> np.ndarray:
                return np.asarray(f.get_tensor(prefix + name), dtype=np.float32)

            self.word = get("embeddings.word_embeddings.weight")
            self.position = get("embeddings.position_embeddings.weight")
            self.token_type0 = get("embeddings.token_type_embeddings.weight")[0]
            self.emb_ln = (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"))
            self.layers = []
            for i in range(int(cfg["num_hidden_layers"])):
                p = f"encoder.layer.{i}."
                qkv_w = np.concatenate([get(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")])
                qkv_b = np.concatenate([get(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
                self.layers.append((
                    np.ascontiguousarray(qkv_w.T), qkv_b,
                    np.ascontiguousarray(get(p + "attention.output.dense.weight").T),
                    get(p + "attention.output.dense.bias"),
                    get(p + "attention.output.LayerNorm.weight"), get(p + "attention.output.LayerNorm.bias"),
                    np.ascontiguousarray(get(p + "intermediate.dense.weight").T), get(p + "intermediate.dense.bias"),
                    np.ascontiguousarray(get(p + "output.dense.weight").T), get(p + "output.dense.bias"),
                    get(p + "output.LayerNorm.weight"), get(p + "output.LayerNorm.bias"),
                ))

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids per text, with ``[CLS]``/``[SEP]``, truncated to ``max_seq_length``."""
        return [enc.ids for enc in self.tokenizer.encode_batch(texts, add_special_tokens=True)]

    def forward(self, ids: list[list[int]]) -> np.ndarray:
        """Mean-pooled, L2-normalised sentence vectors, float32 of shape ``(len(ids), hidden)``; the batch is
        padded to its longest sequence (pass sequences of similar length: padding costs time, not accuracy)."""
        tokens, mask = pad(ids)
        n, length = tokens.shape
        h, d = self.heads, self.head_dim
        x = self.word[tokens]
        x += self.position[:length]
        x += self.token_type0
        x = layer_norm_(x.reshape(n * length, self.hidden), *self.emb_ln, self.eps)
        # additive mask over the keys, as transformers does: the dtype's minimum where padded
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(d))
        for qkv_w, qkv_b, o_w, o_b, ln1_w, ln1_b, i_w, i_b, out_w, out_b, ln2_w, ln2_b in self.layers:
            qkv = x @ qkv_w
            qkv += qkv_b
            qkv = qkv.reshape(n, length, 3, h, d)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3)
            k = qkv[:, :, 1].transpose(0, 2, 3, 1)
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            scores = q @ k
            scores *= scale
            scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(n * length, self.hidden)
            out = ctx @ o_w
            out += o_b
            out += x
            x = layer_norm_(out, ln1_w, ln1_b, self.eps)
            inner = x @ i_w
            inner += i_b
            gelu_(inner)
            out = inner @ out_w
            out += out_b
            out += x
            x = layer_norm_(out, ln2_w, ln2_b, self.eps)
        x = x.reshape(n, length, self.hidden)
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return (pooled / norms).astype(np.float32, copy=False)
