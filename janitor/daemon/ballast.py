"""Ballast: a file of dead bytes per volume, released the moment the volume turns critical.

It buys the jobs told to stop the time to stop, and comes back only once the volume is calm and
has room for it above ``free_target``.
"""

from __future__ import annotations

import logging

from janitor.config.settings import Settings
from janitor.core import Janitor
from janitor.daemon.events import EventBus
from janitor.daemon.metrics import VolumeState
from janitor.daemon.volumes import volume_trees
from janitor.host.ballast import Ballast, ballast_path
from janitor.host.space import volume_stats
from janitor.sizes import format_size

__all__ = ["BallastKeeper"]

log = logging.getLogger("janitor.daemon")


class BallastKeeper:
    """The ballast of every volume whose policy asks for it."""

    def __init__(self, janitor: Janitor, settings: Settings, bus: EventBus) -> None:
        self.janitor = janitor
        self.settings = settings
        self.bus = bus
        self._ballast: dict[int, Ballast] = {}

    def start(self) -> None:
        """Place the ballast of the current policy's volumes."""
        self.arm()

    def stop(self) -> None:
        """Nothing to ask: the ballast stays on disk for the next start."""

    def join(self) -> None:
        """Nothing to wait for."""

    def arm(self) -> None:
        """Where each volume's ballast lives and how big it is (again after a policy reload)."""
        self._ballast.clear()
        policy = self.janitor.policy
        for device, roots in volume_trees(policy).items():
            vp = policy.volume_policy(device)
            if vp.ballast is None:
                continue
            vs = volume_stats(roots[0])
            size = vp.ballast.resolve(vs.total)
            where = ballast_path(self.settings.state_dir, roots, device)
            if where is None or size <= 0:
                log.warning("no place for ballast on %s; ballast disabled there", vs.mount)
                continue
            self._ballast[device] = Ballast(where, size)
            log.info("ballast of %s on %s at %s", format_size(size), vs.mount, where)

    def manage(self, device: int, vs: VolumeState, level: str, settled: str) -> None:
        """Release the ballast the moment the volume reads critical; recreate it only once the
        damped level is ``ok`` and there is room for it above free_target."""
        ballast = self._ballast.get(device)
        if ballast is None:
            return
        present = ballast.present()
        if level == "critical" and present:
            freed = ballast.release()
            log.warning("volume %s critical: released %s of ballast", vs.mount, format_size(freed))
            self.bus.publish("ballast-released", volume=vs.mount, bytes=freed)
        elif (
            not present
            and settled == "ok"
            and vs.free - ballast.size >= vs.free_target
            and ballast.create()
        ):
            log.info("ballast of %s recreated on %s", format_size(ballast.size), vs.mount)
            self.bus.publish("ballast-created", volume=vs.mount, bytes=ballast.size)
        vs.ballast = ballast.size if ballast.present() else 0
