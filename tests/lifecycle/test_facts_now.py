"""One rule for what holds now, a tolerance on min_similarity, and versions kept across export and import
(migration 0008; cases a new user met: docs/lifecycle.md, docs/limits.md)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from pgmem import ValidationError


def parallel(v: np.ndarray, scale: float) -> np.ndarray:
    return (v * scale).astype(np.float32)


def test_min_similarity_one_keeps_exactly_parallel_vectors(alice, embedder):
    """float32 cosine of a vector and 1000 times itself is 0.99999996, not 1: min_similarity=1.0 used to drop
    it. The threshold is applied with a tolerance of 1e-5."""
    v = embedder.embed(["Alice keeps bees"])[0]
    mid = alice.add("Alice keeps bees", embedding=v).id
    for scale in (1.0, 1000.0, 0.001, 7.3):
        hits = alice.search(embedding=parallel(v, scale), min_similarity=1.0, k=5)
        assert [h.id for h in hits] == [mid], scale
    other = embedder.embed(["something else entirely"])[0]
    assert alice.search(embedding=other, min_similarity=1.0, k=5) == []


def test_a_fact_cannot_start_or_stop_holding_in_the_future(alice):
    """Search, list, context and stats all show what holds now; a future valid_from would have hidden both
    the old fact and the new one until then, so it is refused (and a future valid_to likewise: expires_at
    is how a memory stops later)."""
    old = alice.add("Alice lives in Paris").id
    later = datetime.now(timezone.utc) + timedelta(days=3)
    with pytest.raises(ValidationError) as info:
        alice.supersede(old, "Alice lives in Berlin", valid_from=later)
    assert "future" in str(info.value)
    with pytest.raises(ValidationError) as info:
        alice.invalidate(old, valid_to=later)
    assert "future" in str(info.value) and "expires_at" in str(info.value)
    # nothing changed: the old fact holds, nothing new was written
    assert [m.content for m in alice.list().items] == ["Alice lives in Paris"]
    assert [h.event for h in alice.history(old)] == ["ADD"]
    when = datetime.now(timezone.utc)
    new = alice.supersede(old, "Alice lives in Berlin", valid_from=when)
    assert [m.content for m in alice.list().items] == ["Alice lives in Berlin"]
    assert alice.get(new.id).valid_from == when


def test_export_then_import_keeps_versions(make_memory):
    alice = make_memory("alice")
    mid = alice.add("Alice likes tea").id
    alice.update(mid, metadata={"n": 1})
    alice.update(mid, metadata={"n": 2})
    assert alice.get(mid).version == 3
    rows = alice.export()
    carol = make_memory("carol")
    carol.import_rows(rows)
    assert carol.get(mid).version == 3
    carol.update(mid, metadata={"n": 3}, expected_version=3)
    assert carol.get(mid).version == 4
