"""The embedded server outlives the process that starts it: that process says so (and how to stop it),
the demo says so, and each checkout's test suite has a server of its own."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from pgmem import demo, embedded
from pgmem.testing import checkout_key, test_data_dir


def test_starting_the_embedded_server_says_it_keeps_running(tmp_path, capsys, monkeypatch):
    path = tmp_path / "pg"
    monkeypatch.setenv("PGMEM_DATA_DIR", str(path))
    try:
        st = embedded.start(path)
        err = capsys.readouterr().err
        assert f"started the embedded PostgreSQL in {path} (pid {st.pid})" in err
        assert "keeps running after this process exits: pgmem server stop stops it" in err
        embedded.start(path)  # already running: nothing to say
        assert capsys.readouterr().err == ""
        monkeypatch.delenv("PGMEM_DATA_DIR")
        assert embedded.stop_hint(path) == f"pgmem server stop --data-dir {path}"

        out = io.StringIO()
        monkeypatch.setenv("PGMEM_DATA_DIR", str(path))
        monkeypatch.delenv("PGMEM_DSN", raising=False)
        assert demo.run(Console(file=out, width=200, color_system=None)) == 0
        text = " ".join(out.getvalue().split())  # as read, whatever the console wrapped
        assert f"The embedded PostgreSQL keeps running in the background (pid {st.pid}, data in {path})" in text
        assert "Stop it with: pgmem server stop" in text
    finally:
        embedded.stop(path)


def test_the_demo_on_your_own_server_says_nothing_about_stopping(dsn):
    out = io.StringIO()
    demo.run(Console(file=out, width=200, color_system=None), dsn=dsn)
    assert "keeps running" not in out.getvalue()


def test_each_checkout_has_its_own_test_server(monkeypatch):
    monkeypatch.delenv("PGMEM_TEST_DATA_DIR", raising=False)
    a, b = test_data_dir("/srv/one"), test_data_dir("/srv/two")
    assert a != b and a == test_data_dir(Path("/srv/one/.").resolve())
    assert checkout_key("/srv/one") in str(a) and a.name == "pgdata"
    monkeypatch.setenv("PGMEM_TEST_DATA_DIR", "/tmp/explicit")
    assert test_data_dir("/srv/one") == Path("/tmp/explicit")
