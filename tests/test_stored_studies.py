"""Studies stored by an earlier release still open: read as that release read them, reported, shown by `best`,
exported, served by the dashboard and resumed (tests/studies/v0_1_0: made by autotune 0.1.0, SQLite and journal)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from wsgiref.simple_server import make_server

import optuna
import pytest
import requests

from autotune import config
from autotune.cli import app as cli
from autotune.observe import dashboard
from autotune.spec import StudyRecord, TrialRecord
from autotune.study import make_storage
from tests.studies.v0_1_0 import make as v0_1_0

KINDS = list(v0_1_0.FILES)
READ_BY_0_1_0 = json.loads((v0_1_0.HERE / "read.json").read_text())


def _stored(url: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="v0_1_0", storage=make_storage(v0_1_0.config_for(url))).get_trials()


def _as_read_now(read: dict) -> dict:
    """What 0.1.0 read, with the changes made on purpose since (each in CHANGELOG.md), and nothing else:
    - a TrialSummary has `recipe` (issue 41): what a trial left to the user's code; {} for every 0.1.0 trial;
    - and `fixed_not_applied` (issue 41): settings fixed in `train:` the trial could not apply; {} for 0.1.0's;
    - the export fixes every setting the trial searched, even at the catalogue's default (issue 41: left unset, the
      user's code would decide it again), and writes `study.candidates` at today's default, `auto` (issue 42)."""
    now = json.loads(json.dumps(read))
    for t in now["trials"]:
        t["recipe"] = {}
        t["fixed_not_applied"] = {}
    export = now["export"]
    export["study"]["candidates"] = "auto"
    best = next(t for t in now["trials"] if t["number"] == now["best"])
    export["train"] = {**best["params"], **export["train"]}
    return now


@pytest.mark.parametrize("kind", KINDS)
def test_a_study_stored_by_0_1_0_reads_as_0_1_0_read_it(tmp_path: Path, kind: str) -> None:
    """Every trial's TrialSummary, the recommended trial and its export, what `run` and `best` print, the report's
    data: the same as autotune 0.1.0 read them from the same files, but for the changes made on purpose since."""
    assert v0_1_0.read(v0_1_0.copy(kind, tmp_path)) == _as_read_now(READ_BY_0_1_0[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_a_study_stored_by_0_1_0_reports_exports_and_resumes(tmp_path: Path, kind: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    url = v0_1_0.copy(kind, tmp_path)
    run_file = tmp_path / "study.yaml"
    run_file.write_text((v0_1_0.HERE / "study.yaml").read_text())
    before = _stored(url)
    assert [t.state.name for t in before].count("FAIL") == 1 and any(t.state.name == "PRUNED" for t in before)

    # the report from the YAML, and from the storage alone (the config the study stored)
    assert cli.main(["report", str(run_file), "--storage", url, "-o", str(tmp_path / "a.html")]) == 0
    assert cli.main(["report", "v0_1_0", "--storage", url, "-o", str(tmp_path / "b.html")]) == 0
    for page in ("a.html", "b.html"):
        assert "Pareto" in (tmp_path / page).read_text()
    best = READ_BY_0_1_0[kind]["best"]
    capsys.readouterr()
    assert cli.main(["best", str(run_file), "--storage", url, "--export", str(tmp_path / "best.yaml")]) == 0
    assert f"Recommended configuration (trial {best}," in capsys.readouterr().out

    # the export runs (as a new study beside it): one trial, with the recommended trial's settings and seed
    exported = config.load(tmp_path / "best.yaml")
    assert exported.study.trial_seed == before[best].user_attrs["seed"] and not exported.space
    assert cli.main(["run", str(tmp_path / "best.yaml"), "--storage", url, "--plain"]) == 0
    ran = optuna.load_study(study_name="v0_1_0-best", storage=make_storage(exported)).trials
    assert [t.state.name for t in ran if t.state.is_finished()] == ["COMPLETE"]  # (the export keeps warm_start:
    # a second trial is left queued)

    # resumed: two more finished trials, the stored ones as they were
    finished = sum(t.state.name in ("COMPLETE", "PRUNED") for t in before)
    assert cli.main(["run", str(run_file), "--storage", url, "--n-trials", str(finished + 2), "--plain"]) == 0
    after = _stored(url)
    assert sum(t.state.name in ("COMPLETE", "PRUNED") for t in after) == finished + 2
    assert [(t.state, t.values, t.params, t.user_attrs) for t in after[:len(before)]] == \
        [(t.state, t.values, t.params, t.user_attrs) for t in before]
    # every stored key, 0.1.0's and this release's, is a field of the trial's record or a metric (of the study's
    # record, or a probe reading): read back whole
    for t in after:
        assert TrialRecord.of(t).attrs() == t.user_attrs, t.number
    storage = make_storage(v0_1_0.config_for(url))
    for name in ("v0_1_0", "v0_1_0-earlier", "v0_1_0-best"):
        study = optuna.load_study(study_name=name, storage=storage)
        assert StudyRecord.of(study).attrs() == study.user_attrs, name


@pytest.mark.parametrize("kind", KINDS)
def test_the_dashboard_serves_a_study_stored_by_0_1_0_with_its_attrs(tmp_path: Path, kind: str) -> None:
    url = v0_1_0.copy(kind, tmp_path)
    stored = _stored(url)
    storage = make_storage(v0_1_0.config_for(url))
    server = make_server("127.0.0.1", 0, dashboard.make_app(storage))  # the real optuna-dashboard app, over HTTP
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        studies = requests.get(f"{base}/api/studies", timeout=60).json()["study_summaries"]
        study_id = next(s["study_id"] for s in studies if s["study_name"] == "v0_1_0")
        served = requests.get(f"{base}/api/studies/{study_id}", timeout=60).json()["trials"]
    finally:
        server.shutdown()
        server.server_close()
    assert [t["number"] for t in served] == [t.number for t in stored]
    for t, s in zip(stored, served):
        attrs = {a["key"]: a["value"] for a in s["user_attrs"]}
        assert set(attrs) == set(t.user_attrs) == set(TrialRecord.of(t).attrs()), t.number
        assert attrs["seed"] == str(t.user_attrs["seed"]) and attrs["device"] == t.user_attrs["device"]
