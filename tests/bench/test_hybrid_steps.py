"""bench/hybrid_steps.py: the timed copy of pgmem.search_hybrid finds every step of the installed function,
ranks exactly as the function does, and reports five increasing marks; an ablation changes what it removes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import hybrid_steps as hs  # noqa: E402


def definition(admin) -> str:
    return admin.execute("SELECT pg_get_functiondef('pgmem.search_hybrid'::regproc)").fetchone()[0]


def test_every_step_of_the_installed_function_gets_a_mark(admin):
    src = hs.timed_source(definition(admin))
    assert "FUNCTION pgmem.search_hybrid_steps(" in src and "FUNCTION pgmem.search_hybrid(" not in src
    assert src.count("clock_timestamp() - t0") == len(hs.STEPS)
    assert src.count("RAISE NOTICE 'steps %', tm;") == 1
    for part in ("extra-vectors", "extra-cosines", "speaker"):
        ablated = hs.timed_source(definition(admin), (part,))
        assert ablated != src and ablated.count("clock_timestamp() - t0") == len(hs.STEPS)


def test_a_changed_function_is_refused_not_timed_wrongly(admin):
    text = definition(admin).replace("    -- 2. Scores, over those rows only", "    -- 2. renamed")
    with pytest.raises(ValueError, match="changed"):
        hs.timed_source(text)


def test_notice_parsing():
    assert hs.parse_notice("steps {0.1,0.5,2,3.5,3.75}") == [0.1, 0.5, 2.0, 3.5, 3.75]
    assert hs.step_times([0.1, 0.5, 2.0, 3.5, 3.75]) == pytest.approx([0.1, 0.4, 1.5, 1.5, 0.25])
    with pytest.raises(ValueError):
        hs.parse_notice("something else")


def test_the_timed_copy_ranks_as_the_function_and_marks_each_step(make_memory, admin, embedder):
    alice = make_memory("alice")
    alice.add_many([f"Caroline: turn {i} about the support group and the lake" for i in range(6)], session_id="s1")
    alice.add_many(["Melanie went camping with the kids", "The lake was cold"])
    sig = hs.install(admin)
    q = "support group at the lake"
    e = embedder.embed([q])[0]
    notices: list[str] = []
    with connect(admin, "postgres") as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute("SET ROLE pgmem_gateway")

        def ask(fn):
            with conn.transaction():
                conn.execute("SELECT pgmem.act_as('alice')")
                return conn.execute(f"SELECT id, score, text_score, vector_score FROM pgmem.{fn}("
                                    "p_space => 't64', p_query => %s, p_embedding => %s, p_k => 5)", (q, e)).fetchall()

        want, got = ask("search_hybrid"), ask("search_hybrid_steps")
    assert len(want) == 5 and got == want
    marks = hs.parse_notice([n for n in notices if n.startswith("steps ")][-1])
    assert len(marks) == len(hs.STEPS) and all(b >= a for a, b in zip(marks, marks[1:])) and marks[-1] > 0
    admin.execute(f"DROP FUNCTION {sig}")
