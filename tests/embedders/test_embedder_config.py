"""One embedder configuration for the library, the CLI, the MCP server and the hermes provider: arguments,
then the environment, then the config file (docs/embedders.md)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import httpx
import pytest
from typer.testing import CliRunner

from pgmem import EmbedderError, MiniLMEmbedder, OpenAIEmbedder, embedders
from pgmem.cli import app
from test_embedders import api_key, http_server  # noqa: F401  (fixtures)

VARS = ("PGMEM_EMBEDDER", "PGMEM_EMBED_MODEL", "PGMEM_EMBED_DIMS", "PGMEM_EMBED_URL", "PGMEM_EMBED_API_KEY",
        "PGMEM_EMBED_API_KEY_ENV", "PGMEM_EMBED_MODEL_DIR", "PGMEM_EMBED_FETCH", "PGMEM_CONFIG", "PGMEM_EMBED_RUNTIME")


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user's config file leaks in


@pytest.fixture
def config_file(tmp_path, monkeypatch):
    def write(text: str):
        path = tmp_path / "config.toml"
        path.write_text(text, encoding="utf-8")
        monkeypatch.setenv("PGMEM_CONFIG", str(path))
        return path
    return write


def test_default_is_the_numpy_minilm():
    emb = embedders.from_config()
    assert isinstance(emb, MiniLMEmbedder)
    assert (emb.model_name, emb.dims) == ("sentence-transformers/all-MiniLM-L6-v2", 384)
    assert embedders.load_config().sources == {}


def test_the_runtime_of_the_local_model_comes_from_the_environment_or_the_file(config_file, monkeypatch):
    assert embedders.from_config().runtime == "numpy"
    config_file('[embedder]\nruntime = "onnx"\n')
    emb = embedders.from_config()
    assert isinstance(emb, MiniLMEmbedder) and emb.runtime == "onnx"
    assert embedders.load_config().sources["runtime"].endswith("config.toml")
    monkeypatch.setenv("PGMEM_EMBED_RUNTIME", "numpy")
    assert embedders.from_config().runtime == "numpy"
    assert embedders.from_config(runtime="onnx").runtime == "onnx"


@pytest.mark.parametrize("where", ["environment", "file", "argument"])
def test_an_unknown_runtime_is_a_clear_error_wherever_it_is_set(config_file, monkeypatch, where):
    if where == "environment":
        monkeypatch.setenv("PGMEM_EMBED_RUNTIME", "cuda")
    elif where == "file":
        config_file('[embedder]\nruntime = "cuda"\n')
    with pytest.raises(EmbedderError, match="runtime .*must be numpy or onnx, got 'cuda'"):
        embedders.from_config(**({"runtime": "cuda"} if where == "argument" else {}))
    with pytest.raises(EmbedderError, match="unknown runtime 'cuda'"):
        MiniLMEmbedder(runtime="cuda")


def test_the_onnx_runtime_without_its_packages_says_which_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_onnxruntime(name, *args, **kwargs):
        if name == "onnxruntime":
            raise ImportError("No module named 'onnxruntime'", name="onnxruntime")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    monkeypatch.setattr(MiniLMEmbedder, "_encoders", {})  # nothing loaded in this process counts
    with pytest.raises(EmbedderError, match="needs onnxruntime") as info:
        MiniLMEmbedder(runtime="onnx").embed(["a text"])
    assert "pgmem-agents[onnx]" in info.value.hint


def test_available_counts_the_onnx_runtimes_packages(monkeypatch):
    """What the hermes provider's is_available() asks: with PGMEM_EMBED_RUNTIME=onnx and onnxruntime missing,
    the local embedder is not available (embedding would fail), while the numpy runtime still is."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    assert embedders.available()
    monkeypatch.setenv("PGMEM_EMBED_RUNTIME", "onnx")
    assert not embedders.available()
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert embedders.available()


def test_default_file_location_is_platformdirs(tmp_path):
    assert embedders.config_path() == tmp_path / "xdg" / "pgmem" / "config.toml"


