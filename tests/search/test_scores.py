"""Readable hybrid scores (pgmem.search_hybrid): absolute parts in [0, 1], no session bonus without a match
of the memory's own, the speaker only with a match, and the relevance threshold of docs/recall.md.

The example of the recall study (all-MiniLM-L6-v2, the default model): "Is there anything Alice can't
eat?" must rank "Alice is vegetarian" well above two unrelated memories of the same session, and those
must score below the documented threshold whatever their session holds.
"""

from __future__ import annotations

import pytest

from pgmem import MiniLMEmbedder

# docs/recall.md, "Relevance threshold": the hybrid score above which a hit is reported as relevant.
THRESHOLD = 0.25


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture
def people(make_memory, minilm):
    return make_memory("alice", embedder=minilm, space="minilm")


def test_alice_vegetarian_ranks_well_above_same_session_noise(people):
    go = people.add("Alice plays go.", session_id="dinner").id
    chess = people.add("Alice plays chess.", session_id="dinner").id
    veg = people.add("Alice is vegetarian.", session_id="dinner").id
    people.add_many(["The train to Porto leaves at nine.", "Bob repaired the bicycle last week.",
                     "The garden needs watering every morning."])
    hits = people.search("Is there anything Alice can't eat?", k=6)
    by_id = {h.id: h.score for h in hits}
    assert hits[0].id == veg
    assert by_id[veg] >= THRESHOLD
    assert by_id[go] < THRESHOLD and by_id[chess] < THRESHOLD
    assert by_id[veg] >= 1.5 * max(by_id[go], by_id[chess])  # 1.17x with the formula before
    assert all(0.0 <= s <= 1.0 for s in by_id.values())


def test_no_session_bonus_without_a_match_of_its_own(make_memory):
    """HashEmbedder vectors of unrelated texts are near-orthogonal (cosine below the floor), so a memory
    without a query word has no match of its own: its score is 0 next to the best match of the query."""
    alice = make_memory("alice")
    best = alice.add("The zeppelin museum opens at ten.", session_id="s1").id
    # two memories between them: the BM25 window (+-2 in the session) gives the noise none of the words
    alice.add_many(["We took the tram.", "It rained all day."], session_id="s1")
    noise = alice.add("Lunch was a bowl of ramen.", session_id="s1").id
    hits = {h.id: h for h in alice.search("When does the zeppelin museum open?", k=10)}
    assert hits[best].score > 0.3
    assert hits[noise].text_score == 0 and hits[noise].vector_score / 2 < 0.4
    assert hits[noise].score == 0.0


def test_a_weak_match_gains_from_its_session_and_stays_below_the_strong_one(make_memory):
    """A weak match gains from a strong one of its session (window and bonus), never above it; its twin in
    a session of its own gains nothing."""
    alice = make_memory("alice")
    strong = alice.add("The zeppelin museum opens at ten.", session_id="s1").id
    weak = alice.add("We liked the museum cafe.", session_id="s1").id
    twin = alice.add("We liked the museum cafe!", session_id="s2").id  # same words, another session
    hits = {h.id: h for h in alice.search("When does the zeppelin museum open?", k=10, mode="text")}
    assert hits[strong].score > hits[weak].score > hits[twin].score > 0


@pytest.mark.parametrize("mode", ["hybrid", "text"])
def test_scores_are_in_zero_one_and_a_full_match_scores_high(make_memory, mode):
    alice = make_memory("alice")
    alice.add_many(["Alice flies to Lisbon on 3 March.", "Alice prefers window seats.",
                    "Bob flies to Oslo in June."])
    hits = alice.search("Alice flies to Lisbon on 3 March.", k=3, mode=mode)
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    assert hits[0].content == "Alice flies to Lisbon on 3 March."
    assert hits[0].score >= 0.5
