"""The mutation run: every query forced to fall back, so that no test passes vacuously.

With ``DFDPY_TEST_FORCE_FALLBACK=1`` (read here, by the test suite only; the package never
reads it), ``DistributedContext`` refuses to distribute any query, as if each one could not
be: with the default ``fallback="coordinator"`` every query then runs single-node on the
coordinator. A test that still passes proved nothing about distribution — unless it never
claimed to, and then it is listed in :data:`INDEPENDENT` below with why.

So under the switch each test's outcome is judged again (CI runs ``pytest tests -m "not
slow"`` with it):

* a test not listed must fail (or error): reported as an expected failure (``xfailed``);
* a test not listed that passes is reported as failed: it passes without the workers;
* a listed test keeps its outcome: it must pass single-node too (a listed test that fails
  is not independent of distribution, and the list is wrong).

The pytest exit code is then 0 exactly when every test that claims distribution failed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

ACTIVE = os.environ.get("DFDPY_TEST_FORCE_FALLBACK") == "1"
#: The reason every query falls back with during the mutation run.
REASON = "the test suite's mutation run forces every query to run single-node"

#: The tests that do not depend on distribution, by module (file name under tests/) and test
#: function (parameters left out), with why: they pass when every query runs single-node.
#: A whole module is named with "*".
INDEPENDENT: dict[str, dict[str, str]] = {
    "test_package.py": {"*": "the package's layout, modules and build, not its queries"},
    "test_patches.py": {"*": "what importing the package changes in datafusion, no query"},
    "test_frame_methods.py": {
        "test_every_public_method_is_classified": "the table of methods, no query",
        "test_each_handling_is_what_the_frames_do": "the table against the method sets",
    },
    "test_plan_request.py": {
        "test_every_entry_point_takes_the_one_request": "the core's signatures, no query",
    },
    "test_cluster.py": {
        "test_local_cluster_runs_setup_in_each_worker": "a cluster's start, no query",
        "test_bad_setup_fails_cluster_start_with_the_log": "a cluster's start, no query",
        "test_console_script_help": "the worker CLI's help",
        "test_orphaned_workers_exit_when_parent_is_killed": "workers' lifetime, no query",
        "test_a_killed_worker_process_counts_as_starting_before_it_is_reaped": (
            "a process's exit as /proc reads it, no query"
        ),
        "test_exit_while_a_daemon_thread_runs_a_query": (
            "its query runs in a child interpreter, which the switch does not reach"
        ),
        "test_examples_localhost_worker_and_distributed_run": (
            "the examples run in processes of their own, which the switch does not reach"
        ),
    },
    "test_extension_functions.py": {
        "test_register_functions_says_what_is_wrong": "registering functions, no query",
        "test_the_worker_cli_names_a_package_it_cannot_import": "the worker CLI's start, no query",
    },
    "test_memory.py": {
        "test_stall_timeout_is_validated_and_settable": "config values",
        "test_the_session_s_information_schema_setting_is_left_as_it_was": (
            "the session's settings after a DistributedContext is made, no query"
        ),
        "test_local_cluster_workers_share_80_percent_of_the_machine_by_default": (
            "the workers' command lines, no query"
        ),
        "test_local_cluster_memory_limit_none_is_unbounded_and_a_size_is_kept": (
            "the workers' command lines, no query"
        ),
        "test_a_bad_memory_limit_is_refused_naming_it": "argument checking",
    },
    "test_config_defaults.py": {
        "test_every_knob_sent_is_the_planners_default_unless_we_say_why": "config values",
    },
    "test_dataframe.py": {
        "test_user_ctx_still_plans_single_node": "about ctx, which must stay single-node",
    },
    "test_dataframe_api.py": {
        "test_errors_of_a_step_are_single_nodes": "a step's error is raised building the step",
    },
    "test_errors.py": {
        "test_bad_config_type": "argument checking",
        "test_config_validation": "argument checking",
        "test_empty_worker_list": "argument checking",
        "test_malformed_worker_url": "URL checking",
        "test_missing_scheme_suggests_http": "URL checking",
        "test_not_a_session_context": "argument checking",
        "test_single_string_instead_of_list": "argument checking",
        "test_sql_error_keeps_datafusion_message": "SQL errors are raised by dctx.sql, unplanned",
        "test_version_mismatch_message": "the import-time version check",
        "test_worker_stop_takes_any_drain_time": "a worker's own stop, no query",
        "test_worker_urls_read_as_written": "URL bookkeeping",
    },
    "test_history.py": {
        "test_each_run_is_one_record_with_stages_tasks_and_workers": (
            "its queries run in a process of its own, which the switch does not reach"
        ),
        "test_the_log_holds_no_table_values": "the same process's log",
        "test_workers_log_each_task_they_ran": "the same process's log",
        "test_the_history_view_shows_past_queries_in_a_browser": "the same process's log",
        "test_filters_of_the_page_data_and_a_missing_query": "the same process's log",
        "test_rotation_by_size_and_concurrent_writers": (
            "its queries run in processes of their own, which the switch does not reach"
        ),
        "test_an_event_log_that_cannot_be_written_is_named": (
            "the log's location is checked before anything is planned"
        ),
        "test_a_fallback_is_logged_with_its_reason": "a query that runs single-node anyway",
        "test_a_log_is_read_as_it_grows_whole_lines_only": "the reader of a log file, no query",
    },
    "test_metrics_endpoint.py": {
        "test_no_open_port_without_a_token": "the endpoint's access rule, no query",
        "test_the_grafana_dashboard_reads_only_metrics_workers_serve": (
            "the dashboard file against a scrape, no query"
        ),
    },
    "test_tracing.py": {
        "test_spans_reach_the_users_otlp_collector_from_a_program_of_its_own": (
            "its query runs in a process of its own, which the switch does not reach"
        ),
    },
    "test_live_view.py": {
        "test_dashboard_needs_its_token_and_stays_local": "the dashboard's access rules",
    },
    "test_object_store.py": {
        "test_store_classes_stay_classes": "datafusion's object store classes, no query",
    },
    "test_observability.py": {
        "test_progress_defaults_off_when_not_interactive": "a default, no query",
    },
    "test_plans.py": {
        "test_embedded_cluster_defaults_to_at_least_two_workers": "a default, no query",
    },
    "test_security.py": {
        "test_a_peer_without_the_token_is_refused_on_every_rpc": "a worker's refusal, no query",
        "test_the_right_token_gets_an_answer": "a worker's RPC answered, no query",
        "test_listening_beyond_loopback_needs_a_token": "a worker's start refused",
        "test_wildcard_worker_advertises_a_dialable_address": "a worker's address, no query",
    },
    "test_statements.py": {
        "test_a_setting_however_written_changes_the_config": "SET distributed.* is config",
        "test_a_set_inside_a_string_is_a_query": "how a statement is read, not where it runs",
        "test_other_statements_fail_as_single_node": "errors of statements that never plan",
    },
}


def _listed(item: pytest.Item) -> bool:
    module = item.path.name
    tests = INDEPENDENT.get(module, {})
    name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    return "*" in tests or name in tests


def force_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every query of every ``DistributedContext`` refuse distribution: whatever the
    core is asked to run (a query, a result or table to keep on the workers) is made by
    ``planning.request_for``."""
    from datafusion_distributed_py import planning
    from datafusion_distributed_py.errors import UnsupportedPlanError

    def refuse(*args: Any) -> Any:
        raise UnsupportedPlanError(REASON)

    monkeypatch.setattr(planning, "request_for", refuse)


@pytest.fixture(autouse=True, scope="session")
def _forced_fallback() -> Iterator[None]:
    if not ACTIVE:
        yield
        return
    mp = pytest.MonkeyPatch()
    force_fallback(mp)
    try:
        yield
    finally:
        mp.undo()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    if not ACTIVE:
        return
    report = outcome.get_result()
    if report.skipped or _listed(item):
        if report.failed and _listed(item):
            report.longrepr = (
                f"{report.longrepr}\n\nlisted in tests/mutation.py as independent of "
                "distribution, yet it fails when every query runs single-node"
            )
        return
    if report.failed:
        # It noticed: the claim of distribution held it up.
        report.outcome = "skipped"
        report.wasxfail = "fails when every query runs single-node, as it should"
    elif report.when == "call" and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            "passed with every query forced to run single-node on the coordinator "
            f"({REASON}): it proves nothing about distribution. Assert where the query ran "
            "(datafusion_distributed_py.testing.assert_distributed_equal / "
            "assert_ran_on_workers), or list it in tests/mutation.py INDEPENDENT with why."
        )
