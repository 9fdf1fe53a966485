"""``scripts/link-janitor.sh``: the README's first line runs it after either install, so that a new
shell finds ``janitor``: the active environment's, else the one ``python3`` installed, else the
one on PATH. It links into the first of ``~/.local/bin``,
``~/bin``, ``/usr/local/bin`` and ``/usr/bin`` on PATH that it may write, else into
``~/.local/bin`` and puts that on PATH in the shells' startup files; it replaces only a link to
an environment's janitor or to nothing, never a file nor another program's link, and says
what it did in one line (exit 0), or why not (exit 2, nothing changed).

The script runs with a PATH of the test's folders and copies of the few programs it needs, never
the machine's ``/usr/bin`` (as root it would link there); the ``/usr/bin`` case runs in a mount
namespace of its own with a folder mounted over ``/usr/bin``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "link-janitor.sh"
#: What the script and a new shell run, copied (not linked: the ``/usr/bin`` test hides it).
PROGRAMS = ("sh", "ln", "mkdir", "grep", "readlink", "mount")


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    for name in PROGRAMS:
        found = shutil.which(name)
        assert found is not None, name
        shutil.copy2(os.path.realpath(found), folder / name)
    return folder


def _venv(tmp_path: Path, tools: Path) -> Path:
    """A stand-in environment: ``bin/janitor`` that says who it is."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    janitor = venv / "bin" / "janitor"
    janitor.write_text(f"#!{tools / 'sh'}\necho janitor from the venv\n")
    janitor.chmod(0o755)
    return venv


def _run(
    tmp_path: Path, path: str, venv: Path | None, **extra: str
) -> subprocess.CompletedProcess[str]:
    tools = tmp_path / "tools"
    env = {"HOME": str(tmp_path / "home"), "PATH": f"{path}:{tools}", **extra}
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
    return subprocess.run([str(tools / "sh"), str(SCRIPT)], env=env, capture_output=True, text=True)


def _new_shell(tmp_path: Path, path: str, *, login: bool = False) -> str:
    """What ``janitor`` prints in a new shell with ``path`` (a login shell reads ~/.profile)."""
    sh = str(tmp_path / "tools" / "sh")
    env = {"HOME": str(tmp_path / "home"), "PATH": path}
    args = [sh, "-l", "-c", "janitor"] if login else [sh, "-c", "janitor"]
    return subprocess.run(args, env=env, capture_output=True, text=True).stdout


def test_links_into_local_bin_on_path_and_a_new_shell_runs_it(tmp_path: Path, tools: Path) -> None:
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    done = _run(tmp_path, str(local), _venv(tmp_path, tools))
    assert done.returncode == 0, done.stderr
    assert os.readlink(local / "janitor") == str(tmp_path / "venv" / "bin" / "janitor")
    assert _new_shell(tmp_path, f"{local}:{tools}") == "janitor from the venv\n"
    assert done.stdout.count("\n") == 1 and str(local / "janitor") in done.stdout
    assert not (tmp_path / "home" / ".profile").exists()  # on PATH: nothing to add


def test_home_bin_on_path_is_used_when_local_bin_is_not(tmp_path: Path, tools: Path) -> None:
    home_bin = tmp_path / "home" / "bin"
    home_bin.mkdir(parents=True)
    done = _run(tmp_path, str(home_bin), _venv(tmp_path, tools))
    assert done.returncode == 0, done.stderr
    assert (home_bin / "janitor").is_symlink()
    assert not (tmp_path / "home" / ".local").exists()


def test_an_older_link_is_replaced(tmp_path: Path, tools: Path) -> None:
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    (local / "janitor").symlink_to(tmp_path / "old-clone" / ".venv" / "bin" / "janitor")
    assert _run(tmp_path, str(local), _venv(tmp_path, tools)).returncode == 0
    assert os.readlink(local / "janitor") == str(tmp_path / "venv" / "bin" / "janitor")


