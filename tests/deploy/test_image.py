"""The image lane (``PGMEM_IMAGE_TEST=1``, CONTRIBUTING.md): build the pgmem image with podman from the working
tree at a commit, then check its filesystem, entered with chroot as the image's user with the image's
environment (this machine builds images but cannot run containers, and reaches no image registry):

- the installed distribution is pgmem-agents, every file of it equal to the commit's; no torch or CUDA;
- the MiniLM weights are inside, owned by root, equal to the digests pgmem pins, and load with no network;
  without them the embedder fails at once with a clear error (PGMEM_EMBED_FETCH=0), it does not download;
- ``pgmem --version`` runs as uid 10001 with a writable home;
- the entrypoint stops the container for a missing secret, a wrong revision, a database without pgvector and
  an API login that may not execute the API, one line each;
- against a PostgreSQL this test starts (roles by deploy/initdb/10-roles.sh, secrets by
  deploy/make-secrets.sh), ``pgmem migrate`` as the schema owner, then ``pgmem serve`` as pgmem_service:
  ``/readyz`` is 200, and a key made through the setup link finds a memory with the image's embedder.

Needs root, podman, mmdebstrap, unshare and chroot; the base image is made from Debian's packages with
deploy/make-debian-base.sh unless ``PGMEM_IMAGE_BASE`` names one.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from pgmem import embedded as server
from pgmem.embedders import MINILM_FILES

from support.service_helpers import bootstrap, free_port, issue_key

pytestmark = pytest.mark.skipif(os.environ.get("PGMEM_IMAGE_TEST") != "1",
                                reason="the image lane runs with PGMEM_IMAGE_TEST=1 (CONTRIBUTING.md)")

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DEFAULT_BASE = "localhost/pgmem-base:debian-bookworm"
USER = "10001:10001"
MODEL_DIR = "/opt/pgmem/models/all-MiniLM-L6-v2"


def sh(*argv: str, env: dict | None = None, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("text", True)
    r = subprocess.run(list(argv), capture_output=True, env=env, timeout=timeout, **kw)
    assert r.returncode == 0, f"{argv}: {r.stderr[-3000:]}"
    return r


def tree_commit() -> str:
    """A commit of the working tree as it is (tracked and untracked files git does not ignore), on top of
    HEAD and on no branch: the immutable revision the image is built from."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": f"{tmp}/index", "GIT_AUTHOR_NAME": "image test",
               "GIT_AUTHOR_EMAIL": "image-test@localhost", "GIT_COMMITTER_NAME": "image test",
               "GIT_COMMITTER_EMAIL": "image-test@localhost"}
        sh("git", "-C", str(REPO), "read-tree", "HEAD", env=env)
        sh("git", "-C", str(REPO), "add", "-A", env=env)
        tree = sh("git", "-C", str(REPO), "write-tree", env=env).stdout.strip()
        return sh("git", "-C", str(REPO), "commit-tree", "-p", "HEAD", "-m", "the image test's tree", tree,
                  env=env).stdout.strip()


