"""Replicas behind HAProxy with cookie stickiness (deploy/): the configs, then real processes.

The files that cannot run here (deploy/compose.yaml, containers) are checked for what they must say; the setup
that can (app processes and HAProxy on this machine, deploy/replicas.py) is run: sessions through the balancer
on both replicas, an upload that reaches the replica holding its session (and is refused by the other one), a
training run that a reconnecting browser finds on its replica, and a replica that stops being taken out of the
pool. The balancer tests skip, with the reason, only where haproxy is not installed (CI installs it: .ci/run).
Nothing here is timed: bench.load --replicas N measures."""
import re
import subprocess
from pathlib import Path

from tests.polling import wait_until
import pytest
import yaml

from deploy.replicas import COMPOSE_CONFIG, TEMPLATE, Replicas, compose_config, find_haproxy, render_config

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
HAPROXY = find_haproxy()
needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install -y haproxy)")


def sections(cfg: str) -> dict[str, list[list[str]]]:
    """An HAProxy config read the way HAProxy reads it: a line at the margin opens a section ("backend replicas"),
    an indented line is a directive of the last one, split into words; comments dropped."""
    out, current = {}, None
    for raw in cfg.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            current = out.setdefault(line.strip(), [])
        else:
            current.append(line.split())
    return out


def compose_facts() -> dict:
    """What deploy/compose.yaml says the balancer must match: the app services, the port each one exposes, the
    path of their health check, and the ports published for HAProxy (students, then the statistics page)."""
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    apps = sorted(name for name in services if name not in ("haproxy", "redis"))
    ports = {str(p) for name in apps for p in services[name]["expose"]}
    # the app's own health check, e.g. urlopen('http://127.0.0.1:8501/_stcore/health'): its port and path
    checks = {re.search(r"http://127\.0\.0\.1:(\d+)(/[\w/]+)", " ".join(services[a]["healthcheck"]["test"])).groups()
              for a in apps}
    assert len(ports) == len(checks) == 1, (ports, checks)  # every replica is the same container
    (port,), ((checked_port, health),) = ports, checks
    assert checked_port == port  # the container checks itself where HAProxy will reach it
    # "80:8080" published for students, "127.0.0.1:8404:8404" for the statistics page: HAProxy binds the right side
    students, stats = (p.rsplit(":", 1)[1] for p in services["haproxy"]["ports"])
    return {"apps": apps, "port": port, "health": health, "bind": f":{students}", "stats_bind": f":{stats}"}


def check_balancer(cfg: str, servers: dict[str, str], bind: str, stats_bind: str, health: str) -> dict:
    """The parsed config sends ``bind`` to a backend of exactly ``servers`` {name: host:port}, each with a cookie
    of its own name, health-checked on ``health``; the statistics page is on ``stats_bind``. Returns the parse."""
    parsed = sections(cfg)
    front = next(d for name, d in parsed.items() if name.startswith("frontend") and ["bind", bind] in d)
    backend = parsed["backend " + next(d[1] for d in front if d[0] == "default_backend")]
    listed = {d[1]: d[2:] for d in backend if d[0] == "server"}
    assert listed == {name: [addr, "cookie", name] for name, addr in servers.items()}
    # the balancer sets the cookie on the first answer and routes by it: stickiness, the reason for HAProxy here
    assert ["cookie", "SERVERID", "insert", "indirect", "nocache", "httponly"] in backend
    assert ["option", "httpchk"] in backend and ["http-check", "send", "meth", "GET", "uri", health] in backend
    assert ["http-check", "expect", "status", "200"] in backend
    default_server = next(d for d in backend if d[0] == "default-server")
    assert "check" in default_server  # without it no server is ever checked, and a dead replica stays in the pool
    stats = next(d for name, d in parsed.items() if name.startswith("frontend") and ["bind", stats_bind] in d)
    assert ["stats", "enable"] in stats
    return parsed


def test_the_compose_config_matches_the_compose_file():
    facts = compose_facts()
    cfg = COMPOSE_CONFIG.read_text()
    servers = {a: f"{a}:{facts['port']}" for a in facts["apps"]}  # a service's name resolves on Docker's network
    parsed = check_balancer(cfg, servers, facts["bind"], facts["stats_bind"], facts["health"])
    # names resolve through Docker's DNS, so a restarted replica is found at its new address
    assert "resolvers docker" in parsed and ["nameserver", "dns", "127.0.0.11:53"] in parsed["resolvers docker"]
    assert "docker" in next(d for d in parsed["backend replicas"] if d[0] == "default-server")
    # and it is what the documented command writes (a change to the template must be written out again)
    assert cfg == compose_config(len(facts["apps"])), \
        "deploy/haproxy.cfg is stale: python -m deploy.replicas compose-config --replicas 3 > deploy/haproxy.cfg"


