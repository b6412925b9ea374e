"""``pgmem demo``: the main job, end to end, on the embedded server with the local model.

Two agents of one user write what they learn from a short conversation; a third agent of the same user
recalls it; a second user sees none of it. The conversation below was written for this demo.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

USER = "demo-maya"
OTHER_USER = "demo-tom"

CONVERSATION = [
    ("Maya", "I finally booked it: I fly to Lisbon on the 3rd of March and stay for a week."),
    ("assistant", "Lovely! Window or aisle seat?"),
    ("Maya", "Window, always. And remember I'm vegetarian and seriously allergic to peanuts."),
    ("Maya", "Oh, and my sister Lena is getting married in Porto on 14 June, I can't miss that."),
    ("Maya", "Work is the usual: night shifts at the hospital on Tuesdays and Wednesdays."),
    ("Maya", "Someone has to feed my cat Pixel while I'm away; my neighbour Ana usually does it."),
]

# What each agent learned from the conversation (agents distil turns into memories).
LEARNED = {
    "travel-planner": [
        ("Maya flies to Lisbon on 3 March and stays for a week.", {"topic": "travel"}),
        ("Maya always wants a window seat on flights.", {"topic": "travel"}),
        ("Maya is vegetarian and has a severe peanut allergy.", {"topic": "food", "priority": 5}),
    ],
    "calendar": [
        ("Maya's sister Lena gets married in Porto on 14 June; Maya must attend.", {"topic": "family"}),
        ("Maya works night shifts at the hospital on Tuesdays and Wednesdays.", {"topic": "work"}),
        ("Maya's neighbour Ana feeds her cat Pixel when Maya travels.", {"topic": "home"}),
    ],
}

QUESTIONS = [
    "Planning dinner in Lisbon: does Maya have any food allergies or a special diet?",
    "Which days in June is Maya unavailable?",
    "Who looks after the cat while she is away?",
]


def run(console: Console | None = None, dsn: str | None = None) -> int:
    from . import Memory

    import os

    console = console or Console()
    embedded = not dsn and not os.environ.get("PGMEM_DSN")
    console.rule("[bold]pgmem demo: shared memory for a fleet of agents")
    with Memory(dsn, role="pgmem_gateway") as base:  # a gateway acts for several users; RLS applies to it
        where = base.dsn.split("?host=")[-1] if base.dsn else "your pool"
        console.print(f"Database: [cyan]{where}[/] (embedded PostgreSQL + pgvector unless PGMEM_DSN is set)")
        console.print(f"Embedding model: [cyan]{base.embedder.model_name}[/] ({base.embedder.dims} dims), "
                      "computed on this machine (weights fetched once, then offline)")
        base.space()  # the space "default", bound to the model, created on first use
        for user in (USER, OTHER_USER):  # start from scratch on every run
            base.with_identity(user_id=user).delete_all(confirm=True)

        console.print("\n[bold]The conversation[/]")
        for speaker, text in CONVERSATION:
            console.print(f"  [dim]{speaker}:[/] {text}")

        console.print(f"\n[bold]1. Two agents of user {USER!r} write what they learned[/]")
        for agent, facts in LEARNED.items():
            mem = base.with_identity(user_id=USER, agent_id=agent)
            results = mem.add_many([{"content": c, "metadata": m} for c, m in facts])
            for (content, _), res in zip(facts, results):
                console.print(f"  [green]{agent:>14}[/] stored {str(res.id)[:8]}  {content}")

        console.print(f"\n[bold]2. A third agent of {USER!r}, the concierge, recalls[/]")
        concierge = base.with_identity(user_id=USER, agent_id="concierge")
        for question in QUESTIONS:
            table = Table(title=f"[bold]{question}[/]", title_justify="left", show_lines=False)
            table.add_column("score", justify="right")  # hybrid: full-text + vector, higher is better
            table.add_column("written by")
            table.add_column("memory")
            for hit in concierge.search(question, k=3):
                table.add_row(f"{hit.score:.3f}", hit.agent_id or "", hit.content)
            console.print(table)

        console.print("\n[bold]3. A literal edit, and its history[/]")
        flight = concierge.list(contains="3 March").items[0]
        edited = concierge.edit(flight.id, "3 March", "5 March")
        console.print(f"  now: {edited.content}")
        for ev in concierge.history(flight.id):
            console.print(f"  {ev.event:<6} by {ev.actor_agent_id or '?':<14} {ev.new_content}")

        console.print(f"\n[bold]4. Another user, {OTHER_USER!r}, asks the same questions[/]")
        tom = base.with_identity(user_id=OTHER_USER, agent_id="tom-assistant")
        total = 0
        for question in QUESTIONS:
            hits = tom.search(question, k=3)
            total += len(hits)
            console.print(f"  {question} -> [bold]{len(hits)}[/] memories")
        console.print(f"  {OTHER_USER!r} sees {total} of {USER!r}'s memories "
                      "(row-level security in PostgreSQL, not a filter in this program).")
        stats = concierge.stats()[0]
        console.print(f"\n{USER!r}: {stats.memories} memories from {stats.agents} agents. "
                      "Inspect them in psql:  pgmem server psql  then "
                      f"SET ROLE pgmem_gateway; SET pgmem.user_id = '{USER}'; SELECT * FROM pgmem.memories_view;")
        if embedded:
            from . import embedded

            st = embedded.status()
            console.print(f"\nThe embedded PostgreSQL keeps running in the background (pid {st.pid}, data in "
                          f"{st.data_dir}), for the next command and for psql. Stop it with: "
                          f"[bold]{embedded.stop_hint(st.data_dir)}[/]")
        return 0 if total == 0 else 1
