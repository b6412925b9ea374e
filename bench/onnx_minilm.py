"""all-MiniLM-L6-v2 on onnxruntime, for bench/embed.py only (not a pgmem embedder): the forward pass of
pgmem._bert.BertEncoder written as an ONNX graph (opset 20: LayerNormalization, Gelu, Softmax) over the same
weights, then run by onnxruntime's CPU provider with every graph optimisation on. It answers one question
for issue #15 (target 4): how much faster would a compiled runtime embed on this machine than pgmem's numpy
encoder? Needs ``pip install onnx onnxruntime`` (not a dependency of pgmem).
"""

from __future__ import annotations

import numpy as np


def build(enc, opset: int = 20):
    """The ONNX model (an ``onnx.ModelProto``) of ``enc`` (a pgmem._bert.BertEncoder): inputs ``input_ids``
    (int64, N x L) and ``attention_mask`` (float32, N x L, 1 for tokens); output ``embedding`` (float32,
    N x hidden): mean-pooled over the mask and L2-normalised, as BertEncoder.forward."""
    from onnx import TensorProto as TP
    from onnx import helper as H
    from onnx import numpy_helper as NH

    inits, nodes = [], []

    def const(name, arr):
        inits.append(NH.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, **attrs):
        out = f"{op}_{len(nodes)}"
        nodes.append(H.make_node(op, ins, [out], **attrs))
        return out

    def i64(name, values):
        return const(name, np.array(values, np.int64))

    def f32(name, value):
        return const(name, np.array(value, np.float32))

    hid, h, d = enc.hidden, enc.heads, enc.head_dim
    shape = node("Shape", ["input_ids"])
    n = node("Gather", [shape, i64("at0", [0])], axis=0)
    length = node("Gather", [shape, i64("at1", [1])], axis=0)
    positions = node("Slice", [const("pos", enc.position), i64("zero", [0]), length, i64("axis0", [0])])
    x = node("Add", [node("Add", [node("Gather", [const("word", enc.word), "input_ids"]), positions]),
                     const("tt0", enc.token_type0)])
    x = node("LayerNormalization", [x, const("eln_w", enc.emb_ln[0]), const("eln_b", enc.emb_ln[1])],
             axis=-1, epsilon=enc.eps)
    # The additive mask over the keys (N x 1 x 1 x L): float32's minimum where padded, as BertEncoder.forward.
    mask = node("Unsqueeze", ["attention_mask", i64("axes12", [1, 2])])
    bias = node("Mul", [node("Sub", [f32("one", 1.0), mask]), f32("fmin", np.finfo(np.float32).min)])
    shape5 = node("Concat", [n, length, i64("c3hd", [3, h, d])], axis=0)
    shape3 = node("Concat", [n, length, i64("chid", [hid])], axis=0)
    scale = f32("scale", 1.0 / np.sqrt(d))
    for i, (qkv_w, qkv_b, o_w, o_b, ln1_w, ln1_b, i_w, i_b, out_w, out_b, ln2_w, ln2_b) in enumerate(enc.layers):
        p = f"l{i}_"
        qkv = node("Reshape", [node("Add", [node("MatMul", [x, const(p + "qkv_w", qkv_w)]), const(p + "qkv_b", qkv_b)]),
                               shape5])
        q, k, v = (node("Transpose", [node("Gather", [qkv, i64(p + f"part{j}", j)], axis=2)], perm=perm)
                   for j, perm in ((0, [0, 2, 1, 3]), (1, [0, 2, 3, 1]), (2, [0, 2, 1, 3])))
        scores = node("Softmax", [node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), bias])], axis=-1)
        ctx = node("Reshape", [node("Transpose", [node("MatMul", [scores, v])], perm=[0, 2, 1, 3]), shape3])
        out = node("Add", [node("Add", [node("MatMul", [ctx, const(p + "o_w", o_w)]), const(p + "o_b", o_b)]), x])
        x = node("LayerNormalization", [out, const(p + "ln1_w", ln1_w), const(p + "ln1_b", ln1_b)],
                 axis=-1, epsilon=enc.eps)
        inner = node("Gelu", [node("Add", [node("MatMul", [x, const(p + "i_w", i_w)]), const(p + "i_b", i_b)])])
        out = node("Add", [node("Add", [node("MatMul", [inner, const(p + "out_w", out_w)]), const(p + "out_b", out_b)]), x])
        x = node("LayerNormalization", [out, const(p + "ln2_w", ln2_w), const(p + "ln2_b", ln2_b)],
                 axis=-1, epsilon=enc.eps)
    mask3 = node("Unsqueeze", ["attention_mask", i64("axes2", [2])])
    summed = node("ReduceSum", [node("Mul", [x, mask3]), i64("axes1", [1])], keepdims=0)
    count = node("Max", [node("ReduceSum", ["attention_mask", i64("axes1b", [1])], keepdims=1), f32("eps9", 1e-9)])
    nodes.append(H.make_node("LpNormalization", [node("Div", [summed, count])], ["embedding"], axis=-1, p=2))
    graph = H.make_graph(nodes, "minilm", [H.make_tensor_value_info("input_ids", TP.INT64, ["N", "L"]),
                                            H.make_tensor_value_info("attention_mask", TP.FLOAT, ["N", "L"])],
                         [H.make_tensor_value_info("embedding", TP.FLOAT, ["N", hid])], inits)
    return H.make_model(graph, opset_imports=[H.make_opsetid("", opset)])

class OnnxMiniLM:
    """Batches of 32 texts sorted by length (as MiniLMEmbedder does) through an onnxruntime session."""

    def __init__(self, enc, threads: int | None = None) -> None:
        import onnxruntime as ort

        self.enc = enc
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            so.intra_op_num_threads = threads
        self.session = ort.InferenceSession(build(enc).SerializeToString(), so, providers=["CPUExecutionProvider"])

    def embed(self, texts: list[str]) -> np.ndarray:
        ids = self.enc.token_ids(texts)
        out = np.empty((len(ids), self.enc.hidden), np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for j in range(0, len(order), 32):
            rows = order[j:j + 32]
            length = max(len(ids[i]) for i in rows)
            tokens = np.zeros((len(rows), length), np.int64)
            mask = np.zeros((len(rows), length), np.float32)
            for r, i in enumerate(rows):
                tokens[r, :len(ids[i])] = ids[i]
                mask[r, :len(ids[i])] = 1
            out[rows] = self.session.run(None, {"input_ids": tokens, "attention_mask": mask})[0]
        return out
