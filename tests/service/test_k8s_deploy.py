"""deploy/ checked offline: every manifest against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict) and the official client's models; the KubeSchedulerConfiguration
field by field against kubescheduler.config.k8s.io/v1; the pieces consistent with each other and
with `a3fast serve`; the certificates recipe run; the Dockerfile parsed and linted. No cluster and
no image build run here (docs/kubernetes.md says which steps these machines cannot take)."""
from __future__ import annotations

import json
import os
import re
import shlex
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("starlette")
pytest.importorskip("kubernetes")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

from kubernetes.client import ApiClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: The Kubernetes version whose schemas the manifests are held to (the oldest the kit supports
#: would be better; kubernetes-validate ships strict schemas from 1.24 on).
K8S_VERSION = "1.30.0"
MODELS = {"Namespace": "V1Namespace", "PersistentVolumeClaim": "V1PersistentVolumeClaim",
          "Deployment": "V1Deployment", "Service": "V1Service", "Pod": "V1Pod", "ServiceAccount": "V1ServiceAccount",
          "ClusterRole": "V1ClusterRole", "ClusterRoleBinding": "V1ClusterRoleBinding", "Role": "V1Role",
          "RoleBinding": "V1RoleBinding", "ConfigMap": "V1ConfigMap", "PodDisruptionBudget": "V1PodDisruptionBudget",
          "CustomResourceDefinition": "V1CustomResourceDefinition"}


def _documents() -> list[tuple[Path, dict]]:
    out = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                out.append((path, doc))
    return out


def _kind(kind: str, name: str | None = None) -> list[dict]:
    return [d for _, d in _documents() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def _one(kind: str, name: str | None = None) -> dict:
    (found,) = _kind(kind, name)
    return found


# -- every manifest against the schemas -------------------------------------------------------------
def test_every_builtin_manifest_is_valid_against_the_openapi_schemas_and_the_client_models():
    api = ApiClient()
    seen = set()
    for path, doc in _documents():
        kind = doc["kind"]
        if kind not in MODELS:
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        model = api.deserialize(json.dumps(doc), MODELS[kind], "application/json")
        # the model gives back what the file says: no field was dropped as unknown
        assert api.sanitize_for_serialization(model) == doc, f"{path.name}: {kind} {doc['metadata']['name']}"
        seen.add(kind)
    assert seen == set(MODELS)
    kinds = {d["kind"] for _, d in _documents()}
    assert kinds - set(MODELS) == {"KubeSchedulerConfiguration", "AgentDeclaration", "Issuer", "Certificate"}


def test_a_manifest_with_an_unknown_field_is_refused():
    """The check can fail: strict schemas refuse a field Kubernetes does not know."""
    deployment = _one("Deployment", "a3fast")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_the_example_agent_declaration_is_valid_against_its_crd_and_read_as_served():
    import jsonschema

    from a3fast.service.k8s_watch import read_declaration_object

    crd = _one("CustomResourceDefinition")
    example = _one("AgentDeclaration")
    (version,) = crd["spec"]["versions"]
    assert example["apiVersion"] == f"{crd['spec']['group']}/{version['name']}"
    jsonschema.validate(example, version["schema"]["openAPIV3Schema"])
    claim = read_declaration_object(example)
    assert claim.problem is None and claim.name == "gpu-node-1"
    assert claim.declaration.agent.namespace == "support"


CERTIFICATE_SPEC = {"secretName", "commonName", "dnsNames", "usages", "duration", "renewBefore", "privateKey",
                    "issuerRef", "isCA"}


def test_the_cert_manager_set_uses_only_cert_manager_v1_fields():
    for issuer in _kind("Issuer"):
        assert issuer["apiVersion"] == "cert-manager.io/v1" and set(issuer["spec"]) in ({"selfSigned"}, {"ca"})
    for cert in _kind("Certificate"):
        assert cert["apiVersion"] == "cert-manager.io/v1"
        assert set(cert["spec"]) <= CERTIFICATE_SPEC and {"secretName", "issuerRef"} <= set(cert["spec"])
        assert cert["spec"]["issuerRef"]["name"] in {i["metadata"]["name"] for i in _kind("Issuer")}
        assert set(cert["spec"].get("usages", [])) <= {"server auth", "client auth", "digital signature",
                                                       "key encipherment", "cert sign"}


# -- the KubeSchedulerConfiguration, field by field ------------------------------------------------
# kubescheduler.config.k8s.io/v1 (k8s.io/kube-scheduler/config/v1/types.go): each type's JSON fields
# and what each holds; a nested dict is a struct, [x] a list of x.
DURATION = "duration"
LEADER_ELECTION = {"leaderElect": bool, "leaseDuration": DURATION, "renewDeadline": DURATION,
                   "retryPeriod": DURATION, "resourceLock": str, "resourceName": str, "resourceNamespace": str}
CLIENT_CONNECTION = {"kubeconfig": str, "acceptContentTypes": str, "contentType": str, "qps": float, "burst": int}
PLUGIN = {"name": str, "weight": int}
PLUGIN_SET = {"enabled": [PLUGIN], "disabled": [PLUGIN]}
PLUGINS = {k: PLUGIN_SET for k in ("preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
                                    "reserve", "permit", "preBind", "bind", "postBind", "multiPoint")}
PROFILE = {"schedulerName": str, "percentageOfNodesToScore": int, "plugins": PLUGINS,
           "pluginConfig": [{"name": str, "args": dict}]}
EXTENDER = {"urlPrefix": str, "filterVerb": str, "preemptVerb": str, "prioritizeVerb": str, "weight": int,
            "bindVerb": str, "enableHTTPS": bool,
            "tlsConfig": {"insecure": bool, "serverName": str, "certFile": str, "keyFile": str, "caFile": str,
                          "certData": str, "keyData": str, "caData": str},
            "httpTimeout": DURATION, "nodeCacheCapable": bool,
            "managedResources": [{"name": str, "ignoredByScheduler": bool}], "ignorable": bool}
KUBE_SCHEDULER_CONFIGURATION = {
    "apiVersion": str, "kind": str, "parallelism": int, "leaderElection": LEADER_ELECTION,
    "clientConnection": CLIENT_CONNECTION, "enableProfiling": bool, "enableContentionProfiling": bool,
    "percentageOfNodesToScore": int, "podInitialBackoffSeconds": int, "podMaxBackoffSeconds": int,
    "profiles": [PROFILE], "extenders": [EXTENDER], "delayCacheUntilActive": bool}
_GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def _check_fields(value, schema, where: str) -> list[str]:
    """Where `value` is not what the v1 type `schema` holds."""
    if isinstance(schema, dict) and schema is not dict:
        if not isinstance(value, dict):
            return [f"{where}: expected an object"]
        problems = [f"{where}.{k}: not a field of the v1 type" for k in value if k not in schema]
        for k, v in value.items():
            if k in schema:
                problems += _check_fields(v, schema[k], f"{where}.{k}")
        return problems
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{where}: expected a list"]
        return [p for k, item in enumerate(value) for p in _check_fields(item, schema[0], f"{where}[{k}]")]
    if schema == DURATION:
        return [] if isinstance(value, str) and _GO_DURATION.match(value) else [f"{where}: expected a Go duration"]
    if schema is float:
        return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else [f"{where}: expected a number"]
    if schema is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{where}: expected an integer"]
    return [] if isinstance(value, schema) else [f"{where}: expected {schema.__name__}"]


def _scheduler_configurations() -> list[tuple[str, dict]]:
    found = [(p.name, d) for p, d in _documents() if d["kind"] == "KubeSchedulerConfiguration"]
    config_map = _one("ConfigMap", "a3fast-scheduler-config")
    found += [("ConfigMap a3fast-scheduler-config", yaml.safe_load(text)) for text in config_map["data"].values()]
    return found


def test_each_kube_scheduler_configuration_is_v1_field_by_field():
    configurations = _scheduler_configurations()
    assert len(configurations) == 3
    for where, config in configurations:
        assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1" and config["kind"] == "KubeSchedulerConfiguration"
        assert _check_fields(config, KUBE_SCHEDULER_CONFIGURATION, where) == []
        # the validation kube-scheduler runs (pkg/scheduler/apis/config/validation)
        names = [p["schedulerName"] for p in config["profiles"]]
        assert all(names) and len(set(names)) == len(names)
        for extender in config["extenders"]:
            assert extender["weight"] > 0 and extender["urlPrefix"]
            assert extender["enableHTTPS"] == extender["urlPrefix"].startswith("https://")
        assert sum("bindVerb" in e for e in config["extenders"]) <= 1


def test_the_field_check_can_fail():
    config = _scheduler_configurations()[0][1]
    config["extenders"][0]["nodeCacheCapabl"] = True
    config["extenders"][0]["httpTimeout"] = "5 seconds"
    config["profiles"][0]["percentageOfNodesToScore"] = "50"
    assert len(_check_fields(config, KUBE_SCHEDULER_CONFIGURATION, "$")) == 3


def test_the_scheduler_config_map_holds_deploy_kube_scheduler_config():
    text = (DEPLOY / "kube-scheduler-config.yaml").read_text()
    (held,) = _one("ConfigMap", "a3fast-scheduler-config")["data"].values()
    assert held == text[text.index("apiVersion:"):]


def test_the_option_replaces_the_default_profile_and_changes_nothing_else():
    second = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    option = yaml.safe_load((DEPLOY / "options" / "replace-default-profile.yaml").read_text())
    # the A3 pods' profile offers a3fast every feasible node: kube-scheduler otherwise asks its
    # extenders about a sample, which in a large cluster may hold no agent that matches
    assert second["profiles"] == [{"schedulerName": "a3fast", "percentageOfNodesToScore": 100}]
    assert "leaderElection" in second
    assert option["profiles"] == [{"schedulerName": "default-scheduler"}] and "leaderElection" not in option
    assert option["extenders"] == second["extenders"]
    # given --config, kube-scheduler ignores --kubeconfig: the file names kubeadm's own
    assert option["clientConnection"] == {"kubeconfig": "/etc/kubernetes/scheduler.conf"}
    assert "clientConnection" not in second       # a pod of its own: the in-cluster service account


# -- the pieces fit together -------------------------------------------------------------------------
def _a3fast_container() -> dict:
    (container,) = _one("Deployment", "a3fast")["spec"]["template"]["spec"]["containers"]
    return container


def _args(container) -> dict[str, str]:
    return dict(a.split("=", 1) if "=" in a else (a, "") for a in container["args"][1:])


def test_a3fast_runs_two_replicas_that_roll_without_losing_an_answer():
    deployment = _one("Deployment", "a3fast")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pdb = _one("PodDisruptionBudget", "a3fast")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    container = _a3fast_container()
    assert {"cpu", "memory"} <= set(container["resources"]["requests"]) and "memory" in container["resources"]["limits"]
    probes = {k: container[k]["httpGet"] for k in ("livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/healthz" and probes["readinessProbe"]["path"] == "/readyz"
    assert all(p["scheme"] == "HTTPS" and p["port"] == container["ports"][0]["name"] for p in probes.values())


def test_a3fast_runs_as_nobody_in_particular():
    pod = _one("Deployment", "a3fast")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    context = _a3fast_container()["securityContext"]
    assert context == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                       "capabilities": {"drop": ["ALL"]}}
    # the only writable places are mounted volumes: the traces and /tmp
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in _a3fast_container()["volumeMounts"]}
    assert [p for p, ro in mounts.items() if not ro] == ["/var/lib/a3fast/traces", "/tmp"]


def test_rbac_is_list_and_watch_of_nodes_and_agentdeclarations_and_create_of_events_only():
    role = _one("ClusterRole", "a3fast")
    rules = sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"]))) for r in role["rules"])
    assert rules == [(("",), ("events",), ("create",)), (("",), ("nodes",), ("list", "watch")),
                     (("a3.dev",), ("agentdeclarations",), ("list", "watch"))]
    binding = _one("ClusterRoleBinding", "a3fast")
    (subject,) = binding["subjects"]
    pod = _one("Deployment", "a3fast")["spec"]["template"]["spec"]
    assert binding["roleRef"]["name"] == "a3fast" and subject["name"] == pod["serviceAccountName"]
    assert [r for r in _kind("Role") + _kind("ClusterRole") if r["metadata"]["name"].startswith("a3fast")
            and r["metadata"]["name"] != "a3fast"] == [_one("Role", "a3fast-scheduler-lease")]


def test_each_replica_writes_its_own_trace_named_by_its_pod():
    container = _a3fast_container()
    (env,) = container["env"]
    assert env == {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    args = _args(container)
    assert args["--trace"] == "/var/lib/a3fast/traces/trace-$(POD_NAME).jsonl"
    assert "--watch-k8s" in args and "--state" not in args and "--fleet" not in args


def test_the_deployment_args_are_options_serve_takes():
    from a3fast.cli.serve_cmd import serve

    args = _a3fast_container()["args"]
    assert args[0] == "serve"
    context = serve.make_context("serve", [a.replace("$(POD_NAME)", "a3fast-0") for a in args[1:]])
    assert context.params["watch_k8s"] is True and context.params["host"] == "0.0.0.0"


def test_the_scheduler_reaches_a3fast_and_a3fast_knows_the_scheduler():
    from a3fast.service.app import create_app

    import httpx

    service, container = _one("Service", "a3fast"), _a3fast_container()
    config = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    (extender,) = config["extenders"]
    url = httpx.URL(extender["urlPrefix"])
    assert url.host == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert url.port == service["spec"]["ports"][0]["port"]
    assert service["spec"]["selector"] == _one("Deployment", "a3fast")["spec"]["template"]["metadata"]["labels"]
    assert int(_args(container)["--port"]) == container["ports"][0]["containerPort"]
    routes = {getattr(r, "path", None) for r in create_app().routes}
    assert {f"{url.path}/{extender['filterVerb']}", f"{url.path}/{extender['prioritizeVerb']}"} <= routes
    assert "bindVerb" not in extender and extender["nodeCacheCapable"] is True and extender["ignorable"] is False
    # the example pod chooses the second scheduler and asks for the managed resource
    pod = _one("Pod")
    assert pod["spec"]["schedulerName"] == config["profiles"][0]["schedulerName"] == "a3fast"
    (managed,) = extender["managedResources"]
    assert managed["ignoredByScheduler"] is True and managed["name"] in pod["spec"]["containers"][0]["resources"]["limits"]
    # the scheduler mounts its client certificate where tlsConfig reads it
    (scheduler,) = _one("Deployment", "a3fast-scheduler")["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in scheduler["volumeMounts"]}
    volumes = {v["name"]: v for v in _one("Deployment", "a3fast-scheduler")["spec"]["template"]["spec"]["volumes"]}
    for key, file in (("certFile", "tls.crt"), ("keyFile", "tls.key"), ("caFile", "ca.crt")):
        assert extender["tlsConfig"][key] == f"{mounts['client']}/{file}"
    assert volumes["client"]["secret"]["secretName"] == "a3fast-scheduler-client"
    assert any(a == f"--config={mounts['config']}/kube-scheduler-config.yaml" for a in scheduler["command"])


def test_the_secrets_mounted_are_the_ones_the_certificates_recipes_make():
    container = _a3fast_container()
    pod = _one("Deployment", "a3fast")["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    args = _args(container)
    used = {}
    for flag in ("--tls-cert", "--tls-key", "--tls-client-ca", "--token-file"):
        path = Path(args[flag])
        used.setdefault(secrets[mounts[str(path.parent)]], set()).add(path.name)
    assert used == {"a3fast-tls": {"tls.crt", "tls.key", "ca.crt"}, "a3fast-token": {"token"}}
    made = {c["spec"]["secretName"] for c in _kind("Certificate")}
    assert made == {"a3fast-ca", "a3fast-tls", "a3fast-scheduler-client"}
    script = (DEPLOY / "certificates" / "make-certificates.sh").read_text()
    for secret in ("a3fast-tls", "a3fast-scheduler-client", "a3fast-token"):
        assert f"create secret generic {secret} " in script


# -- the certificates recipe, run ---------------------------------------------------------------------
def _server_names() -> set[str]:
    return set(_one("Certificate", "a3fast-tls")["spec"]["dnsNames"])


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("certificates") / "made"
    done = subprocess.run(["sh", str(DEPLOY / "certificates" / "make-certificates.sh"), str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def test_the_openssl_script_makes_the_certificates_cert_manager_would(made):
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    out, commands = made
    server = x509.load_pem_x509_certificate((out / "server.crt").read_bytes())
    client = x509.load_pem_x509_certificate((out / "client.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    names = set(server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName))
    assert names == _server_names()
    assert server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    assert client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    assert server.issuer == client.issuer == ca.subject
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "client.crt", "client.key", "server.crt",
                                                     "server.key", "token"]
    lines = [shlex.split(line) for line in commands.splitlines()]
    assert [line[6] for line in lines] == ["a3fast-tls", "a3fast-scheduler-client", "a3fast-token"]
    assert all(line[:6] == ["kubectl", "-n", "a3fast-system", "create", "secret", "generic"] for line in lines)
    # each creates its Secret or updates it in place: --apply runs again without AlreadyExists
    assert all(line[-8:] == ["--dry-run=client", "-o", "yaml", "|", "kubectl", "apply", "-f", "-"] for line in lines)


def _make_certificates(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(DEPLOY / "certificates" / "make-certificates.sh"), *args],
                          capture_output=True, text=True, timeout=120, env=env)


def test_running_the_script_again_renews_from_the_same_ca_and_token(tmp_path):
    # it made a new CA (and token) every time, so the renewal the docs describe, "with the same
    # CA", could not be done: every client trusting the old CA refused the renewed a3fast
    from cryptography import x509

    out = tmp_path / "a dir's name"
    assert _make_certificates(str(out)).returncode == 0
    before = {name: (out / name).read_bytes() for name in ("ca.crt", "ca.key", "token", "server.crt", "client.crt")}
    assert _make_certificates(str(out)).returncode == 0
    after = {name: (out / name).read_bytes() for name in before}
    assert after["ca.crt"] == before["ca.crt"] and after["ca.key"] == before["ca.key"]
    assert after["token"] == before["token"]
    assert after["server.crt"] != before["server.crt"] and after["client.crt"] != before["client.crt"]
    ca = x509.load_pem_x509_certificate(after["ca.crt"])
    for name in ("server.crt", "client.crt"):
        x509.load_pem_x509_certificate(after[name]).verify_directly_issued_by(ca)
    assert _make_certificates("--new-ca", str(out)).returncode == 0
    assert (out / "ca.crt").read_bytes() != before["ca.crt"] and (out / "token").read_bytes() == before["token"]
    x509.load_pem_x509_certificate((out / "server.crt").read_bytes()).verify_directly_issued_by(
        x509.load_pem_x509_certificate((out / "ca.crt").read_bytes()))
    refused = _make_certificates("--renew", str(out))
    assert refused.returncode == 2 and "unknown option --renew" in refused.stderr


def test_apply_runs_again_over_the_secrets_it_made(tmp_path):
    # `kubectl create secret` failed with AlreadyExists on the second --apply
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    kubectl = bin_dir / "kubectl"
    # a kubectl that keeps Secrets as the API server does: create refuses one that exists, a
    # client-side dry run prints the object, apply creates or updates it
    kubectl.write_text(f"""#!{sys.executable}
import sys, pathlib
args, store = sys.argv[1:], pathlib.Path({str(secrets)!r})
if "apply" in args:
    text = sys.stdin.read()
    name = text.split("name: ")[1].split()[0]
    (store / name).write_text(text)
    print(f"secret/{{name}} configured")
elif "create" in args:
    name = args[args.index("generic") + 1]
    if "--dry-run=client" in args:
        files = [a.split("=", 2)[2] for a in args if a.startswith("--from-file=")]
        print("apiVersion: v1\\nkind: Secret\\nmetadata:\\n  name: " + name + "\\ndata: " + repr([open(f).read()[:40] for f in files]))
    elif (store / name).exists():
        sys.exit(f'Error from server (AlreadyExists): secrets "{{name}}" already exists')
    else:
        (store / name).write_text("created")
""")
    kubectl.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = tmp_path / "certs"
    for _ in range(2):
        done = _make_certificates("--apply", str(out), env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("configured") == 3
    assert sorted(p.name for p in secrets.iterdir()) == ["a3fast-scheduler-client", "a3fast-tls", "a3fast-token"]


def test_the_scheduler_certificate_reaches_a3fast_over_mtls_by_the_service_name(made):
    """a3fast served with the script's files; kube-scheduler's side presents the client certificate
    and checks the server's against the Service name it calls (connected to 127.0.0.1)."""
    from service_process import Server

    out, _ = made
    s = Server("--tls-cert", str(out / "server.crt"), "--tls-key", str(out / "server.key"),
               "--tls-client-ca", str(out / "ca.crt"), ready=False)
    try:
        port = int(s.url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(out / "ca.crt"))
        context.load_cert_chain(str(out / "client.crt"), str(out / "client.key"))
        deadline_answer = b""
        for _ in range(100):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname="a3fast.a3fast-system.svc") as tls:
                    tls.sendall(b"POST /k8s/filter HTTP/1.1\r\nHost: a3fast.a3fast-system.svc\r\n"
                                b"Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
                    deadline_answer = b"".join(iter(lambda: tls.recv(65536), b""))
            if not deadline_answer.startswith(b"HTTP/1.1 503"):
                break
            __import__("time").sleep(0.1)
        # through TLS and the client certificate to the extender: {} is not ExtenderArgs
        assert deadline_answer.startswith(b"HTTP/1.1 400"), deadline_answer[:200]
    finally:
        s.stop()


# -- the Dockerfile -----------------------------------------------------------------------------------
def _dockerfile():
    dockerfile_parse = pytest.importorskip("dockerfile_parse")
    parser = dockerfile_parse.DockerfileParser(path=str(ROOT / "Dockerfile"))
    return parser


def _stages(parser) -> list[list[dict]]:
    stages: list[list[dict]] = []
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def test_the_dockerfile_builds_the_wheel_in_one_stage_and_runs_it_in_another():
    parser = _dockerfile()
    stages = _stages(parser)
    assert len(stages) == 2
    build, runtime = stages
    assert build[0]["value"].endswith(" AS build")
    assert any(i["instruction"] == "RUN" and "pip wheel" in i["value"] for i in build)
    copies = [i["value"] for i in runtime if i["instruction"] == "COPY"]
    assert copies == ["--from=build /wheels /wheels"]
    # the base images are pinned to a tag, never latest
    for stage in stages:
        image = stage[0]["value"].split()[0]
        assert ":" in image and not image.endswith(":latest")


def test_the_image_runs_as_a_user_that_is_not_root():
    runtime = _stages(_dockerfile())[-1]
    users = [i["value"] for i in runtime if i["instruction"] == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert users[-1].split(":")[0].isdigit()     # numeric, so runAsNonRoot can check it
    uid = users[-1].split(":")[0]
    pod = _one("Deployment", "a3fast")["spec"]["template"]["spec"]
    assert str(pod["securityContext"]["runAsUser"]) == uid
    assert any(i["instruction"] == "RUN" and f"--uid {uid}" in i["value"] for i in runtime)


def test_the_entrypoint_reaches_serve_with_options_it_takes():
    from a3fast.cli.serve_cmd import serve

    parser = _dockerfile()
    runtime = _stages(parser)[-1]
    entrypoint = [json.loads(i["value"]) for i in runtime if i["instruction"] == "ENTRYPOINT"][-1]
    command = [json.loads(i["value"]) for i in runtime if i["instruction"] == "CMD"][-1]
    assert entrypoint == ["a3fast"] and command[0] == "serve"
    serve.make_context("serve", command[1:])
    # the console script the entrypoint names is the package's
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["a3fast"] == "a3fast.cli:main"
    # what the wheel is built with exists, and so do the extras installed
    wheel = next(i["value"] for i in _stages(parser)[0] if "pip wheel" in i["value"])
    extras = re.search(r"\.\[([a-z0-9,]+)\]", wheel).group(1).split(",")
    assert set(extras) <= set(project["optional-dependencies"]) and "k8s" in extras


def test_the_dockerfile_lints_clean():
    """The usual lint rules (hadolint's DL3008/DL3009/DL3025/DL3042 in spirit): apt lists removed in
    the layer that made them, no pip cache, exec-form ENTRYPOINT and CMD, every COPY source present
    and let through .dockerignore, a WORKDIR before relative COPYs."""
    parser = _dockerfile()
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:] for line in ignored if line.startswith("!")}
    for stage in _stages(parser):
        workdir = False
        for i in stage:
            value = i["value"]
            if i["instruction"] == "WORKDIR":
                workdir = True
            if i["instruction"] == "RUN" and "apt-get install" in value:
                assert "--no-install-recommends" in value and "rm -rf /var/lib/apt/lists/*" in value
            if i["instruction"] == "RUN" and re.search(r"\bpip (install|wheel)\b", value):
                assert "--no-cache-dir" in value
            if i["instruction"] in ("ENTRYPOINT", "CMD"):
                assert isinstance(json.loads(value), list)
            if i["instruction"] == "COPY" and not value.startswith("--from="):
                *sources, _ = value.split()
                assert workdir
                for source in sources:
                    assert (ROOT / source).exists(), source
                    assert source.rstrip("/") in allowed, f"{source} is left out by .dockerignore"
