"""The pure logic of bench/recall_errors.py: evidence ranks, the failing-question sample, the session cap and
the two-query merge (no database: the script itself needs a LoCoMo import)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import recall_errors as re_  # noqa: E402


def test_evidence_rank_is_the_first_result_standing_for_it():
    ranked = [["D1:1"], ["D2:5", "D3:1"], ["D2:5"], [], ["D9:9"]]
    ranks = re_.evidence_ranks(["D2:5", "D3:1", "D9:9", "D4:4"], ranked)
    assert ranks == {"D2:5": 2, "D3:1": 2, "D9:9": 5, "D4:4": None}


def test_recall_counts_repeated_evidence_as_the_benchmarks_do():
    ranks = {"D1:1": 3, "D1:2": 12, "D1:3": None}
    assert re_.recall_at(ranks, ["D1:1", "D1:2", "D1:3"]) == 1 / 3
    assert re_.recall_at(ranks, ["D1:1", "D1:1", "D1:2"]) == 2 / 3
    assert re_.recall_at(ranks, ["D1:2"], k=20) == 1.0


def test_a_hybrid_rank_outside_the_top_k_never_lands_inside_it():
    top = {"a": 4, "b": None, "c": None}
    deep = {"a": 5, "b": 9, "c": None}
    assert re_.combine_ranks(top, deep, 10) == {"a": 4, "b": 11, "c": None}
    assert [re_.fmt_rank(r) for r in (1, 100, 101, None)] == ["1", "100", ">100", ">100"]


def test_the_sample_is_reproducible_and_keeps_the_original_order():
    items = list(range(50))
    a, b = re_.sample_failing(items, 20, seed=3), re_.sample_failing(items, 20, seed=3)
    assert a == b and len(a) == 20 and a == sorted(a)
    assert re_.sample_failing(items, 20, seed=4) != a
    assert re_.sample_failing(items[:5], 20, seed=3) == items[:5]


def test_session_cap_defers_a_crowded_session_and_fills_up_with_it():
    ranked = ["s1a", "s1b", "s1c", "s2a", "x", "s1d"]
    sessions = ["s1", "s1", "s1", "s2", None, "s1"]
    assert re_.cap_per_session(ranked, sessions, cap=2, k=4) == ["s1a", "s1b", "s2a", "x"]
    assert re_.cap_per_session(ranked, sessions, cap=2, k=6) == ["s1a", "s1b", "s2a", "x", "s1c", "s1d"]


def test_rank_buckets_count_only_ranks_past_k():
    assert re_.rank_buckets([3, 11, 20, 21, 50, 51, 100, 101, None], k=10) == \
        {"11-20": 2, "21-50": 2, "51-100": 2, ">100": 2}


def test_merge_interleaves_and_drops_repeats():
    assert re_.merge_rankings([["a", "b", "c"], ["b", "d", "e"]], 4) == ["a", "b", "d", "c"]


def test_names_are_removed_from_a_question_with_their_possessive():
    assert re_.without_names("What do Jon and Gina's friends like?", ["Jon", "Gina"]) == "What do and friends like?"
    assert re_.without_names("What did she buy?", ["Jon"]) is None
    assert re_.without_names("Jon?", ["Jon"]) is None


def test_each_hit_is_followed_by_its_neighbour_turn_when_there_is_one():
    turns = {"D3:7", "D3:8", "D1:2", "D5:1"}
    assert re_.with_neighbours(["D3:7", "D3:8", "D1:1", "D5:1"], 1, turns.__contains__, 4) == \
        ["D3:7", "D3:8", "D1:1", "D1:2"]
    assert re_.with_neighbours(["D5:1", "D3:8"], -1, turns.__contains__, 10) == ["D5:1", "D3:8", "D3:7"]
