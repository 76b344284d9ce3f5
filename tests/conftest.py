"""The `slow` marker for single tests: `python -m pytest -m "not slow" -q` is the fast subset.

A module that is mostly slow marks itself (`pytestmark = pytest.mark.slow`). A slow test in an
otherwise quick module is named here, by its file under tests/ and its function, so the test
file keeps no marker lines of its own; tests/test_house_rules.py checks that every name here is
still a test its file defines. CI runs every test, marked or not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# the engine's runtime settings (passive OpenMP waits, MKL's strict reproducibility), as every
# process that serves or generates has them: made on its import, before any test calls torch
import roofline.engine  # noqa: F401

TESTS = Path(__file__).resolve().parent

# file (relative to tests/) -> test functions that take seconds each (servers, subprocesses,
# real models); a parametrized test is named once and marks all its cases.
SLOW_TESTS: dict[str, frozenset[str]] = {
    "bench/test_engines.py": frozenset({"test_real_embedded_server_through_the_registry"}),
    "bench/test_faults.py": frozenset({"test_cli_exit_codes"}),
    "bench/test_interrupt.py": frozenset(
        {"test_interrupt_writes_cancelled_requests_and_a_summary"}
    ),
    "bench/test_verify.py": frozenset({"test_cli_reports_the_divergence_and_exits_0"}),
    "cli/test_ceiling_model_files.py": frozenset({"test_broken_gguf_is_one_line_exit_2"}),
    "engine/speculate/test_spec_server.py": frozenset(
        {"test_default_model_real_prompts_identical"}
    ),
    "engine/test_generate.py": frozenset(
        {
            "test_cli_generate_json",
            "test_cli_generate_with_speculation_gives_the_same_text_in_fewer_passes",
        }
    ),
    "engine/test_loaders_default.py": frozenset(
        {"test_every_tensor_matches_transformers_gguf_loading"}
    ),
    "engine/test_server_engine.py": frozenset({"test_roofline_serve_default_model_end_to_end"}),
    "hardware/test_probe.py": frozenset({"test_cli_quick_json_prints_the_profile_and_saves_it"}),
    "modelspec/test_file_weights.py": frozenset({"test_shipped_smollm2_gguf"}),
    "engine/test_server_stop.py": frozenset(
        {"test_sigterm_lets_streams_finish_and_a_second_ctrl_c_ends_the_rest"}
    ),
    "report/test_report_folders.py": frozenset(
        {"test_ceiling_plot", "test_two_runs_side_by_side", "test_tune_folder_with_only_trials"}
    ),
    "tune/test_search.py": frozenset(
        {"test_tpe_reaches_within_10_percent_of_the_grid_best_in_a_third_of_its_trials"}
    ),
    "tune/test_trials.py": frozenset(
        {
            "test_crash_hang_garbage_fail_with_log_tails_and_the_study_goes_on",
            "test_goodput_and_cost_objectives",
            "test_the_exactness_gate_rejects_a_faster_inexact_configuration",
            "test_tpe_through_the_tuner",
        }
    ),
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marks must be on the items by then
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = SLOW_TESTS.get(item.path.resolve().relative_to(TESTS).as_posix(), ())
        if getattr(item, "originalname", item.name) in names:
            item.add_marker(pytest.mark.slow)
