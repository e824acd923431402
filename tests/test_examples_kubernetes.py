"""examples/kubernetes: every manifest is valid against the Kubernetes API schemas (kubernetes-validate ships
them: offline), the ConfigMap's study passes `autotune validate`, and each pod runs a real autotune command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from autotune import config
from autotune.cli import app as cli
from autotune.core.errors import redact
from autotune.study import runner as study_mod
from tests.support import ROOT

FOLDER = ROOT / "examples" / "kubernetes"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FOLDER / name).read_text()) if d]


def by_kind(kind: str, name: str) -> dict[str, Any]:
    found = [d for f in ("postgres.yaml", "workers.yaml") for d in docs(f)
             if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


@pytest.mark.parametrize("name", ["postgres.yaml", "workers.yaml"])
def test_manifests_pass_the_kubernetes_schema(name: str) -> None:
    for doc in docs(name):
        try:
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
        except kubernetes_validate.ValidationError as e:  # its message quotes the whole schema: keep the reason
            pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']}: {str(e).splitlines()[0]}")


def test_the_configmaps_study_validates(tmp_path: Path) -> None:
    text = by_kind("ConfigMap", "autotune-study")["data"]["study.yaml"]
    path = tmp_path / "study.yaml"
    path.write_text(text)
    # the cluster's PostgreSQL is not here: the same study on a local SQLite file
    cfg = config.load(path, {"study.storage": f"sqlite:///{tmp_path}/k.db"})
    study_mod.validate(cfg)
    assert cfg.study.name == "cnn-digits" and cfg.study.heartbeat_interval  # a killed pod's trial is seen
    stored = yaml.safe_load(text)["study"]["storage"]
    assert redact(stored) == stored  # no password in a ConfigMap: it comes from the Secret


def _container(job: str) -> dict[str, Any]:
    (container,) = by_kind("Job", job)["spec"]["template"]["spec"]["containers"]
    return container


def _parsed(command: list[str]) -> Any:
    assert command[0] == "autotune"
    return cli.build_parser().parse_args(command[1:])  # exits (SystemExit) on an unknown command or option


def test_the_pods_run_real_autotune_commands_on_the_secrets_url() -> None:
    workers = by_kind("Job", "autotune-workers")["spec"]
    assert workers["completionMode"] == "Indexed" and workers["parallelism"] <= workers["completions"]
    worker = _container("autotune-workers")
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    args = _parsed(worker["command"])
    study = yaml.safe_load(by_kind("ConfigMap", "autotune-study")["data"]["study.yaml"])["study"]
    assert args.command == "worker" and args.study == study["name"] and args.storage == "$(AUTOTUNE_STORAGE)"
    create = _container("autotune-study")
    args = _parsed(create["command"])
    assert args.command == "launch" and args.executor == "none" and args.storage == "$(AUTOTUNE_STORAGE)"
    mount = create["volumeMounts"][0]["mountPath"]
    assert args.file == f"{mount}/study.yaml"
    secret = by_kind("Secret", "autotune-db")
    for container in (worker, create):  # $(AUTOTUNE_STORAGE) is the Secret's url
        (var,) = [e for e in container["env"] if e["name"] == "AUTOTUNE_STORAGE"]
        ref = var["valueFrom"]["secretKeyRef"]
        assert ref["name"] == "autotune-db" and ref["key"] in secret["stringData"]
    assert secret["stringData"]["url"].startswith("postgresql://") and "@autotune-db:5432/" in \
        secret["stringData"]["url"]
    service = by_kind("Service", "autotune-db")
    assert service["spec"]["ports"][0]["port"] == 5432
