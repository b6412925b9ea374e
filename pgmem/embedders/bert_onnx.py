"""all-MiniLM-L6-v2 on onnxruntime: the forward pass of :class:`pgmem.embedders.bert.BertEncoder` written as an ONNX
graph (opset 20: LayerNormalization, Gelu, Softmax, the same float32 arithmetic) over the same weights, built in
memory when the encoder loads and run by onnxruntime's CPU provider with its graph optimisations on.

Opt-in (``PGMEM_EMBED_RUNTIME=onnx``, ``pip install 'pgmem-agents[onnx]'``): about 1.9x the numpy encoder's
texts per second in batches and 2.5x one text at a time on this project's 2-core machine, for about 2 s more
at load (the graph is built and optimised once per process); vectors equal the numpy encoder's to cosine
>= 0.99999 (bench/FINDINGS.md E1, tests/embedders/test_minilm.py).
"""

from __future__ import annotations

import os

import numpy as np

from .bert import BertEncoder, pad


def build_graph(enc: BertEncoder, opset: int = 20):
    """The ONNX model (an ``onnx.ModelProto``) of ``enc`` (a pgmem.embedders.bert.BertEncoder): inputs ``input_ids``
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


class OnnxBertEncoder(BertEncoder):
    """A :class:`BertEncoder` whose :meth:`forward` runs on onnxruntime (same tokenizer, same weights, same
    pooling). ``threads``: onnxruntime's intra-op threads (default: the machine's CPUs). Its worker threads
    sleep between calls instead of spinning (``session.intra_op.allow_spinning`` 0), so an idle embedder takes
    no CPU from a PostgreSQL server on the same machine. Raises ImportError when ``onnx`` or ``onnxruntime``
    is missing."""

    def __init__(self, model_dir, max_seq_length: int | None = None, threads: int | None = None) -> None:
        import onnxruntime as ort

        super().__init__(model_dir, max_seq_length)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = int(threads or os.cpu_count() or 1)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3  # errors only
        self.session = ort.InferenceSession(build_graph(self).SerializeToString(), so,
                                            providers=["CPUExecutionProvider"])
        self.layers, self.word, self.position = [], None, None  # the session holds its own copy of the weights

    def forward(self, ids: list[list[int]]) -> np.ndarray:
        tokens, mask = pad(ids)
        return self.session.run(None, {"input_ids": tokens, "attention_mask": mask})[0]
