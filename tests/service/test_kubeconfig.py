"""Which kubeconfig `serve --watch-k8s` reads without `--kubeconfig` (docs/kubernetes.md): outside a
pod, `$KUBECONFIG`'s files as kubectl reads the variable — a list of paths, empty entries skipped,
the files that exist merged — and ~/.kube/config when it names none (unset or empty)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from a3fast.service.k8s_watch import KubeConfigError, kubeconfig_files, load_client_configuration  # noqa: E402

CLUSTERS = ("clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n"
            "users:\n- name: u\n  user:\n    token: t\n")
CONTEXTS = "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"


def _config(path: Path, *parts: str, port: int = 6443) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("apiVersion: v1\nkind: Config\n" + "".join(parts).format(port=port))
    return path


@pytest.fixture
def outside_a_pod(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.mark.parametrize("variable", [None, "", os.pathsep, os.pathsep * 2])
def test_a_kubeconfig_variable_that_names_no_file_means_the_home_config(outside_a_pod, monkeypatch, variable):
    _config(outside_a_pod / "home" / ".kube" / "config", CLUSTERS, CONTEXTS, port=7001)
    if variable is None:
        monkeypatch.delenv("KUBECONFIG", raising=False)
    else:
        monkeypatch.setenv("KUBECONFIG", variable)
    assert load_client_configuration(None).host == "http://127.0.0.1:7001"


def test_a_missing_file_of_the_variable_is_skipped(outside_a_pod, monkeypatch):
    real = _config(outside_a_pod / "real", CLUSTERS, CONTEXTS, port=7002)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(outside_a_pod / "missing"), "", str(real)]))
    assert load_client_configuration(None).host == "http://127.0.0.1:7002"


def test_the_files_of_the_variable_are_merged(outside_a_pod, monkeypatch):
    contexts = _config(outside_a_pod / "contexts", CONTEXTS)
    clusters = _config(outside_a_pod / "clusters", CLUSTERS, port=7003)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(contexts), str(clusters)]))
    assert load_client_configuration(None).host == "http://127.0.0.1:7003"


def test_no_file_named_is_named_in_the_refusal(outside_a_pod, monkeypatch):
    one, two = outside_a_pod / "one", outside_a_pod / "two"
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(one), str(two)]))
    with pytest.raises(KubeConfigError, match=f"not running in a pod, and {one}, {two} do not exist"):
        load_client_configuration(None)
    monkeypatch.setenv("KUBECONFIG", "")
    with pytest.raises(KubeConfigError, match=r"home/\.kube/config does not exist"):
        load_client_configuration(None)


def test_the_variable_is_read_as_kubectl_reads_it():
    assert kubeconfig_files("a" + os.pathsep + os.pathsep + "b") == [Path("a"), Path("b")]
    assert kubeconfig_files("") == kubeconfig_files(None) == [Path(os.path.expanduser("~/.kube/config"))]
