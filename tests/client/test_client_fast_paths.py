"""The wrapper's per-call work on the search path (bench/FINDINGS.md S9): the embedding check's fast path, result
rows made into records without a dict per row, and jsonb read back without json.loads' encoding detection.
Each fast path must give exactly what the general path gives, including its errors."""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pytest

from pgmem import DimensionMismatch, ValidationError
from pgmem import validation as v
from pgmem.records import MemoryRecord, from_row, record_rows
from pgmem.transport import json_loads


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
    assert make(values) == from_row(MemoryRecord, dict(zip(names, values)))
    assert make(values).score is None  # a field without a column keeps its default
    # Columns that are not fields are left out, as from_row does.
    more = names + ["rank", "bs"]
    make = record_rows(MemoryRecord)(FakeCursor(more))
    assert make(values + [9, 9]) == from_row(MemoryRecord, dict(zip(more, values + [9, 9])))
    assert record_rows(MemoryRecord)(FakeCursor(None))([]) is None  # a statement without a result


def test_record_rows_makes_records_a_constructor_would_make():
    # The factory fills a plain dataclass's __dict__ directly: the records must be what MemoryRecord(...)
    # makes in every way a caller can see (equality, hash, repr, frozenness, replace, their own dicts).
    names = ["id", "user_id", "space", "agent_id", "session_id", "content", "metadata", "created_at", "updated_at",
             "expires_at", "version", "similarity", "valid_from", "valid_to", "superseded_by"]
    values = [uuid.uuid4(), "u", "s", None, "sess", "c", {"k": 1}, 1, 2, None, 3, 0.5, 4, None, None]
    want = MemoryRecord(**dict(zip(names, values)), score=0.5)
    got = record_rows(MemoryRecord, score_from="similarity")(FakeCursor(names))(values)
    assert type(got) is MemoryRecord and got == want and repr(got) == repr(want)
    assert got.score == 0.5 and got.text_score is None  # score from similarity; no column: the default
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.content = "other"
    assert dataclasses.replace(got, content="d") == dataclasses.replace(want, content="d")
    assert dataclasses.asdict(got) == dataclasses.asdict(want)
    # A result with its own score column keeps it.
    with_score = record_rows(MemoryRecord, score_from="similarity")(FakeCursor(names + ["score"]))(values + [9.0])
    assert with_score.score == 9.0
    # Two records of one factory share nothing mutable (the defaults dict is copied per row).
    make = record_rows(MemoryRecord)(FakeCursor(names))
    a, b = make(values), make(values)
    object.__setattr__(a, "score", 1.0)
    assert b.score is None


def test_record_rows_calls_the_constructor_of_a_class_that_needs_it():
    @dataclasses.dataclass(frozen=True)
    class Checked:
        a: int
        b: list = dataclasses.field(default_factory=list)

        def __post_init__(self):
            if self.a < 0:
                raise ValueError("negative")

    make = record_rows(Checked)(FakeCursor(["a", "x"]))
    assert make([1, "ignored"]) == Checked(1) and make([1, 0]).b == []
    with pytest.raises(ValueError):
        make([-1, 0])
    # A field without a default and without a column: the constructor's own error, as before.
    with pytest.raises(TypeError):
        record_rows(MemoryRecord)(FakeCursor(["id", "content"]))([1, "c"])


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