def test_file_then_environment_then_arguments(config_file, monkeypatch):
    path = config_file('[embedder]\nembedder = "http"\nmodel = "text-embedding-3-small"\ndims = 1536\n'
                       'url = "http://localhost:11434/v1"\napi_key_env = "MY_KEY"\n')
    emb = embedders.from_config()
    assert isinstance(emb, OpenAIEmbedder)
    assert (emb.model_name, emb.dims, emb.base_url, emb.api_key_env) == \
        ("text-embedding-3-small", 1536, "http://localhost:11434/v1", "MY_KEY")
    monkeypatch.setenv("PGMEM_EMBED_URL", "http://gpu-box:8000/v1")
    cfg = embedders.load_config()
    assert cfg.url == "http://gpu-box:8000/v1" and cfg.sources["url"] == "$PGMEM_EMBED_URL"
    assert cfg.sources["model"] == str(path)
    assert embedders.load_config(url="http://arg/v1").url == "http://arg/v1"


def test_a_higher_layer_choosing_another_kind_drops_the_files_settings(config_file, monkeypatch):
    config_file('[embedder]\nembedder = "http"\nmodel = "text-embedding-3-small"\ndims = 1536\n')
    monkeypatch.setenv("PGMEM_EMBEDDER", "local")
    cfg = embedders.load_config()
    assert (cfg.embedder, cfg.model, cfg.dims) == ("local", None, None)
    assert isinstance(embedders.from_config(), MiniLMEmbedder)


def test_openai_shorthand(monkeypatch):
    monkeypatch.setenv("PGMEM_EMBEDDER", "openai:nomic-embed-text:768")
    emb = embedders.from_config()
    assert isinstance(emb, OpenAIEmbedder) and (emb.model_name, emb.dims) == ("nomic-embed-text", 768)
    assert embedders.load_config().sources["model"] == "$PGMEM_EMBEDDER"


def test_api_key_comes_from_the_environment_only(config_file, monkeypatch):
    config_file('[embedder]\nembedder = "http"\nmodel = "m"\ndims = 8\napi_key = "sk-secret"\n')
    with pytest.raises(EmbedderError, match="unknown key.*api_key.*environment only"):
        embedders.from_config()
    config_file('[embedder]\nembedder = "http"\nmodel = "m"\ndims = 8\n')
    monkeypatch.setenv("PGMEM_EMBED_API_KEY", "sk-from-env")
    assert embedders.from_config()._api_key == "sk-from-env"


@pytest.mark.parametrize("text, message", [
    ('[embedder]\nembedder = "htp"\n', "unknown embedder 'htp'"),
    ('[embedder]\nmodle = "x"\n', "unknown key.*modle"),
    ('[embedder]\nembedder = "http"\ndims = "many"\n', "dims .* positive integer"),
    ('[embedder]\nembedder = "http"\ndims = 0\n', "dims .* positive integer"),
    ('[embedder]\nembedder = "http"\nmodel = 7\n', "model .* must be a string"),
    ('embedder = "local"\n[embedder\n', "config file .*config.toml"),
    ('embedder = 3\n', r"\[embedder\] must be a table"),
    ('[embedder]\nembedder = "http"\nmodel = "m"\n', "needs a model and its dims"),
    ('[embedder]\nembedder = "local"\nmodel = "BAAI/bge-small-en"\n', "computes only"),
    ('[embedder]\nembedder = "openai:m"\n', "expected openai:MODEL:DIMS"),
    ('[embedder]\nembedder = "no_such_module_pgmem:Factory"\n', "factory .* failed: ModuleNotFoundError"),
])
def test_bad_configuration_is_a_clear_embedder_error(config_file, text, message):
    config_file(text)
    with pytest.raises(EmbedderError, match=message):
        embedders.from_config()


