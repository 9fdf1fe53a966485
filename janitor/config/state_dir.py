"""Whose state dir this is: no root-owned file in a user's state dir, and one line when the
janitor may not use a state dir at all.

``sudo janitor ...`` keeps ``HOME`` on macOS, so root resolves the user's state dir
(``~/Library/Application Support/space-janitor``); a file root makes there (the ledger, its lock,
``locks/``) locks the user out of their own janitor. As Homebrew does, root is refused in a state
dir that another user owns (:func:`refuse_root`); and a user whose state dir holds what an earlier
root run left moves it aside, and is told so (:func:`repair`). Every other "permission denied"
on the state dir becomes one line naming the path, its owner and the fix (:func:`access_error`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from janitor.errors import ConfigError, LedgerError

__all__ = ["access_error", "owner_name", "refuse_root", "repair"]

#: What the janitor keeps directly in its state dir.
_OURS = ("ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm", "ledger.sqlite3.lock",
         "locks")  # fmt: skip


def owner_name(uid: int) -> str:
    """``ana (uid 501)``: a user for a message."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _nearest(path: Path) -> Path:
    p = path
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def access_error(path: Path | str, exc: OSError, doing: str) -> LedgerError:
    """One line for a state-dir file the janitor may not use: the path, why, whose it is when
    it is another user's, and what to do."""
    path = Path(path)
    why = exc.strerror or str(exc)
    try:
        uid = os.lstat(_nearest(path)).st_uid
    except OSError:
        uid = os.geteuid()
    if uid != os.geteuid():
        return LedgerError(
            f"cannot {doing} {path}: {why}; it belongs to {owner_name(uid)}, not to you, "
            f"{owner_name(os.geteuid())}: point JANITOR_STATE_DIR at a folder of your own "
            "(or unset it), or run janitor as its owner"
        )
    return LedgerError(
        f"cannot {doing} {path}: {why}; check the permissions of {path.parent} (JANITOR_STATE_DIR)"
    )


def refuse_root(state_dir: Path) -> None:
    """As root, refuse a state dir that belongs to another user (ConfigError, exit 2): what root
    would create there, that user could not use again. (A root without its privileges, which
    cannot write there, is told so as any other user is.)"""
    if os.geteuid() != 0:
        return
    nearest = _nearest(state_dir)
    try:
        uid = os.lstat(nearest).st_uid
    except OSError:
        return
    if uid != 0 and os.access(nearest, os.W_OK):
        raise ConfigError(
            f"refusing to run as root with the state dir of {owner_name(uid)}, {state_dir}: "
            "files root makes there would lock that user out; run janitor without sudo, or give "
            "root a state dir of its own (JANITOR_STATE_DIR=/var/root/space-janitor)"
        )


def repair(state_dir: Path) -> list[str]:
    """Move aside what another user (an earlier ``sudo janitor``) left in this user's state dir,
    so the janitor works again; one message per thing moved (nothing to do: empty).

    Only names the janitor itself makes there are moved, each within its own folder (a rename
    needs no right on the thing renamed, only on its folder), and only in a state dir of ours.
    A state dir that root made in a folder of ours is moved aside whole; one of another user
    (JANITOR_STATE_DIR pointed at it) is never touched.
    """
    me = os.geteuid()
    try:
        st = os.lstat(state_dir)
    except OSError:
        return []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    said: list[str] = []
    if st.st_uid != me:
        if st.st_uid != 0 or me == 0:
            return []  # another user's: not ours to move (access_error says so)
        try:
            if os.lstat(state_dir.parent).st_uid != me:
                return []
            who = owner_name(st.st_uid).split()[0]
            aside = state_dir.with_name(f"{state_dir.name}.{who}-{stamp}")
            os.rename(state_dir, aside)
        except OSError:
            return []
        return [
            f"moved aside the state dir {owner_name(st.st_uid)} made at {state_dir} (an earlier "
            f"`sudo janitor`?) to {aside}; a new one starts here"
        ]
    locks = state_dir / "locks"
    names = [state_dir / name for name in _OURS]
    try:
        if os.lstat(locks).st_uid == me:  # ours, but maybe with another user's lock files in it
            names += [locks / n for n in os.listdir(locks) if n.endswith(".lock")]
    except OSError:
        pass
    for path in names:
        name = path.name
        try:
            uid = os.lstat(path).st_uid
        except OSError:
            continue
        if uid == me:
            continue
        aside = path.with_name(f"{name}.{owner_name(uid).split()[0]}-{stamp}")
        try:
            os.rename(path, aside)
        except OSError:
            continue
        said.append(
            f"moved aside {path}, which {owner_name(uid)} left there (an earlier `sudo "
            f"janitor`?), to {aside}; the janitor makes a new one"
        )
    return said
