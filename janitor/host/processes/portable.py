"""The process table through psutil: what macOS (and ``JANITOR_PORTABLE=1``) uses. psutil is
imported on first use, not with this module (the CLI's commands start faster)."""

from __future__ import annotations

from janitor.host.processes.api import START_TOLERANCE_S, Processes, ProcessInfo

__all__ = ["PortableProcesses"]


class PortableProcesses(Processes):
    """psutil's answers."""

    def start(self, pid: int) -> float | None:
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:  # as /proc says: it never writes again
                    return None
                return float(proc.create_time())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        except psutil.AccessDenied:
            return None if not psutil.pid_exists(pid) else -1.0

    def alive(self, pid: int, start: float | None) -> bool:
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:  # never writes again
                    return False
                if start is None or start < 0:
                    return True
                return bool(abs(proc.create_time() - start) < START_TOLERANCE_S)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        except psutil.AccessDenied:
            # Another user's process: it exists, and we cannot tell its start time.
            return bool(psutil.pid_exists(pid))

    def info(self, pid: int) -> ProcessInfo | None:
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                ppid = proc.ppid()
                try:
                    exe = proc.exe()
                except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                    exe = ""
                try:
                    args = tuple(proc.cmdline())
                except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                    args = ()
            return ProcessInfo(pid, ppid, exe, args)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
