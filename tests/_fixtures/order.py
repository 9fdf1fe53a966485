"""The order the parallel run hands tests out in: the longest first, spread over the workers.

pytest-xdist's ``worksteal`` gives each worker a contiguous quarter of the collection, and a
worker that runs dry steals from the tail of another's queue. In file order, a worker could meet
its long tests last (the schemathesis run, 37 s), running alone while the others had finished:
the run's end waited for it. So the longest tests (from ``--durations``; a test's parametrized
cases all count) go first, dealt round-robin to the head of each worker's quarter, longest
first, as a longest-processing-time schedule deals them; the rest keep their order behind. No
test is left out or run twice, and a run with one worker, or of a few files, keeps file order
but for the long tests first.

When a test in the list is renamed, or a new test takes over 8 s on the 2-core machine, update
``LONGEST`` from ``python -m pytest --durations=40`` (a name that no longer exists only stops
counting; ``docs/contributing/index.md`` says why each of them is long).
"""

from __future__ import annotations

import os

import pytest

__all__ = ["LONGEST", "pytest_collection_modifyitems"]

#: Test functions (``path::name``) that take 8 s or more each, longest first.
LONGEST: tuple[str, ...] = (
    "tests/daemon/test_api.py::test_schemathesis_against_the_served_schema",
    "tests/scenarios/test_by_use.py::test_a_group_cut_again_without_room_waits_for_space_that_will_come",
    "tests/scenarios/test_one_deadline.py::test_a_wait_keeps_its_deadline_when_the_daemon_dies_or_hangs_under_it",
    "tests/scenarios/test_jobs.py::test_a_second_job_is_refused_at_its_first_cut_while_the_first_finishes_every_group",
    "tests/commands/test_guard.py::test_a_cached_wav_a_job_keeps_cutting_from_is_never_evicted",
    "tests/scenarios/test_by_use.py::test_a_group_cut_again_is_growth_admitted_at_that_cut_and_the_file_never_fails_late",
    "tests/cleanup/test_deep.py::test_sweep_removes_an_orphan_job_folder_holding_a_10000_level_chain",
    "tests/cleanup/test_deep.py::test_a_cache_tree_with_a_deep_folder_is_scanned_and_its_usage_counted",
    "tests/daemon/test_metrics_listener.py::test_1100_idle_connections_to_the_metrics_port_never_starve_the_socket_api",
    "tests/scenarios/test_jobs.py::test_a_sigkilled_writers_folder_is_removed_by_the_daemon_within_seconds",
    "tests/scenarios/test_jobs.py::test_run_keeps_a_daemonized_childs_folder_and_its_guard",
    "tests/ledger/test_full_state_disk.py::test_status_and_log_answer_on_a_full_state_disk",
    "tests/daemon/test_daemon.py::test_an_idle_daemon_sleeps_instead_of_polling",
    "tests/scenarios/test_jobs.py::test_a_waiting_job_is_admitted_the_moment_the_other_jobs_folder_is_removed",
    "tests/scenarios/test_jobs.py::test_job_records_survive_a_daemon_restart",
    "tests/daemon/test_metrics_listener.py::test_a_real_prometheus_scrapes_it_and_every_dashboard_query_has_data",
    "tests/daemon/test_metrics_listener.py::test_a_trickled_or_oversized_request_head_is_cut_off",
    "tests/scenarios/test_jobs.py::test_a_waiter_that_cannot_be_served_does_not_hold_back_one_that_can",
    "tests/commands/test_run_daemon.py::test_a_run_whose_daemon_dies_goes_on_through_the_ledger",
    "tests/commands/test_run_interrupt.py::test_ctrl_c_in_a_terminal_ends_ffmpeg_as_bare_ffmpeg_does",
    "tests/daemon/test_daemon.py::test_a_low_volume_is_sampled_often_then_calmly_again",
    "tests/scenarios/test_by_use.py::test_racing_cuts_on_one_working_set_never_overdraw_it",
    "tests/scenarios/test_by_use.py::test_a_first_cut_waits_for_space_an_outside_writer_took_moments_ago",
)

_RANK = {name: rank for rank, name in enumerate(LONGEST)}


def _rank(item: pytest.Item) -> int | None:
    return _RANK.get(item.nodeid.partition("[")[0])


def _workers() -> int:
    """How many workers the run has (pytest-xdist tells each worker; 1 without it)."""
    try:
        return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 1


def dealt(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` with the long ones dealt to the heads of ``workers`` contiguous quarters."""
    long = sorted((i for i in items if _rank(i) is not None), key=lambda i: _rank(i) or 0)
    rest = [i for i in items if _rank(i) is None]
    size = -(-len(items) // workers)  # each worker's share, as worksteal splits the queue
    ordered: list[pytest.Item] = []
    for w in range(workers):
        heads = long[w::workers]
        take = max(0, size - len(heads)) if w < workers - 1 else len(rest)
        ordered += heads + rest[:take]
        rest = rest[take:]
    return ordered


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every worker collects and orders alike (the order depends on the collection alone).
    items[:] = dealt(items, _workers())
