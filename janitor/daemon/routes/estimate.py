"""``/v1/estimate``: the files an ffmpeg command will write and their bytes, as the guard works
them out, and the tree each lands in."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from janitor.daemon.routes.answers import ERROR_RESPONSES, dumps, error_answer, json_answer
from janitor.daemon.routes.models import EstimateRequest

if TYPE_CHECKING:
    from janitor.daemon.thread_pool import ThreadPool
    from janitor.daemon.view import DaemonView
    from janitor.guarding.ffmpeg import OutputEstimate, Probe

__all__ = ["estimate_router"]


class _Estimates:
    """The blocking half of the route, run in the pool's threads, with its probe cache."""

    def __init__(self, daemon: DaemonView) -> None:
        self.daemon = daemon
        self._probe_cache: Probe | None = None

    def estimate(self, req: EstimateRequest) -> tuple[int, bytes]:
        from janitor.guarding import ffmpeg

        if req.cwd is not None and not os.path.isabs(req.cwd):
            return error_answer("bad_request", f"cwd {req.cwd!r} is not absolute")
        if req.cwd is None:
            inv = ffmpeg.parse(req.args)
            paths = [*ffmpeg.input_files(inv), *(ffmpeg.local_path(o.url) for o in inv.outputs)]
            relative = [p for p in paths if p is not None and not os.path.isabs(p)]
            if relative:
                return error_answer("bad_request", f"{relative[0]!r} is relative: give cwd")
        est = ffmpeg.estimate_command(req.args, cwd=req.cwd or "/", probe=self._probe())
        if isinstance(est, ffmpeg.NotEstimable):
            return 200, dumps({"estimable": False, "reason": est.reason})
        outputs = [self._output(o) for o in est]
        total = sum(o.bytes for o in est)
        return 200, dumps({"estimable": True, "outputs": outputs, "total_bytes": total})

    def _output(self, o: OutputEstimate) -> dict[str, Any]:
        """One estimated output as the answer lists it, with the tree it lands in."""
        from janitor.guarding.prepare import locate

        where = locate(self.daemon.janitor, o.path)
        return {
            "path": o.path,
            "bytes": o.bytes,
            "header_bytes": o.header_bytes,
            "duration_s": o.duration_s,
            "format": o.format,
            "codec": o.codec,
            "sample_rate": o.sample_rate,
            "channels": o.channels,
            "tree": None if where is None else where.tree,
            "in_tree": where is not None and where.in_tree,
        }

    def _probe(self) -> Probe:
        """The guard's probe cache (one per user), so a recording is probed once for both."""
        from janitor.guarding import ffmpeg

        probe = self._probe_cache
        if probe is None:
            probe = self._probe_cache = ffmpeg.Probe(ffmpeg.probe_cache_dir())
        return probe


def estimate_router(daemon: DaemonView, pool: ThreadPool) -> APIRouter:
    """The estimate route over ``daemon``, its blocking half run in ``pool``."""
    estimates = _Estimates(daemon)
    router = APIRouter()

    @router.post("/v1/estimate", response_model=dict[str, Any], responses=ERROR_RESPONSES)
    async def estimate(req: EstimateRequest) -> Any:
        """The files an ffmpeg command will write and their bytes, as the guard works them out
        (``estimable: false`` with the reason when it cannot be sure), and the tree of each."""
        status, body = await pool.run(estimates.estimate, req)
        return json_answer(body, status)

    return router
