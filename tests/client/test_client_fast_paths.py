"""The wrapper's per-call work on the search path (bench/FINDINGS.md S9): the embedding check's fast path, result
rows made into records without a dict per row, and jsonb read back without json.loads' encoding detection.
Each fast path must give exactly what the general path gives, including its errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pgmem import DimensionMismatch, ValidationError
from pgmem import validation as v
from pgmem.client import MemoryRecord, _row, json_loads, record_rows


def slow_check(value, dims):
    """check_vector's general path alone (the fast path switched off)."""
    arr = np.asarray(value, dtype=np.float32)
    if arr.shape != (dims,):
        raise DimensionMismatch("shape")
    if not np.all(np.isfinite(arr)) or not np.any(arr):
        raise ValidationError("bad")
    with np.errstate(over="ignore", under="ignore"):
        sq = np.sum(arr * arr, dtype=np.float32)
    if sq == 0 or not np.isfinite(sq):
        raise ValidationError("norm")
    return arr


@pytest.mark.parametrize("scale", [1e-19, 1e-17, 1e-15, 1e-10, 1.0, 1e10, 1e15, 1e17, 1e18, 1e19])
def test_check_vector_agrees_with_the_general_path_across_magnitudes(scale):
    # Around both fast-path bounds (squared norms 1e-30 and 1e30 for these 64 dimensions: scales near 1.2e-16
    # and 1.2e14) and where float32 squares underflow (below ~1e-19) or overflow (above ~1.8e19).
    rng = np.random.default_rng(7)
    for trial in range(20):
        vec = (rng.standard_normal(64) * scale).astype(np.float32)
        try:
            want = slow_check(vec, 64)
        except ValidationError:
            with pytest.raises(ValidationError):
                v.check_vector(vec, 64)
        else:
            got = v.check_vector(vec, 64)
            assert got.dtype == np.float32 and np.array_equal(got, want)


def test_check_vector_messages_unchanged():
    dims = 8
    cases = {
        "contains NaN or infinity": [1.0] * 7 + [float("nan")],
        "is a zero vector": [0.0] * 8,
        "underflows float32": [1e-30] * 8,
        "overflows float32": [1e20] * 8,
    }
    for words, vec in cases.items():
        with pytest.raises(ValidationError) as info:
            v.check_vector(vec, dims)
        assert words in str(info.value), (words, str(info.value))
    with pytest.raises(ValidationError, match="contains NaN or infinity"):
        v.check_vector([1e39] + [1.0] * 7, dims)  # finite in Python, inf as float32
    with pytest.raises(DimensionMismatch, match="expected 8 dimensions, got 9"):
        v.check_vector([1.0] * 9, dims)
    assert v.check_vector([1.0] * 8, dims).tolist() == [1.0] * 8


def test_json_loads_reads_what_json_loads_reads():
    import json

    for text in [b"{}", b'{"a": 1, "b": [1, 2.5, "x"], "c": {"d": null}}', b"[]", b'"s"', b"3", b" {} ",
                 '{"ünï": "cödé"}'.encode()]:
        assert json_loads(text) == json.loads(text)
    first, second = json_loads(b"{}"), json_loads(b"{}")
    first["k"] = 1
    assert second == {}  # a new dict each time, never a shared one


class FakeResult:
    def __init__(self, names):
        self.names = names
        self.nfields = len(names)

    def fname(self, i):
        return self.names[i].encode()


class FakeInfo:
    encoding = "utf-8"


class FakeConnection:
    info = FakeInfo()


class FakeCursor:
    connection = FakeConnection()

    def __init__(self, names):
        self.pgresult = FakeResult(names) if names is not None else None


def test_record_rows_matches_row_of_a_dict():
    names = ["id", "user_id", "space", "agent_id", "session_id", "content", "metadata", "created_at", "updated_at",
             "expires_at", "version", "similarity", "valid_from", "valid_to", "superseded_by"]
    values = list(range(len(names)))
    make = record_rows(MemoryRecord)(FakeCursor(names))
    assert make(values) == _row(MemoryRecord, dict(zip(names, values)))
    assert make(values).score is None  # a field without a column keeps its default
    # Columns that are not fields are left out, as _row does.
    more = names + ["rank", "bs"]
    make = record_rows(MemoryRecord)(FakeCursor(more))
    assert make(values + [9, 9]) == _row(MemoryRecord, dict(zip(more, values + [9, 9])))
    assert record_rows(MemoryRecord)(FakeCursor(None))([]) is None  # a statement without a result


def test_search_results_are_the_records_of_the_rows(alice, admin):
    alice.add("a memory with metadata", metadata={"source": "chat", "n": 2})
    alice.add("a memory without metadata")
    hits = alice.search(embedding=alice.embedder.embed(["a memory"])[0], k=5, mode="vector")
    assert {h.content for h in hits} == {"a memory with metadata", "a memory without metadata"}
    by_content = {h.content: h for h in hits}
    assert by_content["a memory with metadata"].metadata == {"source": "chat", "n": 2}
    assert by_content["a memory without metadata"].metadata == {}
    for h in hits:
        assert isinstance(h, MemoryRecord) and h.user_id == "alice" and h.space == "t64" and h.version == 1
        assert -1 <= h.similarity <= 1 and h.score == h.similarity  # vector mode: score is the cosine
        assert dataclasses.replace(alice.get(h.id), similarity=h.similarity, score=h.score) == h
    by_content["a memory without metadata"].metadata["x"] = 1  # each record has its own dict
    again = {h.content: h for h in alice.search(embedding=alice.embedder.embed(["a memory"])[0], mode="vector")}
    assert again["a memory without metadata"].metadata == {}
