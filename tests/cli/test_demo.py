"""``pgmem demo`` (pgmem.demo.run) end to end on this test's database, with the real MiniLM model: the
concierge's recall, the second user's empty view, and a second run giving the same result."""

from __future__ import annotations

import io
import re

import psycopg
from rich.console import Console

from pgmem import demo

SCORE_ROW = re.compile(r"^│\s*(-?\d+\.\d{3})\s*│\s*(.*?)\s*│\s*(.*?)\s*│$")


def run_demo(dsn: str) -> tuple[int, str]:
    buf = io.StringIO()
    code = demo.run(Console(file=buf, width=120, color_system=None), dsn=dsn)
    return code, buf.getvalue()


def recall_tables(out: str) -> dict[str, list[tuple[float, str, str]]]:
    """{question: [(score, agent, memory), ...]} from the tables the demo printed, in printed order."""
    lines = out.splitlines()
    tables: dict[str, list[tuple[float, str, str]]] = {}
    for q in demo.QUESTIONS:
        start = next(i for i, line in enumerate(lines) if line.strip() == q)
        rows = []
        for line in lines[start + 1:]:
            if line.startswith("└"):
                break
            m = SCORE_ROW.match(line)
            if m:
                rows.append((float(m.group(1)), m.group(2), m.group(3)))
        tables[q] = rows
    return tables


def question(*words: str) -> str:
    """The demo question containing one of ``words`` (as a word)."""
    found = [q for q in demo.QUESTIONS if set(re.findall(r"[a-z]+", q.lower())) & set(words)]
    assert len(found) == 1, (words, demo.QUESTIONS)
    return found[0]


def counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT user_id, count(*) FROM pgmem.memories GROUP BY user_id").fetchall())


def test_demo_recalls_shares_nothing_and_is_idempotent(dsn):
    code, out = run_demo(dsn)
    assert code == 0, out
    tables = recall_tables(out)
    for q, rows in tables.items():
        assert len(rows) == 3, (q, out)  # k=3 of 6 memories
        scores = [s for s, _, _ in rows]
        assert scores == sorted(scores, reverse=True), (q, rows)  # printed best first
        assert all(agent in demo.LEARNED for _, agent, _ in rows), rows  # written by the two writing agents

    cat = tables[question("cat")]
    assert "Pixel" in cat[0][2], cat
    food = tables[question("food", "eat", "diet", "restaurant", "dinner")]
    assert "peanut allergy" in food[0][2], food

    # The second user, asking the same questions, sees none of the first user's memories.
    for q in demo.QUESTIONS:
        assert f"{q} -> 0 memories" in out
    assert f"'{demo.OTHER_USER}' sees 0 of" in out
    n_learned = sum(len(f) for f in demo.LEARNED.values())
    assert f"'{demo.USER}': {n_learned} memories from {len(demo.LEARNED)} agents" in out
    assert counts(dsn) == {demo.USER: n_learned}

    # The edit and its history.
    assert "now: Maya flies to Lisbon on 5 March" in out
    assert re.search(r"ADD\s+by travel-planner\s+Maya flies to Lisbon on 3 March", out), out
    assert re.search(r"EDIT\s+by concierge\s+Maya flies to Lisbon on 5 March", out), out

    # A second run starts from scratch: same counts, same recall.
    code2, out2 = run_demo(dsn)
    assert code2 == 0, out2
    assert counts(dsn) == {demo.USER: n_learned}
    assert f"'{demo.USER}': {n_learned} memories from {len(demo.LEARNED)} agents" in out2
    for q in demo.QUESTIONS:
        assert f"{q} -> 0 memories" in out2
    assert {q: [c for _, _, c in rows] for q, rows in recall_tables(out2).items()} == \
        {q: [c for _, _, c in rows] for q, rows in tables.items()}