@dataclass
class Image:
    revision: str
    tag: str
    config: dict
    root: Path
    binds: list[str] = field(default_factory=list)

    def env(self, extra: dict | None = None, unset: tuple[str, ...] = ()) -> dict:
        env = dict(e.split("=", 1) for e in self.config["Env"])
        env.update(extra or {})
        for key in unset:
            env.pop(key, None)
        return env

    def argv(self, argv: list[str], extra: dict | None = None, unset: tuple[str, ...] = (), *,
             entrypoint: bool = True, network: bool = True, user: str = USER) -> list[str]:
        """The command as the container would run it: the image's entrypoint, user, environment and working
        directory, in a private mount namespace (/dev, /proc and the binds mounted into the image's root)
        and, with ``network=False``, a network namespace of its own with nothing in it."""
        cmd = (self.config["Entrypoint"] if entrypoint else []) + argv
        env = [f"{k}={v}" for k, v in self.env(extra, unset).items()]
        setup = ('set -e; R=$1; shift; mount --rbind /dev "$R/dev"; mount -t proc proc "$R/proc"; '
                 'for b in $PGMEM_TEST_BINDS; do s=${b%%=*}; d=${b#*=}; mkdir -p "$(dirname "$R$d")"; '
                 '[ -e "$R$d" ] || : > "$R$d"; mount --bind "$s" "$R$d"; done; '
                 f'exec chroot --userspec={user} "$R" /usr/bin/env -i "$@"')
        inner = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', self.config["WorkingDir"], *cmd]
        return ["unshare", "--mount", *([] if network else ["--net"]), "/bin/sh", "-c", setup, "sh",
                str(self.root), *env, *inner]

    def run(self, argv: list[str], extra: dict | None = None, unset: tuple[str, ...] = (), timeout: float = 120,
            **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(argv, extra, unset, **kw), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PGMEM_TEST_BINDS": " ".join(self.binds)})

    def popen(self, argv: list[str], extra: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen(self.argv(argv, extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PGMEM_TEST_BINDS": " ".join(self.binds)})


@pytest.fixture(scope="module")
def image() -> Image:
    assert os.geteuid() == 0, "the image lane needs root (podman mount, chroot)"
    for tool in ("podman", "unshare", "chroot", "git"):
        assert shutil.which(tool), f"{tool} is not installed"
    revision = tree_commit()
    base = os.environ.get("PGMEM_IMAGE_BASE", DEFAULT_BASE)
    if subprocess.run(["podman", "image", "exists", base]).returncode != 0:
        assert base == DEFAULT_BASE, f"PGMEM_IMAGE_BASE={base} does not exist"
        sh(str(DEPLOY / "make-debian-base.sh"), base, timeout=1200)
    tag = f"localhost/pgmem-image-test:{revision}"
    env = {**os.environ, "BUILDAH_ISOLATION": "chroot", "PGMEM_BUILDER": "podman"}
    dangling = set(sh("podman", "images", "--quiet", "--filter", "dangling=true").stdout.split())
    built = sh(str(DEPLOY / "build-image.sh"), revision, "--base", base, "--tag", tag, env=env, timeout=1800)
    assert built.stdout.strip() == tag
    config = json.loads(sh("podman", "image", "inspect", "--format", "{{json .Config}}", tag).stdout)
    cid = sh("podman", "create", tag).stdout.strip()
    try:
        root = Path(sh("podman", "mount", cid).stdout.strip())
        yield Image(revision, tag, config, root)
    finally:
        subprocess.run(["podman", "umount", cid], capture_output=True)
        subprocess.run(["podman", "rm", "--force", cid], capture_output=True)
        subprocess.run(["podman", "rmi", "--force", tag], capture_output=True)
        # and this build's wheel stage (its context changes with every tree, so it is no cache worth keeping)
        new = set(sh("podman", "images", "--quiet", "--filter", "dangling=true").stdout.split()) - dangling
        if new:
            subprocess.run(["podman", "rmi", *sorted(new)], capture_output=True)


def test_the_image_is_the_commits_with_its_user_and_no_fetching(image):
    cfg = image.config
    assert cfg["User"] == USER and cfg["WorkingDir"] == "/home/pgmem"
    env = image.env()
    assert env["PGMEM_EMBED_FETCH"] == "0" and env["PGMEM_EMBED_MODEL_DIR"] == MODEL_DIR
    assert cfg["Labels"]["org.opencontainers.image.revision"] == image.revision
    assert (image.root / "opt/pgmem/REVISION").read_text().strip() == image.revision
    assert not [k for k in env if k.startswith("HF_")]


def _site_packages(image: Image) -> Path:
    (site,) = (image.root / "opt/pgmem/lib").glob("python3*/site-packages")
    return site


def test_the_installed_distribution_is_pgmem_agents_at_that_commit_without_torch(image):
    site = _site_packages(image)
    (dist,) = site.glob("pgmem_agents-*.dist-info")
    assert re.search(r"^Name: pgmem-agents$", (dist / "METADATA").read_text(), re.M)
    assert not list(site.glob("pgmem-*.dist-info")) and not list(site.glob("pgmem_[!a]*.dist-info"))
    names = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert not {n for n in names if n in ("torch", "triton") or n.startswith("nvidia")}, names
    assert not (site / "torch").exists()
    # every file of pgmem/ and sql/ in the commit is installed with the commit's bytes (the wheel's RECORD)
    record = {}
    for line in (dist / "RECORD").read_text().splitlines():
        path, digest, _ = line.rsplit(",", 2)
        if digest.startswith("sha256="):
            record[path] = digest[len("sha256="):]
    tree = tarfile.open(fileobj=io.BytesIO(sh("git", "-C", str(REPO), "archive", image.revision, "pgmem", "sql",
                                              text=False).stdout))
    expected = {}
    for member in tree.getmembers():
        if member.isfile():
            installed = member.name if member.name.startswith("pgmem/") else "pgmem/" + member.name
            sha = hashlib.sha256(tree.extractfile(member).read()).digest()
            expected[installed] = base64.urlsafe_b64encode(sha).rstrip(b"=").decode()
    assert len(expected) > 50
    assert {p: record.get(p) for p in expected} == expected
    for path in expected:  # and the files on disk are those the RECORD names
        data = (site / path).read_bytes()
        assert base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode() == expected[path], path


def test_the_weights_are_inside_verified_and_read_only(image):
    model = image.root / MODEL_DIR.lstrip("/")
    assert {p.name for p in model.iterdir()} == set(MINILM_FILES)
    for name, digest in MINILM_FILES.items():
        assert hashlib.sha256((model / name).read_bytes()).hexdigest() == digest, name
        st = (model / name).stat()
        assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644
    assert model.stat().st_uid == 0 and not (model.stat().st_mode & 0o022)


EMBED = ("import numpy as np; from pgmem.embedders import MiniLMEmbedder; v = MiniLMEmbedder().embed(['Alice is vegetarian']); "
         "print(v.shape[0], v.shape[1], round(float(np.linalg.norm(v)), 4))")


def test_the_cli_and_the_embedder_run_as_the_images_user_with_no_network(image):
    r = image.run(["pgmem", "--version"], network=False)
    assert r.returncode == 0 and r.stdout.strip() == "pgmem 0.1.0", r
    r = image.run(["python", "-c", "import os, pathlib; p = pathlib.Path.home() / '.cache' / 'pgmem'; "
                   "p.mkdir(parents=True, exist_ok=True); (p / 'probe').write_text('x'); print(os.getuid(), p)"],
                  entrypoint=False, network=False)
    assert r.returncode == 0 and r.stdout.split() == ["10001", "/home/pgmem/.cache/pgmem"], r
    r = image.run(["python", "-c", "open('/opt/pgmem/models/all-MiniLM-L6-v2/config.json', 'a')"], entrypoint=False)
    assert r.returncode != 0 and "Permission denied" in r.stderr
    r = image.run(["python", "-c", EMBED], entrypoint=False, network=False)
    assert r.returncode == 0 and r.stdout.split() == ["1", "384", "1.0"], r


def test_a_missing_model_is_a_clear_error_not_a_download(image):
    started = time.monotonic()
    r = image.run(["python", "-c", EMBED], unset=("PGMEM_EMBED_MODEL_DIR",), entrypoint=False, network=False,
                  timeout=60)
    assert r.returncode != 0 and "are not installed and downloading is off (PGMEM_EMBED_FETCH=0)" in r.stderr, r
    assert time.monotonic() - started < 60
    r = image.run(["python", "-c", EMBED], {"PGMEM_EMBED_MODEL_DIR": "/nowhere"}, entrypoint=False, network=False)
    assert r.returncode != 0 and "/nowhere does not hold all-MiniLM-L6-v2" in r.stderr, r


@dataclass
class Database:
    socket_dir: str
    secrets: Path

    def dsn(self, user: str, db: str = "pgmem") -> str:
        return f"postgresql://{user}@/{db}?host={self.socket_dir}"


@pytest.fixture(scope="module")
def database(image, tmp_path_factory) -> Database:
    """A PostgreSQL with pgvector for the image: the embedded one of this machine's pgmem, its socket file
    mounted at /run/postgresql/.s.PGSQL.5432 in the image (its data directory is private to its own user), its
    roles made by deploy/initdb/10-roles.sh from the files deploy/make-secrets.sh writes."""
    import psycopg

    tmp = tmp_path_factory.mktemp("image-db")
    data = tmp / "pgdata"
    st = server.start(data, notice=False)
    try:
        secrets = tmp / "secrets"
        sh(str(DEPLOY / "make-secrets.sh"), str(secrets))  # as root: owned by 999 and 10001, as compose mounts them
        env = {**os.environ, "PGHOST": str(st.socket_dir), "PGMEM_SECRETS_DIR": str(secrets),
               "PATH": f"{server.bin_dir()}:{os.environ['PATH']}"}
        sh("sh", str(DEPLOY / "initdb" / "10-roles.sh"), env=env)
        run_secrets = image.root / "run" / "secrets"
        run_secrets.mkdir(parents=True, exist_ok=True)
        for name in ("pgpass_owner", "pgpass_api"):
            shutil.copy2(secrets / name, run_secrets / name)
            os.chown(run_secrets / name, 10001, 10001)
        with psycopg.connect(st.url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE novector")
            conn.execute("CREATE ROLE image_test_nogateway LOGIN")
        image.binds.append(f"{st.socket_dir}/.s.PGSQL.5432=/run/postgresql/.s.PGSQL.5432")
        yield Database("/run/postgresql", secrets)
    finally:
        server.stop(data)


def stopped(r: subprocess.CompletedProcess, *words: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 78 and len(lines) == 1 and lines[0].startswith("pgmem-entrypoint: "), r
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_bad_input_stops_the_container_with_one_line(image, database):
    api = {"PGMEM_REVISION": image.revision, "PGMEM_DSN": database.dsn("pgmem_service"),
           "PGPASSFILE": "/run/secrets/pgpass_api"}
    serve = ["pgmem", "serve", "--host", "127.0.0.1", "--port", str(free_port())]
    stopped(image.run(serve, api | {"PGPASSFILE": "/run/secrets/pgpass_absent"}), "is missing", "make-secrets.sh")
    stopped(image.run(serve, api | {"PGMEM_REVISION": "main"}), "PGMEM_REVISION='main' is not a 40-hex git commit")
    stopped(image.run(serve, api | {"PGMEM_REVISION": "0" * 40}), f"this image was built from {image.revision}")
    stopped(image.run(serve, api | {"PGMEM_DSN": database.dsn("pgmem_service", "novector")}),
            "pgvector is not installed in database novector")
    nogateway = "/run/secrets/pgpass_nogateway"
    (image.root / nogateway.lstrip("/")).write_text("db:5432:pgmem:image_test_nogateway:x\n")
    os.chmod(image.root / nogateway.lstrip("/"), 0o600)
    os.chown(image.root / nogateway.lstrip("/"), 10001, 10001)
    stopped(image.run(serve, api | {"PGMEM_DSN": database.dsn("image_test_nogateway"), "PGPASSFILE": nogateway}),
            "cannot SET ROLE pgmem_gateway")
    # before the migration job ran, the API stops too: its login may not execute an API that is not there
    stopped(image.run(serve, api), "has no schema pgmem: run the migrate job first")


@dataclass
class Served:
    url: str
    lines: list[str]

    def setup_link(self) -> str:
        for line in self.lines:
            m = re.search(r"(http://\S+/ui/setup\?token=\S+)", line)
            if m:
                return m.group(1)
        raise AssertionError(f"no setup link printed: {self.lines}")


def test_migrate_as_the_owner_then_serve_as_the_api_login(image, database):
    r = image.run(["pgmem", "migrate"], {"PGMEM_REVISION": image.revision, "PGMEM_DSN": database.dsn("pgmem_owner"),
                                          "PGPASSFILE": "/run/secrets/pgpass_owner"}, timeout=300)
    assert r.returncode == 0, r.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = image.popen(["pgmem", "serve", "--host", "127.0.0.1", "--port", str(port), "--public-url", url],
                       {"PGMEM_REVISION": image.revision, "PGMEM_DSN": database.dsn("pgmem_service"),
                        "PGPASSFILE": "/run/secrets/pgpass_api"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        ready = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                ready = httpx.get(f"{url}/readyz", timeout=10)
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        assert ready is not None and ready.status_code == 200, (ready and ready.text, lines)
        browser = bootstrap(Served(url, lines))
        key = issue_key(browser, label="image", user="alice")
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
            added = c.post("/v1/memories", json={"content": "Alice is vegetarian and cycles to work"})
            assert added.status_code == 201, added.text
            c.post("/v1/memories", json={"content": "The quarterly report is due on Friday"})
            found = c.post("/v1/search", json={"query": "what does Alice eat?", "k": 1, "mode": "vector"})
            assert found.status_code == 200, found.text
            assert [h["id"] for h in found.json()["results"]] == [added.json()["id"]]
            assert c.post("/v1/search", json={"query": "x"}, headers={"Authorization": "Bearer pgm_bad"}).status_code == 401
        browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
