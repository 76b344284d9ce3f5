"""The `slow` and `exactness` markers for single tests.

`python -m pytest -m "not slow" -q` is the fast subset. A module that is mostly slow marks itself
(`pytestmark = pytest.mark.slow`). A slow test in an otherwise quick module is named here, by its
file under tests/ and its function, so the test file keeps no marker lines of its own. CI runs
every test, marked or not.

`exactness`: the tests of the engine's promise that no setting changes a bit (prefill splits, the
prefix cache, stored vs fp32, speculation on vs off, batched vs alone, thread counts).
tests/engine/test_isa.py runs them again with the kernels compiled for AVX2, so that a host with
AVX-512 checks the code an AVX2 host runs too. tests/test_house_rules.py checks that every name in
both tables is still a test its file defines.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import avx2_run

# No test reaches the Hub: a model name that falls through to a Hub id (`nobody/nothing`) meets
# huggingface_hub's offline mode, read from the environment when it is first imported, here before
# any; the Hub tests point it at a fake Hub on loopback (tests/modelspec/fake_hub.py)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

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
    "engine/runtime/speculate/test_spec_server.py": frozenset(
        {"test_default_model_real_prompts_identical"}
    ),
    "engine/runtime/test_generate.py": frozenset(
        {
            "test_cli_generate_json",
            "test_cli_generate_with_speculation_gives_the_same_text_in_fewer_passes",
        }
    ),
    "engine/loading/test_loaders_default.py": frozenset(
        {"test_every_tensor_matches_transformers_gguf_loading"}
    ),
    "engine/serve/test_server_engine.py": frozenset(
        {"test_roofline_serve_default_model_end_to_end"}
    ),
    "hardware/test_probe.py": frozenset({"test_cli_quick_json_prints_the_profile_and_saves_it"}),
    "modelspec/test_file_weights.py": frozenset({"test_shipped_smollm2_gguf"}),
    "engine/serve/test_server_stop.py": frozenset(
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


# file (relative to tests/) -> its exactness tests; ALL: every test of the file
ALL = frozenset({"*"})
EXACTNESS_TESTS: dict[str, frozenset[str]] = {
    "engine/runtime/test_prefill_rows.py": ALL,
    "engine/runtime/test_prefill_chunked.py": frozenset(
        {
            "test_prefill_in_pieces_equals_one_call_bit_for_bit",
            "test_scheduler_output_does_not_depend_on_what_else_runs",
        }
    ),
    "engine/runtime/test_prefix_cache_exact.py": frozenset(
        {
            "test_cached_prefixes_give_a_cold_prefills_logits_bit_for_bit",
            "test_concurrent_requests_sharing_and_evicting_entries_give_cold_ids",
            "test_cached_prefixes_with_speculation_give_cold_ids",
        }
    ),
    "engine/kernels/test_stored_formats.py": frozenset(
        {
            "test_products_on_stored_rows_equal_the_float32_kernel_bit_for_bit",
            "test_rows_of_several_formats_in_one_matrix",
            "test_a_kernel_compiled_for_a_set_of_formats_widens_those_and_marks_any_other",
            # not `test_a_model_in_each_format_decodes_the_float32_paths_ids`: what it adds to the
            # kernel tests above is the loaders' unpacking (numpy, the same on every ISA), and its
            # every-format decode kernels would take four minutes more to compile for AVX2
        }
    ),
    "engine/runtime/speculate/test_exactness.py": ALL,
    "engine/kernels/test_kernels_decode.py": ALL,
    "engine/kernels/test_kernel_shapes.py": frozenset(
        {
            "test_every_variant_gives_the_default_products_on_stored_rows",
            "test_every_variant_gives_the_default_products_on_float32_rows",
            # not the whole model's: its every-format decode pass would take minutes to compile
            # for AVX2, and the matrices are all a shape changes
        }
    ),
    "engine/kernels/test_kernels.py": frozenset(
        {
            "test_k_row_matvec_is_bit_identical_to_one_row",
            "test_a_run_of_rows_of_one_slot_gives_each_row_its_attention_alone",
            "test_sliding_window_attention_matches_torch_and_each_row_alone",
        }
    ),
    "engine/runtime/test_runner.py": frozenset(
        {
            "test_batched_decode_equals_each_slot_alone_bit_for_bit",
            "test_extend_equals_token_by_token_decode_bit_for_bit",
        }
    ),
    "engine/runtime/test_scheduler.py": frozenset(
        {"test_batched_requests_equal_solo_runs_and_share_decode_steps"}
    ),
    "engine/runtime/test_gemma3.py": frozenset(
        {
            "test_stored_q8_0_equals_fp32_bit_for_bit",
            "test_speculation_on_equals_off",
            "test_four_streams_equal_one",
        }
    ),
    # the k-row pass over experts and the batch on stored rows (one pass compiled, for Q8_0 with
    # MXFP4 experts: test_gpt_oss's too); stored == fp32 adds nothing on experts the stored-format
    # kernel tests do not check
    "engine/runtime/test_moe.py": frozenset(
        {"test_four_streams_equal_one", "test_a_k_row_pass_equals_k_one_row_passes"}
    ),
    "engine/runtime/test_threads.py": frozenset(
        {"test_greedy_ids_are_identical_with_one_two_and_adaptive_threads"}
    ),
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marks must be on the items by then
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = SLOW_TESTS.get(item.path.resolve().relative_to(TESTS).as_posix(), ())
        if getattr(item, "originalname", item.name) in names:
            item.add_marker(pytest.mark.slow)
        exact = EXACTNESS_TESTS.get(item.path.resolve().relative_to(TESTS).as_posix(), ())
        if exact == ALL or getattr(item, "originalname", item.name) in exact:
            item.add_marker(pytest.mark.exactness)


# tests/engine/test_isa.py's AVX2 exactness run (tests/avx2_run.py), owned by this process when the
# tests run in it, by the xdist controller when they run in workers: the controller collects
# nothing itself, and hands the run's folder to each worker before it starts.
def pytest_collection_finish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        avx2_run.start_if_wanted(session.config, [item.nodeid for item in session.items])


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    node.workerinput[avx2_run.FOLDER_KEY] = str(avx2_run.owner_folder(node.config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    avx2_run.start_if_wanted(node.config, ids)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        avx2_run.end(session.config)
