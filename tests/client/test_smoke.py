

def test_two_agents_share_and_other_user_sees_nothing(make_memory):
    planner = make_memory("alice", "planner")
    coder = make_memory("alice", "coder")
    bob = make_memory("bob", "bob-agent")
    added = planner.add("Alice prefers green tea in the morning")
    hits = coder.search("what tea does Alice like", k=5)
    assert [h.id for h in hits] == [added.id]
    assert hits[0].agent_id == "planner"
    assert bob.search("what tea does Alice like", k=5) == []
    assert bob.get(added.id) is None
