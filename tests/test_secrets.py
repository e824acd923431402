"""Storage passwords never surface: terminal, errors, the study's stored attrs, the HTML report, the exported
YAML, `autotune worker`. One function hides them (errors.redact); this checks it on every surface, against
a real PostgreSQL server and a user whose password is unique, so any leak is found by a plain search.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune import config
from autotune.cli import app as cli
from autotune.core.errors import ConfigError, redact
from autotune.study import runner as study_mod
from autotune.study import storage as storage_mod


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:hunter2@db:5432/x", "postgresql://u:***@db:5432/x"),
    ("postgresql+psycopg://u:hun@ter2@db/x", "postgresql+psycopg://u:***@db/x"),  # an unescaped @ in it
    ("mysql://u:@db/x", "mysql://u:***@db/x"),
    ("postgresql://db/x?user=u&password=hunter2&sslmode=require", "postgresql://db/x?user=u&password=***&sslmode=require"),
    ("postgresql://u@db/x", "postgresql://u@db/x"),  # nothing to hide
    ("postgresql://db:5432/x", "postgresql://db:5432/x"),
    ("sqlite:///studies/a.db", "sqlite:///studies/a.db"),
    ("journal:///studies/a.log", "journal:///studies/a.log"),
])
def test_redact_hides_the_password_and_keeps_the_rest(url: str, shown: str) -> None:
    assert redact(url) == shown
    assert redact(f"cannot reach {url}: refused; see also {url}") == f"cannot reach {shown}: refused; see also {shown}"


def test_errors_never_show_a_password(tmp_path: Path, capsys: Any) -> None:
    url = "postgresql://u:hunter2@127.0.0.1:1/db"  # nothing listens on port 1
    with pytest.raises(ConfigError) as info:
        storage_mod.make_storage(config.from_dict({"study": {"storage": url}}))
    assert "hunter2" not in str(info.value) and "u:***@127.0.0.1:1/db" in str(info.value)
    # Any ConfigError, whoever builds it; and the CLI for every AutotuneError.
    assert "hunter2" not in str(ConfigError("f.yaml", "study.storage", f"bad {url}"))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"study": {"storage": url}}))
    for argv in (["validate", str(tmp_path / "s.yaml")], ["worker", "--storage", url, "--study", "x"],
                 ["report", "--storage", url], ["dashboard", "--storage", url]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "hunter2" not in err and "u:***@127.0.0.1:1" in err, err


@pytest.fixture
def secret_url(postgres_url: str) -> Iterator[tuple[str, str]]:
    """(URL, password) of a fresh database owned by a fresh user with a password found nowhere else."""
    base = postgres_url  # the test server (conftest: skipped, or failed under AUTOTUNE_REQUIRE_POSTGRES)
    import psycopg

    plain = base.replace("postgresql+psycopg://", "postgresql://")
    tag = uuid.uuid4().hex[:10]
    user, password, db = f"autotune_s_{tag}", f"Pw{tag}Secret", f"autotune_s_{tag}"
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE USER \"{user}\" PASSWORD '{password}'")
        conn.execute(f'CREATE DATABASE "{db}" OWNER "{user}"')
    head, _, _ = plain.rpartition("/")
    host = head.rsplit("@", 1)[1]
    yield f"postgresql://{user}:{password}@{host}/{db}", password
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.execute(f'DROP USER IF EXISTS "{user}"')


@pytest.mark.postgres
def test_no_surface_shows_the_password(secret_url: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: Any) -> None:
    url, password = secret_url
    monkeypatch.chdir(tmp_path)
    run_file = tmp_path / "s.yaml"
    run_file.write_text(yaml.safe_dump({
        "study": {"name": "s", "storage": url, "n_trials": 1, "seed": 0}, "objectives": ["val_accuracy"],
        "model": {"name": "mlp", "hidden": 16}, "train": {"epochs": 1, "device": "cpu", "data_fraction": 0.3},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}}}))
    seen: list[str] = []

    def ok(argv: list[str]) -> None:
        rc = cli.main(argv)
        out = capsys.readouterr()
        assert rc == 0, out.err
        seen.append(out.out + out.err)

    ok(["validate", "s.yaml"])
    ok(["run", "s.yaml", "--plain"])
    ok(["best", "s.yaml", "--export", "best.yaml"])
    ok(["report", "s.yaml", "-o", "r.html"])
    # A worker gets the real URL from --storage; the study's stored copy is redacted, and joining still works.
    ok(["worker", "--storage", url, "--study", "s", "--n-trials", "2"])
    study = optuna.load_study(study_name="s", storage=storage_mod.make_storage(config.load(run_file)))
    assert len(study.get_trials(states=study_mod.FINISHED)) == 2
    assert any(":***@" in s for s in seen)  # the terminal names the storage, masked
    stored = json.dumps(study.user_attrs)
    assert ":***@" in study.user_attrs["config"]["study"]["storage"]
    exported = (tmp_path / "best.yaml").read_text()
    assert "storage" not in yaml.safe_load(exported)["study"]  # left out, and said so
    assert "holds a password and is left out" in exported
    ok(["validate", "best.yaml"])  # the export still runs (on the default SQLite file)
    for where, text in [*enumerate(seen), ("attrs", stored), ("export", exported),
                        ("report", (tmp_path / "r.html").read_text())]:
        assert password not in text, where