@pytest.mark.parametrize("n", [1, 5])
def test_the_compose_config_lists_as_many_replicas_as_asked(n):
    servers = {f"app{i}": f"app{i}:8501" for i in range(1, n + 1)}
    check_balancer(compose_config(n), servers, ":8080", ":8404", "/_stcore/health")


def test_the_config_for_local_processes_lists_their_addresses():
    servers = {"app1": "127.0.0.1:5001", "app2": "127.0.0.1:5002"}
    cfg = render_config(list(servers.items()), bind="127.0.0.1:8500", stats_bind="127.0.0.1:8404", check_interval="1s")
    parsed = check_balancer(cfg, servers, "127.0.0.1:8500", "127.0.0.1:8404", "/_stcore/health")
    assert "resolvers docker" not in parsed  # no Docker here: plain addresses
    assert ["inter", "1s"] == next(d for d in parsed["backend replicas"] if d[0] == "default-server")[2:4]


def test_the_template_says_what_a_class_needs():
    parsed = sections(TEMPLATE.read_text())
    defaults, backend = parsed["defaults"], parsed["backend replicas"]
    assert not any(d[:2] in (["balance", "source"], ["stick", "on"]) or d[0] == "hash-type" for d in backend)  # not IP
    assert ["timeout", "tunnel", "2h"] in defaults  # websockets are long-lived
    assert ["mode", "http"] in defaults  # cookies, headers and upgrades are seen: not a plain TCP relay


@needs_haproxy
@pytest.mark.parametrize("n", [1, 3, 5])
def test_haproxy_accepts_the_compose_config(n, tmp_path):
    cfg = COMPOSE_CONFIG if n == 3 else tmp_path / "haproxy.cfg"
    if n != 3:
        cfg.write_text(compose_config(n))
    out = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr  # app1..appN do not resolve here: warnings, not errors


def test_the_compose_file_runs_the_dockerfile_behind_haproxy_with_one_models_volume():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    apps = sorted(name for name in services if name not in ("haproxy", "redis"))
    assert apps == ["app1", "app2", "app3"]
    cfg = COMPOSE_CONFIG.read_text()
    for name in apps:
        s = services[name]
        assert s["build"]["dockerfile"] == "deploy/Dockerfile" and (DEPLOY / s["build"]["context"]).resolve() == ROOT
        assert "models:/data/models" in [v.split("  ")[0].strip() for v in s["volumes"]]
        assert s["environment"]["TE_MODELS_DIR"] == "/data/models"
        # issue 54: one class store for every replica (Redis, kept on disk), the teacher key passed through, and the
        # balancer's X-Forwarded-For believed
        assert s["environment"]["TE_CLASS_STORE"] == "redis://redis:6379/0" and "redis" in s["depends_on"]
        assert s["environment"]["TE_TEACHER_KEY"] == "${TE_TEACHER_KEY:-}"
        assert s["environment"]["TE_TRUSTED_PROXY"] == "haproxy"
        assert "/_stcore/health" in " ".join(s["healthcheck"]["test"])
        assert f"server {name} {name}:8501 cookie {name}" in cfg  # HAProxy knows every replica, by its name
    assert "models" in compose["volumes"]
    redis = services["redis"]
    assert redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") and v.split(":")[0] in compose["volumes"] for v in redis["volumes"])
    assert "http-request set-header X-Forwarded-For %[src]" in cfg and "option forwardfor" not in cfg
    assert "/_stcore/health" in (DEPLOY / "Dockerfile").read_text()
    proxy = services["haproxy"]
    assert proxy["image"].startswith("haproxy:")
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in proxy["volumes"]
    assert any(p.endswith(":8080") for p in proxy["ports"]) and "bind :8080" in cfg
    assert all(proxy["depends_on"][a]["condition"] == "service_healthy" for a in apps)


# ---------------------------------------------------------------------------------------------- real processes
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if HAPROXY is None:
        pytest.skip("haproxy is not installed (apt-get install -y haproxy)")
    r = Replicas(2, models_dir=tmp_path_factory.mktemp("models"), check_interval="1s",
                 workdir=tmp_path_factory.mktemp("replicas"))
    r.start()
    yield r
    r.stop()


