"""A study shared through PostgreSQL by two worker processes on loopback: every trial runs once, and
each records the worker that ran it.

The test runs its own PostgreSQL cluster (initdb/pg_ctl in a temporary folder, as the postgres user
when run as root). PostgreSQL is required: `.ci/run` installs it (`apt-get install -y postgresql`);
on a machine without it this test fails and says so.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from tune_helpers import fake_tune_argv, gate_arg, marker, release, wait_gone, write_space

pytestmark = pytest.mark.slow


def pg_bin(name: str) -> str | None:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_postgres(argv: list[str]) -> list[str]:
    """initdb refuses to run as root: run the server's tools as the postgres user then."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@pytest.fixture
def postgres_url():
    initdb, pg_ctl, createdb = pg_bin("initdb"), pg_bin("pg_ctl"), pg_bin("createdb")
    if not (initdb and pg_ctl and createdb):
        pytest.fail(
            "PostgreSQL's initdb/pg_ctl/createdb were not found "
            "(on PATH or in /usr/lib/postgresql/*/bin): "
            "install them with `apt-get install -y postgresql` (.ci/run does)"
        )
    folder = Path(tempfile.mkdtemp(prefix="roofline-pg-"))
    os.chmod(folder, 0o755)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    data, port = folder / "data", free_port()
    run = {"capture_output": True, "text": True, "timeout": 120, "check": True}
    try:
        subprocess.run(
            as_postgres([initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"]),
            **run,
        )
        subprocess.run(
            as_postgres(
                [
                    pg_ctl,
                    "-D",
                    str(data),
                    "-l",
                    str(folder / "log"),
                    "-w",
                    "-o",
                    f"-p {port} -h 127.0.0.1 -k {folder} -F",
                    "start",
                ]
            ),
            **run,
        )
        try:
            subprocess.run(
                [createdb, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "tune"], **run
            )
            yield f"postgresql://postgres@127.0.0.1:{port}/tune"
        finally:
            subprocess.run(
                as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]),
                capture_output=True,
                timeout=60,
            )
    except subprocess.CalledProcessError as e:
        pytest.fail(f"could not start PostgreSQL: {e.cmd}: {e.stderr}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


GRID = """
[baseline]
speed = 120
[knobs.speed]
choices = [100, 120, 140, 160, 180, 200, 220, 240]
default = 120
"""


def test_two_workers_share_one_study_and_never_run_a_trial_twice(tmp_path, postgres_url):
    import optuna

    from roofline.tune.storage import open_storage
    from roofline.tune.study import results

    space = write_space(tmp_path, GRID)
    mark = marker()
    # every fake engine after the first holds its requests until the second worker has one up, so
    # the first worker cannot run the whole grid before the second starts, however slow that start
    # is
    gate = tmp_path / "gate"
    args = [
        "--space",
        str(space),
        "--strategy",
        "grid",
        "--reps",
        "2",
        "--max-tokens",
        "16",
        "--storage",
        postgres_url,
        "--study",
        "shared",
        gate_arg(gate),
        "--engine-arg",
        mark,
        "--json",
    ]
    first = subprocess.Popen(
        fake_tune_argv(*args, "--runs", str(tmp_path / "w1")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the first worker creates the study (and enqueues the grid) before the second starts
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if (
                "planned"
                in optuna.load_study(
                    study_name="shared", storage=open_storage(postgres_url)
                ).user_attrs
            ):
                break
        except KeyError:
            pass
        assert first.poll() is None, first.communicate()
        time.sleep(0.2)
    second = subprocess.Popen(
        fake_tune_argv(*args, "--runs", str(tmp_path / "w2")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    # its engine's parent: second
    while str(second.pid) not in [f.read_text() for f in gate.glob("start-*")]:
        for p in (first, second):
            assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the second worker never started an engine"
        time.sleep(0.05)
    release(gate)
    outs = [p.communicate(timeout=180) for p in (first, second)]
    for p, (_out, err) in zip((first, second), outs):
        assert p.returncode == 0, err
    assert all(json.loads(out)["trials"] for out, _ in outs)  # each printed its result
    study = optuna.load_study(study_name="shared", storage=open_storage(postgres_url))
    trials = results(study)  # the study as both workers left it
    ok = [t for t in trials if t.status == "ok"]
    assert Counter(t.config["speed"] for t in ok) == Counter(
        {s: 1 for s in (100, 120, 140, 160, 180, 200, 220, 240)}
    )
    assert len(trials) == 8
    workers = Counter(t.machine.pid for t in ok)
    assert len(workers) == 2, workers  # both workers ran trials
    assert all(t.machine.hostname == socket.gethostname() for t in ok)
    # each worker kept its own trials' folders
    local = [sum(1 for _ in (tmp_path / w).glob("*/trials/*/server.log")) for w in ("w1", "w2")]
    assert sum(local) == 8 and all(local)
    assert wait_gone(mark) == []
