"""A request's own speculation options (`roofline_speculation`): the same token ids and stats as a
server started with them, one maker per distinct options, and a 400 for nonsense."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fixtures import greedy_ids
from server_helpers import sdk, serving

from roofline import speculation
from roofline.engine import load_runner
from roofline.engine.runtime.scheduler import Scheduler
from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.step import speculation_factory

PROMPTS = ["1, 2, 3, 4, 1, 2, 3, 4, 1, 2,", "a b c a b c a b", "def fib(n):", "Hello"]
N = 20
LIVE = [
    {"method": "trie", "max_bfs_breadth": 4, "adaptive": False},
    {"method": "ngram", "k": 3, "prompt_lookup_min": 1, "adaptive": False},
    {"method": "suffix", "tree": False, "adaptive": False},
    {"method": "none"},
]


def _ask(url: str, name: str, prompt: str, options: dict | None) -> dict:
    body = {
        "model": name,
        "prompt": prompt,
        "max_tokens": N,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    if options is not None:
        body["roofline_speculation"] = options
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _served(runner, options: SpecOptions | None):
    maker = speculation_factory(options, runner) if options else None
    return serving(None, scheduler=Scheduler(runner, speculation=maker))


def test_request_options_equal_a_server_started_with_them(tiny_gguf):
    """Per request (several options at once, interleaved) vs one server per options: same ids,
    same draft counts; and both equal plain greedy decoding."""
    reference = load_runner(str(tiny_gguf), max_batch=1, max_seq_len=128)
    tok = reference.tokenizer
    expected = [greedy_ids(reference, tok.encode(p), N) for p in PROMPTS]
    runner = load_runner(str(tiny_gguf), max_batch=4, max_seq_len=128)
    started = {}
    for i, opts in enumerate(LIVE):
        with _served(runner, SpecOptions(**opts)) as url:
            name = sdk(url).models.list().data[0].id
            started[i] = [_ask(url, name, p, None) for p in PROMPTS]
    with _served(runner, None) as url:
        name = sdk(url).models.list().data[0].id
        jobs = [(i, p) for p in range(len(PROMPTS)) for i in range(len(LIVE))]
        with ThreadPoolExecutor(4) as pool:
            live = list(pool.map(lambda j: _ask(url, name, PROMPTS[j[1]], LIVE[j[0]]), jobs))
        together = {(i, p): r for (i, p), r in zip(jobs, live)}
        # one at a time too: the draft counts of a request alone do not depend on its neighbours
        alone = {(i, p): _ask(url, name, PROMPTS[p], LIVE[i]) for i, p in jobs}
    for i, p in jobs:
        ids = started[i][p]["choices"][0]["token_ids"]
        assert ids == expected[p]
        assert together[(i, p)]["choices"][0]["token_ids"] == ids, (LIVE[i], PROMPTS[p])
        assert alone[(i, p)]["roofline"] == started[i][p]["roofline"], (LIVE[i], PROMPTS[p])
    assert any(r["roofline"]["drafted_tokens"] for r in alone.values())


def test_makers_are_kept_per_distinct_options(tiny_gguf):
    """A shared trie learns across requests with the same options only; the server's own options
    share the server's maker."""
    runner = load_runner(str(tiny_gguf), max_batch=2, max_seq_len=128)
    shared = {"method": "trie", "trie_scope": "shared", "adaptive": False}
    server_opts = SpecOptions(**shared)
    scheduler = Scheduler(runner, speculation=speculation_factory(server_opts, runner))
    prompt = "Hello"
    with serving(None, scheduler=scheduler) as url:
        name = sdk(url).models.list().data[0].id
        first = _ask(url, name, prompt, shared)["roofline"]
        second = _ask(url, name, prompt, None)["roofline"]  # the server's maker: it remembers
        other = _ask(url, name, prompt, {**shared, "max_bfs_breadth": 3})["roofline"]
    assert second["accepted_tokens"] > first["accepted_tokens"]
    assert other["accepted_tokens"] == first["accepted_tokens"]  # a fresh trie of its own
    assert speculation.cross_request(server_opts)
    assert scheduler.speculation.cross_request
    assert len(scheduler._makers) == 1


