"""bench/device/slim_tree.sh: docs/runs/ leaves the carried working tree and comes back without a trace, commits are
refused while it is out, and nothing the lent machine runs reads docs/runs/."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "device" / "slim_tree.sh"


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check)


def slim(repo: Path, action: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(repo / "bench/device/slim_tree.sh"), action], capture_output=True,
                          text=True, cwd=repo, check=False)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small repository with committed evidence under docs/runs/ and the script."""
    root = tmp_path / "repo"
    (root / "docs/runs/2026-01-01-x").mkdir(parents=True)
    (root / "docs/runs/2026-01-01-x/README.md").write_text("evidence\n")
    (root / "docs/guide.md").write_text("guide\n")
    (root / "bench/device").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "bench/device/slim_tree.sh")
    shutil.copy(SCRIPT.parent / "code_commit.sh", root / "bench/device/code_commit.sh")
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def carried(repo: Path) -> set[str]:
    """The files a device call carries: tracked plus untracked-not-ignored."""
    out = git(repo, "ls-files", "-co", "--exclude-standard").stdout
    return set(out.split())


def test_on_leaves_the_evidence_out_of_the_carried_tree_and_off_restores_the_index(repo):
    before = carried(repo)
    assert "docs/runs/2026-01-01-x/README.md" in before

    done = slim(repo, "on")
    assert done.returncode == 0, done.stderr
    # the copy the lent machine gets names its commit (it has no .git there)
    assert carried(repo) == before - {"docs/runs/2026-01-01-x/README.md"} | {"bench/device/CARRIED_COMMIT"}
    head = git(repo, "rev-parse", "--short", "HEAD").stdout.strip()
    assert (repo / "bench/device/CARRIED_COMMIT").read_text().strip() == head
    copy = repo.parent / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    assert subprocess.run(["bash", str(copy / "bench/device/code_commit.sh")], capture_output=True, text=True,
                          check=True).stdout.strip() == head
    assert (repo / "docs/runs/2026-01-01-x/README.md").read_text() == "evidence\n"  # the file stays on disk
    assert slim(repo, "status").stdout.strip() == "on: docs/runs"

    done = slim(repo, "off")
    assert done.returncode == 0, done.stderr
    assert carried(repo) == before
    assert git(repo, "status", "--porcelain").stdout == ""
    assert "slim_tree" not in (repo / ".git/info/exclude").read_text()
    assert slim(repo, "status").stdout.strip() == "off"


def test_a_commit_is_refused_while_the_evidence_is_out(repo):
    assert slim(repo, "on").returncode == 0
    (repo / "docs/guide.md").write_text("changed\n")
    git(repo, "add", "docs/guide.md")
    refused = git(repo, "commit", "-q", "-m", "would delete the evidence", check=False)
    assert refused.returncode != 0
    assert "slim_tree is on" in refused.stderr and "docs/runs" in refused.stderr
    assert git(repo, "ls-tree", "-r", "--name-only", "HEAD").stdout.count("docs/runs/") == 1

    git(repo, "reset", "-q", "--", "docs/guide.md")
    assert slim(repo, "off").returncode == 0
    git(repo, "add", "docs/guide.md")
    assert git(repo, "commit", "-q", "-m", "fine now", check=False).returncode == 0
    assert "docs/runs/2026-01-01-x/README.md" in git(repo, "ls-tree", "-r", "--name-only", "HEAD").stdout


def test_on_refuses_staged_changes_and_is_idempotent(repo):
    (repo / "docs/guide.md").write_text("staged\n")
    git(repo, "add", "docs/guide.md")
    refused = slim(repo, "on")
    assert refused.returncode == 1 and "staged changes" in refused.stderr
    assert slim(repo, "status").stdout.strip() == "off"
    git(repo, "commit", "-q", "-m", "staged")
    assert slim(repo, "on").returncode == 0
    again = slim(repo, "on")
    assert again.returncode == 0 and "already on" in again.stdout
    assert (repo / ".git/info/exclude").read_text().count("/docs/runs/") == 1
    assert slim(repo, "off").returncode == 0
    assert "already off" in slim(repo, "off").stdout


def test_nothing_the_lent_machine_runs_reads_docs_runs():
    """Shell scripts mention docs/runs/ only in comments; Python modules only in docstrings, comments and the patch
    registry's evidence names, never in a path they open."""
    offending = []
    for script in [*REPO.glob("train/**/*.sh"), *REPO.glob("bench/**/*.sh")]:
        if script.name == "slim_tree.sh":
            continue
        for number, line in enumerate(script.read_text().splitlines(), 1):
            if "docs/runs" in line and not line.lstrip().startswith("#"):
                offending.append(f"{script.relative_to(REPO)}:{number}: {line.strip()}")
    opens = re.compile(r"(open\(|Path\(|read_text|read_bytes|glob\(|listdir|exists\()")
    for module in REPO.glob("verl_ext/**/*.py"):
        for number, line in enumerate(module.read_text().splitlines(), 1):
            if "docs/runs" in line and opens.search(line):
                offending.append(f"{module.relative_to(REPO)}:{number}: {line.strip()}")
    assert offending == []


def test_code_commit_marks_a_changed_checkout_dirty(repo):
    script = repo / "bench/device/code_commit.sh"
    head = git(repo, "rev-parse", "--short", "HEAD").stdout.strip()
    run = lambda: subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout.strip()  # noqa: E731
    assert run() == head
    (repo / "docs/guide.md").write_text("changed\n")
    assert run() == f"{head}-dirty"
