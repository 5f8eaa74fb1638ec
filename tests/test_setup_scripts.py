"""The set-up scripts a newcomer runs: they never delete or change what they did not make."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import REPO

SETUP_VLLM = REPO / "scripts" / "setup-vllm.sh"


def setup_vllm(venv: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(venv.parent), "DEPLOYTOOL_VLLM_VENV": str(venv)}
    return subprocess.run(
        ["bash", str(SETUP_VLLM)], env=env, capture_output=True, text=True, timeout=60
    )


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_folder_that_is_not_a_vllm_venv_is_refused_and_left_as_it_was(tmp_path):
    venv = tmp_path / "my-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "notes.txt").write_text("mine")
    before = tree(venv)
    res = setup_vllm(venv)
    assert res.returncode == 2
    assert "is not a venv that imports vllm" in res.stderr and "DEPLOYTOOL_VLLM_VENV" in res.stderr
    assert tree(venv) == before


def test_a_users_venv_that_imports_vllm_is_used_as_it_is(tmp_path):
    venv = tmp_path / "vllm-venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    # stands in for a working vLLM venv: every import the rig asks for succeeds
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    (venv / "lib-of-3.4-GB").write_text("kept")
    before = tree(venv)
    res = setup_vllm(venv)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == str(python)
    assert "as it is (not made by deploytool" in res.stderr
    assert tree(venv) == before  # nothing removed, nothing added


def test_two_set_ups_at_once_install_one_after_the_other(tmp_path):
    """Both test commands run scripts/setup.sh: started together (two terminals, a load proof) the
    second waits for the first, as two pip installs into one venv break each other's files. The
    venv's python is a stand-in that logs its install and holds it until a file appears."""
    import shutil

    from remote.common import procinfo
    from tests.conftest import wait_for

    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    shutil.copy(REPO / "pyproject.toml", repo / "pyproject.toml")
    log, gate = tmp_path / "log", tmp_path / "gate"
    py = repo / ".venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(
        f'#!/bin/sh\necho "start $PPID" >> {log}\n'
        f'while [ ! -e {gate} ]; do sleep 0.01; done\necho "end $PPID" >> {log}\n'
    )
    py.chmod(0o755)
    run = ["bash", str(repo / "scripts" / "setup.sh")]
    first = subprocess.Popen(run)
    wait_for(lambda: log.exists() and "start" in log.read_text(), what="the first install")
    second = subprocess.Popen(run)

    def second_waits() -> bool:  # its `flock` child is blocked on the lock the first holds
        return any(
            procinfo.ppid(p) == second.pid and procinfo.cmdline(p)[:1] == ["flock"]
            for p in procinfo.all_pids()
        )

    wait_for(second_waits, what="the second set-up waiting for the first")
    gate.touch()
    assert first.wait(60) == 0 and second.wait(60) == 0
    assert log.read_text().split() == ["start", str(first.pid), "end", str(first.pid)] + [
        "start",
        str(second.pid),
        "end",
        str(second.pid),
    ]


def stand_in_repo(tmp_path):
    """A checkout with setup.sh and a venv whose python stands in for pip (it logs what it was
    asked); returns (the checkout, its venv's bin, the log)."""
    import shutil

    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    log = tmp_path / "log"
    bin_ = repo / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "python").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    (bin_ / "python").chmod(0o755)
    (bin_ / "invoke").write_text("#!/bin/sh\n")
    (bin_ / "invoke").chmod(0o755)
    return repo, bin_, log


def test_a_venv_that_installed_this_pyproject_is_not_installed_again(tmp_path):
    """The package is installed editable: the test command's every run asks pip again only when
    pyproject.toml changed (or the venv lost its commands)."""
    repo, bin_, log = stand_in_repo(tmp_path)

    def installs() -> int:
        res = subprocess.run(["bash", str(repo / "scripts" / "setup.sh")], capture_output=True)
        assert res.returncode == 0, res.stderr
        return log.read_text().count("pip install") if log.exists() else 0

    assert installs() == 1
    assert installs() == 1  # the same pyproject.toml: nothing asked of pip
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\ndependencies = ['rich']\n")
    assert installs() == 2
    assert installs() == 2
    (bin_ / "invoke").unlink()  # a venv that lost its commands is installed again
    assert installs() == 3


def test_the_job_installs_the_package_alone_and_the_tests_add_their_tools(tmp_path):
    """The demo runs the job: it needs no pytest, hypothesis or ruff; the test and lint commands
    (`setup.sh dev`) add them once, and a venv that has them serves the demo as it is."""
    repo, bin_, log = stand_in_repo(tmp_path)

    def setup(*args) -> list[str]:
        res = subprocess.run(
            ["bash", str(repo / "scripts" / "setup.sh"), *args], capture_output=True
        )
        assert res.returncode == 0, res.stderr
        return [line.split()[-1] for line in log.read_text().splitlines()] if log.exists() else []

    assert setup() == [".[remote]"]
    assert setup("dev") == [".[remote]", ".[dev,remote]"]
    assert setup() == [".[remote]", ".[dev,remote]"]  # the tests' venv runs the job as it is
    assert setup("dev") == [".[remote]", ".[dev,remote]"]


def test_the_trainers_go_to_a_folder_of_their_own_never_into_the_users_vllm_venv(tmp_path):
    """The tests read our files with the released trainers: installed without their pinned
    requirements beside the venv vLLM serves from, so that venv never holds a package whose
    requirements are unmet (pip would print an ERROR at every later install in it)."""
    venv, trainers, log = tmp_path / "vllm-venv", tmp_path / "trainers", tmp_path / "pip.log"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    # a stand-in: imports succeed once the trainers' folder is on PYTHONPATH and holds them
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ]; then echo "$*" >> ' + str(log) + "; mkdir -p " + str(trainers) + "; "
        "touch " + str(trainers) + "/in; exit 0; fi\n"
        'case "$*" in *specforge*) [ -f "$PYTHONPATH/in" ] || exit 1;; esac\n'
        'case "$*" in *version_info*) echo py311;; esac\n'
        "exit 0\n"
    )
    python.chmod(0o755)
    before = tree(venv)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DEPLOYTOOL_TRAINERS_DIR": str(trainers)}
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup-trainers.sh"), str(python)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == str(trainers)
    (install,) = log.read_text().splitlines()  # datasets was there: the trainers alone
    assert f"--no-deps --target {trainers} specforge==0.2.0 speculators==0.9.0" in install
    assert tree(venv) == before
