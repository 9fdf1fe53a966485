"""The daemon API's routes, one module per resource, as a FastAPI app's routers are.

``reservations`` (``/v1/reservations``), ``guard`` (``/v1/guard/*``: the guards' calls, a
queued call's wait, their release), ``estimate``, ``status`` (``/v1/status``, ``/v1/space``),
``sweeps`` and ``monitoring`` (``/metrics``, ``/v1/events``): each a function that makes its
``APIRouter`` over the running daemon (a :class:`~janitor.daemon.view.DaemonView`) and the
thread pool its blocking halves run in. Beside them: ``models`` (the wire models), ``answers``
(how an answer is written) and ``errors`` (the app's error handlers), each error's status read
from the one table (:mod:`janitor.error_statuses`). :func:`janitor.daemon.api.create_app` puts
them together.
"""