@pytest.mark.parametrize("on_path", [True, False], ids=["on-path", "off-path"])
def test_a_file_in_the_way_is_kept_and_named(tmp_path: Path, tools: Path, on_path: bool) -> None:
    """Nothing changes: not the file, not a startup file."""
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    (local / "janitor").write_text("someone else's\n")
    done = _run(tmp_path, str(local if on_path else tmp_path), _venv(tmp_path, tools))
    assert done.returncode == 2
    assert (local / "janitor").read_text() == "someone else's\n"
    assert done.stderr.count("\n") == 1 and "is a file, not a link" in done.stderr
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == [".local"]


def test_another_programs_link_is_kept_and_named(tmp_path: Path, tools: Path) -> None:
    """A link named janitor to a program of no environment (a package's own) is not ours."""
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    other = tmp_path / "opt" / "janitor-tool" / "bin" / "janitor"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n")
    (local / "janitor").symlink_to(other)
    done = _run(tmp_path, str(local), _venv(tmp_path, tools))
    assert done.returncode == 2
    assert os.readlink(local / "janitor") == str(other)
    assert done.stderr.count("\n") == 1 and "not to an environment's janitor" in done.stderr


def test_a_link_to_another_environments_janitor_is_replaced(tmp_path: Path, tools: Path) -> None:
    """An older clone's .venv that still exists (it has pyvenv.cfg) is an environment's."""
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    older = tmp_path / "old-clone" / ".venv"
    (older / "bin").mkdir(parents=True)
    (older / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (older / "bin" / "janitor").write_text("#!/bin/sh\n")
    (local / "janitor").symlink_to(older / "bin" / "janitor")
    done = _run(tmp_path, str(local), _venv(tmp_path, tools))
    assert done.returncode == 0, done.stderr
    assert os.readlink(local / "janitor") == str(tmp_path / "venv" / "bin" / "janitor")


def test_with_no_janitor_installed_nothing_is_linked(tmp_path: Path, tools: Path) -> None:
    """No environment active, no ``python3`` that installed one, none on PATH: exit 2."""
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    done = _run(tmp_path, str(local), None)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no janitor installed" in done.stderr
    assert list(local.iterdir()) == []


def _python(tmp_path: Path, tools: Path, *, with_janitor: bool) -> Path:
    """A real Python with no environment active (a venv's interpreter, not activated): the one
    ``pip install .`` used on the README's first branch. Its ``bin/janitor`` says who it is."""
    prefix = tmp_path / "python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    if with_janitor:
        janitor = prefix / "bin" / "janitor"
        janitor.write_text(f"#!{tools / 'sh'}\necho janitor of that python\n")
        janitor.chmod(0o755)
    return prefix


def test_without_an_environment_python3s_own_janitor_is_linked(tmp_path: Path, tools: Path) -> None:
    """``pip install .`` succeeded into a Python that is not a venv (pyenv's, a venv's
    interpreter run by its path): its scripts folder is not on a new shell's PATH, so the
    janitor there is linked like an environment's."""
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    prefix = _python(tmp_path, tools, with_janitor=True)
    done = _run(tmp_path, f"{local}:{prefix / 'bin'}", None)
    assert done.returncode == 0, done.stderr
    assert os.readlink(local / "janitor") == str(prefix / "bin" / "janitor")
    assert _new_shell(tmp_path, f"{local}:{tools}") == "janitor of that python\n"


def test_a_janitor_pip_put_in_local_bin_is_not_linked_and_its_folder_goes_on_path(
    tmp_path: Path, tools: Path
) -> None:
    """``pip install --user``'s janitor is in ~/.local/bin already (python3's user scheme): no
    link to itself; that folder is not on PATH, so the startup files put it there."""
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    (local / "janitor").write_text(f"#!{tools / 'sh'}\necho janitor of the user scheme\n")
    (local / "janitor").chmod(0o755)
    prefix = _python(tmp_path, tools, with_janitor=False)
    done = _run(tmp_path, str(prefix / "bin"), None)
    assert done.returncode == 0, done.stderr
    assert not (local / "janitor").is_symlink()
    assert done.stdout.count("\n") == 1 and "nothing to link" in done.stdout
    assert "added it for new shells in ~/.profile" in done.stdout
    assert _new_shell(tmp_path, str(tools), login=True) == "janitor of the user scheme\n"


def test_a_link_an_earlier_install_left_is_followed_to_the_file_it_names(
    tmp_path: Path, tools: Path
) -> None:
    """python3's user scheme holds ``~/.local/bin/janitor``, but it is a link (this script's,
    made by an earlier install): the file it names is what gets linked, into ~/bin on PATH;
    the link is not taken for a janitor pip put there (Debian's python3 names /usr/local/bin,
    where root's earlier link lies, as its scripts folder)."""
    real = tmp_path / "pyenv" / "bin" / "janitor"
    real.parent.mkdir(parents=True)
    real.write_text(f"#!{tools / 'sh'}\necho janitor of the earlier install\n")
    real.chmod(0o755)
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    (local / "janitor").symlink_to(real)
    home_bin = tmp_path / "home" / "bin"
    home_bin.mkdir()
    prefix = _python(tmp_path, tools, with_janitor=False)
    done = _run(tmp_path, f"{home_bin}:{prefix / 'bin'}", None)
    assert done.returncode == 0, done.stderr
    assert os.readlink(home_bin / "janitor") == str(real)
    assert _new_shell(tmp_path, f"{home_bin}:{tools}") == "janitor of the earlier install\n"
    assert not (tmp_path / "home" / ".profile").exists()


def test_a_janitor_on_path_in_local_bin_is_left_as_it_is(tmp_path: Path, tools: Path) -> None:
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    (local / "janitor").write_text("#!/bin/sh\n")
    (local / "janitor").chmod(0o755)
    done = _run(tmp_path, str(local), None)
    assert done.returncode == 0, done.stderr
    said = f"link-janitor: new shells run {local / 'janitor'} (pip put it there; nothing to link)"
    assert done.stdout == said + "\n"
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == [".local"]


def test_a_link_to_a_python_installations_janitor_is_replaced(tmp_path: Path, tools: Path) -> None:
    """An earlier install into a Python (a bin folder with python3, no pyvenv.cfg) is ours."""
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    older = tmp_path / "pyenv" / "versions" / "3.11.7" / "bin"
    older.mkdir(parents=True)
    for name in ("python3", "janitor"):
        (older / name).write_text("#!/bin/sh\n")
        (older / name).chmod(0o755)
    (local / "janitor").symlink_to(older / "janitor")
    done = _run(tmp_path, str(local), _venv(tmp_path, tools))
    assert done.returncode == 0, done.stderr
    assert os.readlink(local / "janitor") == str(tmp_path / "venv" / "bin" / "janitor")


def test_with_no_folder_on_path_it_links_into_local_bin_and_puts_that_on_path(
    tmp_path: Path, tools: Path
) -> None:
    """PATH as short as cron's, for a user who may write none of its folders: the link goes into
    ~/.local/bin, which ~/.profile (and ~/.bashrc, which exists) put on PATH, once, however often
    it runs; a new login shell then finds ``janitor`` where a shell of the old PATH does not."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# the user's own\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    venv = _venv(tmp_path, tools)
    done = _run(tmp_path, str(elsewhere), venv, SHELL="/bin/bash")
    local = home / ".local" / "bin"
    assert done.returncode == 0, done.stderr
    assert os.readlink(local / "janitor") == str(venv / "bin" / "janitor")
    assert done.stdout.count("\n") == 1, done.stdout
    assert "added it for new shells in ~/.profile and ~/.bashrc" in done.stdout
    assert not (home / ".zshrc").exists()
    assert (home / ".bashrc").read_text().startswith("# the user's own\n")
    assert _new_shell(tmp_path, f"{elsewhere}:{tools}") == ""  # this PATH has no janitor
    assert _new_shell(tmp_path, f"{elsewhere}:{tools}", login=True) == "janitor from the venv\n"
    before = {name: (home / name).read_text() for name in (".profile", ".bashrc")}
    again = _run(tmp_path, str(elsewhere), venv, SHELL="/bin/bash")
    assert again.returncode == 0 and "the startup files add it" in again.stdout
    assert {name: (home / name).read_text() for name in before} == before


def test_bash_profile_gets_the_line_and_an_unwritable_startup_file_is_said(
    tmp_path: Path, tools: Path
) -> None:
    """bash reads no ~/.profile when there is a ~/.bash_profile: that gets the line too. A
    startup file it cannot write (here ~/.profile is a folder) is said, with the line to add;
    the link is made all the same."""
    home = tmp_path / "home"
    (home / ".profile").mkdir(parents=True)
    (home / ".bash_profile").write_text("# mine\n")
    done = _run(tmp_path, str(tmp_path), _venv(tmp_path, tools), SHELL="/bin/bash")
    assert done.returncode == 0, done.stderr
    assert (home / ".local" / "bin" / "janitor").is_symlink()
    assert "space-janitor" in (home / ".bash_profile").read_text()
    assert "added it for new shells in ~/.bash_profile" in done.stdout
    assert "could not write ~/.profile: add it there with: export PATH=" in done.stdout
    assert done.stdout.count("\n") == 1


def test_zsh_gets_the_line_in_zshrc(tmp_path: Path, tools: Path) -> None:
    """A Mac's shell, zsh, reads no ~/.profile: ~/.zshrc is made for it."""
    (tmp_path / "home").mkdir()
    done = _run(tmp_path, str(tmp_path), _venv(tmp_path, tools), SHELL="/bin/zsh")
    assert done.returncode == 0, done.stderr
    zshrc = (tmp_path / "home" / ".zshrc").read_text()
    assert f'export PATH="{tmp_path}/home/.local/bin:$PATH"' in zshrc


def test_told_not_to_touch_startup_files_it_says_the_line_to_add(
    tmp_path: Path, tools: Path
) -> None:
    done = _run(tmp_path, str(tmp_path), _venv(tmp_path, tools), JANITOR_NO_MODIFY_PATH="1")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "home" / ".local" / "bin" / "janitor").is_symlink()
    assert "is not on PATH: add it with: echo 'export PATH=" in done.stdout
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == [".local"]