def test_cross_request_agrees_with_the_engines_makers(tiny_gguf):
    runner = load_runner(str(tiny_gguf), max_batch=1, max_seq_len=64)
    for method in ("ngram", "trie", "suffix"):
        for scope in speculation.TRIE_SCOPES:
            o = SpecOptions(method, trie_scope=scope, suffix_scope=scope, adaptive=False)
            made = speculation_factory(o, runner)
            assert speculation.cross_request(o) == made.cross_request, (method, scope)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"method": "beam"}, "method must be one of"),
        ({"method": "trie", "max_bfs_breadth": 0}, "max_bfs_breadth"),
        ({"method": "trie", "max_bfs_breadth": "4"}, "max_bfs_breadth must be an int"),
        ({"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2}, "<="),
        ({"method": "trie", "breadth": 4}, "unknown option 'breadth'"),
        ({"method": "draft", "draft_model": "/etc/passwd"}, "when the server starts"),
        ({"method": "trie", "tree": 1}, "tree must be a bool"),
        ("trie", "roofline_speculation"),
    ],
)
def test_nonsense_options_are_a_400(tiny_gguf, options, fragment):
    runner = load_runner(str(tiny_gguf), max_batch=1, max_seq_len=64)
    with serving(runner) as url:
        body = {"prompt": "Hello", "max_tokens": 2, "roofline_speculation": options}
        r = httpx.post(url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert fragment in err["message"]
    assert err["param"].startswith("roofline_speculation")


def test_a_requests_thread_limit_runs_its_passes_on_that_many_threads(tiny_gguf):
    """`roofline_threads`: the passes of the request run on that many threads (the runner is
    asked for it), the ids are those of the server's own count; more than the server has is a
    400, as is a count below 1."""
    runner = load_runner(str(tiny_gguf), max_batch=2, max_seq_len=64, threads=2)
    used: list[int] = []
    pick = runner._use_threads

    def spy() -> int:
        n = pick()
        used.append(n)
        return n

    runner._use_threads = spy
    with serving(runner) as url:
        name = sdk(url).models.list().data[0].id
        plain = _ask(url, name, PROMPTS[0], None)
        assert set(used) == {2}
        used.clear()
        body = {"model": name, "prompt": PROMPTS[0], "max_tokens": N, "temperature": 0}
        body |= {"ignore_eos": True, "return_token_ids": True, "roofline_threads": 1}
        one = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
        assert set(used) == {1}
        assert one["choices"][0]["token_ids"] == plain["choices"][0]["token_ids"]
        for asked, fragment in ((3, "at most 2 threads"), (0, "greater than or equal")):
            r = httpx.post(url + "/v1/completions", json=body | {"roofline_threads": asked})
            assert r.status_code == 400, r.text
            assert fragment in r.json()["error"]["message"]
    assert runner.pass_threads is None  # no live request asks any more


def test_a_requests_kernel_shapes_are_its_passes_and_change_no_id(tiny_gguf):
    """`roofline_kernels`: the passes that hold the request take the shapes it names from those
    the server offers (here an extreme one as "measured"), with the ids of the server's own; an
    unknown name is a 400."""
    from roofline.engine.kernels.kernel_shapes import KNOBS, KernelShape
    from roofline.engine.runtime.kernel_choice import KernelChoice

    runner = load_runner(str(tiny_gguf), max_batch=2, max_seq_len=64, threads=2)
    least = KernelShape(**{k.field: min(k.values) for k in KNOBS})
    runner.kernel_choices["measured"] = KernelChoice(least, least, "measured")
    seen: list[object] = []
    pick = runner._use_threads

    def spy() -> int:
        seen.append(runner.pass_kernels)
        return pick()

    runner._use_threads = spy
    with serving(runner) as url:
        name = sdk(url).models.list().data[0].id
        plain = _ask(url, name, PROMPTS[0], None)
        assert set(seen) == {None}
        seen.clear()
        body = {"model": name, "prompt": PROMPTS[0], "max_tokens": N, "temperature": 0}
        body |= {"ignore_eos": True, "return_token_ids": True, "roofline_kernels": "measured"}
        tuned = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
        assert set(seen) == {"measured"}
        assert tuned["choices"][0]["token_ids"] == plain["choices"][0]["token_ids"]
        r = httpx.post(url + "/v1/completions", json=body | {"roofline_kernels": "fastest"})
        assert r.status_code == 400, r.text
    assert runner.pass_kernels is None  # no live request asks any more
