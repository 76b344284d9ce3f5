"""The shared-prefix workload and the server's prefix-cache figures (issue 20 item 4).

Prompts share exactly the document and differ right after it (text and token ids); a fake server
with a prefix cache behind /metrics gives the measured requests' differences; a server without
/metrics says "not exposed"."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import measured, run

from roofline.bench.loadgen import Scenario
from roofline.bench.options import BenchOptions, plan_from_options
from roofline.bench.results import read_requests
from roofline.bench.scrape import (
    PrefixCache,
    Reading,
    cache_table,
    difference,
    parse_prometheus,
    reading_of,
)
from roofline.bench.summary import RunSummary
from roofline.bench.tables import tables
from roofline.bench.workloads import Length, shared_prefix_prompts
from roofline.errors import UserError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from fixtures import tiny_tokenizer_json  # tests/engine: the tiny byte-level BPE tokenizer

HERE = Path(__file__).resolve().parent


def common_prefix(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_prompts_share_exactly_the_document_then_differ_in_text():
    ps = shared_prefix_prompts(12, 40, 8, Length(16, 16), seed=3)
    doc = ps[0].messages[0]["content"]
    assert len(doc.split()) == 40
    questions = [p.messages[1]["content"] for p in ps]
    assert len(set(questions)) == len(ps) and len({p.id for p in ps}) == len(ps)
    for p, q in zip(ps, questions, strict=True):
        assert p.messages == [
            {"role": "system", "content": doc},
            {"role": "user", "content": q},
        ]
        assert p.prompt == f"{doc}\n\n{q}" and len(q.split()) == 8 and p.max_tokens == 16
    for a in ps:  # shared: the document, "\n\nQ" and at most the number's leading digits
        for b in ps:
            if a is not b:
                assert len(doc) + 3 <= common_prefix(a.prompt, b.prompt) <= len(doc) + 4


def test_prompts_share_exactly_the_documents_token_ids_then_differ():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tiny_tokenizer_json())
    ps = shared_prefix_prompts(10, 100, 12, Length(8, 8), seed=1, tokenizer=tok)
    doc = ps[0].messages[0]["content"]
    doc_ids = tok.encode(doc, add_special_tokens=False).ids
    assert len(doc_ids) == 100
    ids = [tok.encode(p.prompt, add_special_tokens=False).ids for p in ps]
    for p, full in zip(ps, ids, strict=True):
        assert full[:100] == doc_ids  # the document's ids whatever follows
        q = tok.encode(p.messages[1]["content"], add_special_tokens=False).ids
        assert len(q) == 12
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            n = common_prefix(a, b)
            assert 100 <= n <= 100 + 4  # shared: the document, a separator, the number's start


def test_options_choose_the_workload_from_the_registry():
    plan = plan_from_options(
        BenchOptions(
            url="http://127.0.0.1:9",
            workload="shared-prefix",
            prefix_tokens=50,
            suffix_tokens=5,
            num_requests=20,
            concurrency="1,4",
        )
    )
    # a prompt for each request and warm-up (and the usage probe) of both scenarios
    assert len(plan.prompts) == 2 * (20 + 1 + 1) and plan.prompts[0].category == "shared-prefix"
    assert plan.ignore_eos and plan.fresh_prompts and plan.reps == 1
    assert plan.provenance_extra["workload"] == {
        "name": "shared-prefix",
        "prefix_tokens": 50,
        "suffix_tokens": 5,
        "sized_by": "words (about one token each)",
    }
    plan = plan_from_options(BenchOptions(url="x:1", workload="shared-prefix", concurrency="1,32"))
    assert [s.num_requests for s in plan.scenarios] == [64, 128]  # as a closed loop's default
    assert len(plan.prompts) == 64 + 128 + 2 * 2
    timed = BenchOptions(url="x:1", workload="shared-prefix", concurrency="4", duration="20s")
    assert len(plan_from_options(timed).prompts) == 2048  # a duration: a long list
    plan = plan_from_options(BenchOptions(url="x:1", synthetic=True, num_requests=3))
    assert plan.provenance_extra["workload"]["name"] == "synthetic" and plan.ignore_eos
    plan = plan_from_options(BenchOptions(url="x:1"))
    assert plan.provenance_extra["workload"] == {"name": "builtin"} and not plan.fresh_prompts
    with pytest.raises(UserError, match="disagree"):
        plan_from_options(BenchOptions(url="x:1", workload="builtin", synthetic=True))


ROOFLINE_TEXT = """# HELP roofline_prefix_cache_hits_total hits
# TYPE roofline_prefix_cache_hits_total counter
roofline_prefix_cache_hits_total 7.0
roofline_prefix_cache_lookups_total 10.0
roofline_prefix_cache_tokens_reused_total{model="a b"} 3000.0
roofline_prefix_cache_tokens_reused_total{model="c"} 500.0
roofline_prefix_cache_bytes 2.5e6
roofline_prefix_cache_evictions_total 1.0
"""


def test_prometheus_text_reads_as_figures_summed_over_labels():
    samples = parse_prometheus(ROOFLINE_TEXT)
    assert samples["roofline_prefix_cache_tokens_reused_total"] == 3500.0
    r = reading_of(samples)
    assert r.source.name == "roofline"
    assert r.values == {
        "hits": 7.0,
        "lookups": 10.0,
        "tokens_reused": 3500.0,
        "cache_bytes": 2.5e6,
        "evictions": 1.0,
    }
    vllm = reading_of(
        parse_prometheus(
            'vllm:prefix_cache_queries_total{model_name="m"} 900.0\n'
            'vllm:prefix_cache_hits_total{model_name="m"} 600.0\n'
        )
    )
    assert vllm.source.name == "vllm" and vllm.source.unit == "tokens"
    assert vllm.values == {"hits": 600.0, "lookups": 900.0, "tokens_reused": 600.0}
    # llama-server's /metrics: no cache counters
    none = reading_of(parse_prometheus("llamacpp:prompt_tokens_total 120\n"))
    assert none.source is None and "no prefix-cache figures" in none.error


def test_difference_takes_counters_apart_and_the_cache_size_as_after():
    before = reading_of(parse_prometheus(ROOFLINE_TEXT))
    after = reading_of(
        parse_prometheus(
            ROOFLINE_TEXT.replace("hits_total 7.0", "hits_total 19.0")
            .replace("lookups_total 10.0", "lookups_total 26.0")
            .replace('{model="c"} 500.0', '{model="c"} 4500.0')
        )
    )
    c = difference(before, after)
    assert (c.exposed, c.hits, c.lookups, c.tokens_reused, c.evictions) == (
        True,
        12.0,
        16.0,
        4000.0,
        0.0,
    )
    assert c.cache_bytes == 2.5e6 and c.hit_rate == 0.75
    assert PrefixCache.from_json(json.loads(json.dumps(c.to_json()))) == c
    gone = difference(before, Reading(error="GET /metrics answered HTTP 404"))
    assert not gone.exposed and gone.note == "GET /metrics answered HTTP 404"
    assert gone.hit_rate is None


@contextlib.contextmanager
def cache_server():
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "cache_server.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"cache server did not start: {line!r} {proc.stderr.read()}")
        yield line.split()[-1]
    finally:
        proc.terminate()
        proc.wait(5)


def run_shared_prefix(url: str, out: Path, api: str):
    prompts = shared_prefix_prompts(40, 30, 4, Length(4, 4))
    scenarios = [
        Scenario("concurrency", concurrency=1, num_requests=5),
        Scenario("concurrency", concurrency=3, num_requests=9),
    ]
    extra = {"workload": {"name": "shared-prefix"}}
    return run(
        url,
        scenarios,
        out,
        prompts=prompts,
        api=api,
        fresh_prompts=True,
        provenance_extra=extra,
        warmup=2,
    )


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_server_with_a_prefix_cache_gives_the_measured_requests_figures(tmp_path, api):
    with cache_server() as url:
        outcome = run_shared_prefix(url, tmp_path, api)
    s = outcome.summary
    assert [x.requests.ok for x in s.scenarios] == [5, 9]
    sent = 0
    for x, n in zip(s.scenarios, (5, 9), strict=True):
        c = x.prefix_cache
        # every measured request finds the 30-word document (the warm-ups put it there) and
        # reuses it only: no measured question was sent before
        assert (c.exposed, c.source, c.unit) == (True, "roofline", "requests")
        assert (c.hits, c.lookups, c.tokens_reused, c.evictions) == (n, n, 30 * n, 0)
        sent += n + 2 + (1 if x is s.scenarios[0] else 0)  # warm-ups; the first negotiates usage
        assert c.cache_bytes == 1000 * sent
    lines, _ = read_requests(tmp_path)
    ids = [ln.prompt for ln in measured(lines)]
    assert len(set(ids)) == len(ids)  # fresh prompts: the second scenario went on down the list
    on_disk = RunSummary.from_json(json.loads((tmp_path / "summary.json").read_text()))
    assert on_disk.scenarios[1].prefix_cache == s.scenarios[1].prefix_cache
    assert on_disk.scenarios[1].prefix_cache.hit_rate == 1.0
    _, headers, rows, notes = cache_table(s)
    assert headers[:4] == ["scenario", "hits", "lookups", "hit rate"]
    assert rows[1][1:6] == ["9", "9", "100.0%", "270", "0.0"]
    assert any("roofline's /metrics" in n for n in notes)


def test_a_server_without_metrics_says_not_exposed(tmp_path, null_url):
    extra = {"workload": {"name": "shared-prefix"}}
    outcome = run(
        null_url,
        [Scenario("concurrency", concurrency=2, num_requests=4)],
        tmp_path,
        provenance_extra=extra,
    )
    c = outcome.summary.scenarios[0].prefix_cache
    assert not c.exposed and "HTTP 404" in c.note
    table = next(t for t in tables(outcome.summary) if t[0].startswith("prefix cache"))
    assert table[2][0][1] == "not exposed" and "HTTP 404" in table[3][0]
    assert not any(t[0].startswith("per prompt") for t in tables(outcome.summary))  # one-offs
    # a workload not about the cache prints no table for a server without figures
    plain = run(null_url, [Scenario("sequential", num_requests=2)], tmp_path / "plain")
    assert cache_table(plain.summary) is None
    assert any(t[0].startswith("per prompt") for t in tables(plain.summary))
    assert not plain.summary.scenarios[0].prefix_cache.exposed


def test_serving_benchmark_dry_run_prints_matching_commands():
    """benchmarks/serving.py --dry-run: llama-server's slots equal roofline's --max-batch, flash
    attention on, and both workloads benched against each server."""
    script = HERE.parents[1] / "benchmarks" / "serving.py"
    args = ["--model", "m.gguf", "--llama-server", "ls", "--dry-run", "--concurrency", "1,4"]
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("CPU: ")
    llama = next(ln for ln in lines if ln.startswith("ls "))
    serve = next(ln for ln in lines if " serve " in ln)
    assert " -np 4 " in llama and "--flash-attn" in llama and " -m m.gguf " in llama
    assert "--max-batch 4" in serve and "--model m.gguf" in serve
    benches = [ln for ln in lines if " bench " in ln]
    assert len(benches) == 4 and sum("--workload shared-prefix" in ln for ln in benches) == 2


def test_prometheus_client_exposition_reads_back():
    """The embedded server writes /metrics with prometheus_client: counters gain `_total` and a
    `_created` sample beside it, which must not be read as the figure."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    reg = CollectorRegistry()
    for name, value in (("hits", 3), ("lookups", 4), ("tokens_reused", 960), ("evictions", 2)):
        Counter(f"roofline_prefix_cache_{name}", name, registry=reg).inc(value)
    Gauge("roofline_prefix_cache_bytes", "bytes", registry=reg).set(1 << 20)
    r = reading_of(parse_prometheus(generate_latest(reg).decode()))
    assert r.source.name == "roofline"
    assert r.values == {
        "hits": 3.0,
        "lookups": 4.0,
        "tokens_reused": 960.0,
        "cache_bytes": float(1 << 20),
        "evictions": 2.0,
    }