def test_a_named_config_file_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("PGMEM_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(EmbedderError, match=r"nope.toml \(from \$PGMEM_CONFIG\) does not exist"):
        embedders.from_config()


def test_factory_is_called(config_file):
    config_file('[embedder]\nembedder = "pgmem.testing:HashEmbedder"\n')
    assert embedders.from_config().model_name == "pgmem-testing-hash-64"


def test_hermes_provider_uses_the_shared_configuration(config_file, monkeypatch):
    from pgmem.integrations import hermes

    config_file('[embedder]\nembedder = "pgmem.testing:HashEmbedder"\n')
    assert hermes.make_embedder(hermes.load_config()["embedder"]).model_name == "pgmem-testing-hash-64"
    assert isinstance(hermes.make_embedder("local"), MiniLMEmbedder)  # its own setting still wins
    assert hermes.make_embedder("openai:m:8").model_name == "m"


def _served(url: str) -> int:
    return httpx.get(url.removesuffix("/v1") + "/health", timeout=5).json()["requests"]


def test_cli_uses_the_http_embedder_from_the_environment(dsn, admin, http_server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("PGMEM_EMBEDDER", "http")
    monkeypatch.setenv("PGMEM_EMBED_MODEL", "all-MiniLM-L6-v2")
    monkeypatch.setenv("PGMEM_EMBED_DIMS", "384")
    monkeypatch.setenv("PGMEM_EMBED_URL", http_server)
    monkeypatch.setenv("PGMEM_EMBED_API_KEY", "test-key")
    before = _served(http_server)
    base = ["--dsn", dsn, "--role", "pgmem_gateway", "--user", "alice", "--space", "remote"]
    runner = CliRunner()
    admin.execute("SELECT pgmem.create_space('remote', 'all-MiniLM-L6-v2', 384)")
    added = runner.invoke(app, ["add", "Alice keeps bees on the roof", *base])
    assert added.exit_code == 0, added.output
    found = runner.invoke(app, ["search", "who has bees?", "--json", *base])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)[0]["content"] == "Alice keeps bees on the roof"
    assert _served(http_server) >= before + 2  # the add and the search both embedded over HTTP


def test_mcp_server_uses_the_http_embedder_from_the_config_file(dsn, admin, http_server, tmp_path):  # noqa: F811
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    conf = tmp_path / "config.toml"
    conf.write_text(f'[embedder]\nembedder = "http"\nmodel = "all-MiniLM-L6-v2"\ndims = 384\nurl = "{http_server}"\n'
                    'api_key_env = "PGMEM_TEST_KEY"\n', encoding="utf-8")
    env = {"PGMEM_CONFIG": str(conf), "PGMEM_TEST_KEY": "test-key", "PATH": os.environ.get("PATH", "")}
    params = StdioServerParameters(command=sys.executable, env=env, args=[
        "-m", "pgmem.cli", "mcp", "--dsn", dsn, "--user", "carol", "--role", "pgmem_gateway", "--space", "remote2"])
    admin.execute("SELECT pgmem.create_space('remote2', 'all-MiniLM-L6-v2', 384)")
    before = _served(http_server)

    async def run() -> str:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await asyncio.wait_for(session.initialize(), timeout=120)
            await session.call_tool("remember", {"content": "Carol plays the cello"})
            result = await session.call_tool("recall", {"query": "which instrument?"})
            return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")

    assert "Carol plays the cello" in asyncio.run(run())
    assert _served(http_server) >= before + 3  # warm-up, remember, recall


def test_errors_name_the_variable_they_came_from(monkeypatch):
    monkeypatch.setenv("PGMEM_EMBEDDER", "http")
    monkeypatch.setenv("PGMEM_EMBED_DIMS", "lots")
    with pytest.raises(EmbedderError, match=r"dims \(\$PGMEM_EMBED_DIMS\) must be a positive integer"):
        embedders.from_config()
    monkeypatch.delenv("PGMEM_EMBED_DIMS")
    monkeypatch.setenv("PGMEM_EMBEDDER", "htp")
    with pytest.raises(EmbedderError, match=r"unknown embedder 'htp' \(\$PGMEM_EMBEDDER\)"):
        embedders.from_config()