def _browser_on(cluster, replica: str):
    """A browser whose cookie names ``replica`` (as if the balancer had chosen it)."""
    from bench.load import Browser
    b = Browser(cluster.url)
    b.cookies["SERVERID"] = replica
    b._request("/_stcore/health")  # Streamlit's XSRF cookie, from that replica
    return b


@pytest.mark.slow
def test_bench_load_through_the_balancer(capsys):
    """bench.load --replicas 2, small: sessions, an upload and a training run, all through HAProxy."""
    if HAPROXY is None:
        pytest.skip("haproxy is not installed (apt-get install -y haproxy)")
    from bench.load import run_load, summary_json
    r = run_load(sessions=4, reruns=1, train=True, replicas=2, uploads=1)
    with capsys.disabled():
        print(f"\n[replicas] sessions per replica {r['served_by']}, uploads {r['uploads_by']}, "
              f"training on {r['trainer_replica']}")
    assert not r["errors"], r["errors"][:5]  # every session answered by its cookie's replica, the upload read back,
    # and the training session, reconnecting with its cookie and id, found its run on its replica
    assert r["replicas_used"] == 2 and set(r["served_by"]) == {"app1", "app2"}
    assert sum(r["served_by"].values()) == 4 and r["uploads"] == 1 and r["trainer_replica"] in ("app1", "app2")
    assert r["model_unchanged"]
    line = summary_json(r)
    assert line["replicas_used"] == 2 and line["errors"] == 0 and line["uploads"] == 1


@pytest.mark.slow
def test_a_browser_stays_on_its_replica(cluster):
    from bench.load import Browser
    seen = set()
    for _ in range(8):  # new browsers are spread over both replicas: both show up within a few
        if seen == set(cluster.servers):
            break
        b = Browser(cluster.url)
        replica = b.visit()
        assert replica in cluster.servers
        seen.add(replica)
        for _ in range(3):
            _, headers = b._request("/")
            assert headers["X-Served-By"] == replica and "SERVERID" not in (headers.get("Set-Cookie") or "")
        s = b.session()
        try:
            s.run("attention")
            assert s.served_by == replica and not s.exceptions
        finally:
            s.close()
    assert seen == set(cluster.servers)


@pytest.mark.slow
def test_an_upload_reaches_only_the_replica_that_holds_the_session(cluster):
    """Why the cookie: the upload URL names a session that exists on one replica only; the other refuses it."""
    b = _browser_on(cluster, "app1")
    s = b.session()
    try:
        s.run("training")
        s.run("training", {s.widget_id("radio", "Train on"): "Upload a .txt file"})
        urls = s.file_urls("notes.txt")
        elsewhere = _browser_on(cluster, "app2")
        with pytest.raises(RuntimeError, match="HTTP 400"):
            elsewhere.upload(urls.upload_url, "notes.txt", b"to be or not to be\n")
        assert b.upload(urls.upload_url, "notes.txt", b"to be or not to be\n") == "app1"
    finally:
        s.close()


@pytest.mark.slow
def test_every_replica_sees_the_shared_models_folder(cluster):
    import torch

    from core.nn.model_store import save_checkpoint
    from core.nn.config import ModelConfig
    from core.nn.model import Transformer
    from core.nn.tokenizer import CharTokenizer
    tok = CharTokenizer.from_text("a class gallery\n")
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, n_ctx=16, d_model=16, n_heads=2, n_layers=1))
    save_checkpoint(cluster.models_dir / "class-gallery", model, tok)
    for replica in ("app1", "app2"):
        s = _browser_on(cluster, replica).session()
        try:
            s.run("attention")
            picker = next(el.selectbox for el in s.elements if el.WhichOneof("type") == "selectbox"
                          and el.selectbox.id.endswith("te_model_name"))
            assert any("class-gallery" in o for o in picker.options), (replica, list(picker.options))
        finally:
            s.close()


@pytest.mark.slow
def test_a_replica_that_stops_is_taken_out_of_the_pool(cluster):
    """Runs last in this module: HAProxy's health check on /_stcore/health takes app2 out; a browser whose
    cookie names app2 is sent to app1 and gets a working session there."""
    cluster.stop_replica("app2")
    wait_until(lambda: cluster.states()["app2"] == "DOWN", timeout=120, every=0.5)  # HAProxy notices
    assert cluster.states()["app1"] == "UP"
    b = _browser_on(cluster, "app2")
    s = b.session()
    try:
        s.run("attention")
        assert s.served_by == "app1" and not s.exceptions
    finally:
        s.close()