def _may_unshare_mounts() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(
    not _may_unshare_mounts(),
    reason="mounting a folder over /usr/bin in a mount namespace needs root, unshare and the "
    "right to make a mount namespace (an unprivileged container has not)",
)
def test_root_with_path_as_short_as_crons_links_into_usr_bin(tmp_path: Path, tools: Path) -> None:
    """Root with PATH=/usr/bin:/bin (cron's, ``env -i``'s): neither ~/.local/bin nor
    /usr/local/bin is on it, so a new shell of that PATH finds ``janitor`` only in /usr/bin.
    Run in a mount namespace with a folder of its own over /usr/bin: the machine's is untouched."""
    usr_bin = tmp_path / "usr-bin"  # a /usr/bin with the programs the script runs
    shutil.copytree(tools, usr_bin)
    venv = _venv(tmp_path, tools)
    sh = tools / "sh"
    inside = (
        f"{tools / 'mount'} --bind {usr_bin} /usr/bin && "
        f"VIRTUAL_ENV={venv} {sh} {SCRIPT} && {sh} -c janitor"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", str(sh), "-c", inside],
        env={"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"link-janitor: new shells run /usr/bin/janitor -> {venv}/bin/janitor",
        "janitor from the venv",
    ]
    assert os.readlink(usr_bin / "janitor") == str(venv / "bin" / "janitor")
    assert not (tmp_path / "home").exists()  # on PATH: no startup file touched
    assert not Path("/usr/bin/janitor").is_symlink() or os.readlink("/usr/bin/janitor") != str(
        venv / "bin" / "janitor"
    )
