"""ModelRunner: the weights in decode layout, the KV cache, and the two steps of generation.

prefill(slot, ids, start=0): the prompt, K/V written from position `start`, in passes of the
    decode kernels (`prefill_chunks.prefill_passes`), each row summed as a one-row decode sums it:
    the logits and K/V of decoding the prompt one token at a time, however it is cut.
decode(slots, ids): one new token for each slot at that slot's own position, all rows in one call of
    the numba kernels (`decode.decode_rows`), which reads each weight once for the whole batch.
extend(slot, ids): several tokens of one slot in one kernel pass (a speculative verify).
save_kv / load_kv: copies of a slot's K/V positions out and back in (the prefix cache's granules).

The weights are packed once (`weights.pack_weights`: fused, stacked over layers, bf16 / int8) or
kept in the file's blocks (`stored_weights.pack_stored`); fp32 is the stored path over F32 rows of
every weight expanded (`stored_weights.expanded`).

How long passes take (the speculation cost model, the first thread count): pass_timing.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence as Seq

import numpy as np

from roofline import dtypes
from roofline.engine.kernels.kv_cache import ATTN_CHUNK, KVCache
from roofline.engine.loading.checkpoint import file_bytes_per_token
from roofline.engine.loading.config import ModelConfig
from roofline.engine.loading.weights import (
    DTYPES,
    pack_weights,
    routed_expert_bytes,
    weight_bytes_per_token,
)
from roofline.engine.runtime.kernel_choice import KernelChoice, choose_kernels
from roofline.engine.runtime.pass_timing import (
    PASS_COST_ROWS,
    PassCosts,
    measure_pass_costs,
    seed_threads,
)
from roofline.engine.runtime.prefill_chunks import DEFAULT_PREFILL_CHUNK_TOKENS, prefill_passes
from roofline.engine.runtime.threads import ThreadChooser
from roofline.errors import UserError
from roofline.hardware.machine import usable_cpu_count as available_cores
from roofline.kernel_modes import KernelsMode
from roofline.response_stats import moe_bytes_per_pass
from roofline.simd_memory import aligned_empty

__all__ = ["DTYPES", "ModelRunner", "available_cores", "load_runner"]


class ModelRunner:
    """Owns the weights and the KV cache. Not thread-safe: one thread calls it."""

    # the scheduler's granule of prefill and the prefix cache's (prefill_chunks.py)
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS
    # set by the scheduler before each step: the requests' own thread limit (None: the chooser's
    # or the given count). Such passes are not the chooser's: not told to it
    pass_threads: int | None = None
    # set by the scheduler before each step: the kernel shapes the requests ask (None, or a mode
    # the runner was not given in `kernel_choices`: its own `kernels`)
    pass_kernels: KernelsMode | None = None

    def __init__(
        self,
        checkpoint,
        *,
        dtype: str = "fp32",
        threads: int | None = None,
        max_batch: int = 1,
        max_seq_len: int | None = None,
    ) -> None:
        from roofline.engine.kernels.rope import rope_table_stack

        self.config: ModelConfig = checkpoint.config
        self.tokenizer = checkpoint.tokenizer
        self.name: str = self.config.name
        self.path: str = str(checkpoint.path)
        self.dtype = dtype
        self.threads = threads or available_cores()  # the most a pass runs on
        # threads=None: each pass runs on the count that measured fastest lately
        # (threads.ThreadChooser); a given count is used as it is
        self.thread_chooser: ThreadChooser | None = (
            ThreadChooser(self.threads) if threads is None else None
        )
        self._timed_passes = 0
        self.max_batch = int(max_batch)
        self.max_seq_len = int(max_seq_len or self.config.max_seq_len)
        packing = dtypes.DTYPES[dtype].packing
        if packing != "matrix":
            from roofline.engine.loading.stored_weights import (
                expanded,
                pack_stored,
                stored_bytes_per_token,
                stored_routed_expert_bytes,
            )

            # fp32: F32 rows through the stored kernels, which give the float32 kernels' bits
            # (tests/engine/kernels/test_stored_formats.py) and compile sooner: a cold fp32
            # pass of the shipped file 120-132 -> 73-102 s, decoding 4-10% slower
            # (docs/measured.md)
            rows = checkpoint if packing == "stored" else expanded(checkpoint)
            self.weights = pack_stored(self.config, rows)
            self.bytes_per_token: int = stored_bytes_per_token(self.config, self.weights)
            self.routed_expert_bytes = stored_routed_expert_bytes(self.config, self.weights)
        else:
            self.weights = pack_weights(self.config, checkpoint.tensors, dtype)
            self.bytes_per_token = weight_bytes_per_token(self.config, self.weights, dtype)
            self.routed_expert_bytes = routed_expert_bytes(self.config, self.weights.experts, dtype)
        # experts the last pass read, layer by layer (the union of its rows' routes; none for a
        # dense model)
        self.last_expert_reads_by_layer = np.zeros(0, dtype=np.int64)
        # decode passes (`step`: decode, verify, batched) since the runner started, and the experts
        # they read: what a server reports for a bench run to difference
        self.decode_passes = 0
        self.decode_expert_reads = 0
        from roofline.engine.kernels.decode import kernel_shape

        # the config's scalars and the stored formats the kernels are compiled for
        self.kernel_shape = kernel_shape(self.config, self.weights)
        # (tables, positions, head_dim / 2): the global layers' and, with a base of their own,
        # the sliding layers' (ModelConfig.layer_rope_tables)
        cos, sin = rope_table_stack(self.config, self.max_seq_len)
        self._cos, self._sin = cos, sin
        self.cache = KVCache(self.config, self.max_batch, self.max_seq_len)
        # what the model needs: the same count over the tensors as the file stores them
        self.file_bytes_per_token: int = file_bytes_per_token(checkpoint)
        # the run-time shapes of the passes' matrix kernels (`kernel_choice`; no bit depends on
        # them): the defaults until load_runner measures or finds this host's
        self.kernels = KernelChoice()
        self.kernel_choices: dict[KernelsMode, KernelChoice] = {"default": KernelChoice()}
        self.costs = PassCosts()  # the speculation cost model, once measure_pass_costs ran

    def offer_kernels(self, mode: KernelsMode) -> None:
        """Make the kernel shapes of `mode` available to requests that ask for them
        (`pass_kernels`): timed now, or read from the user cache (`kernel_choice`)."""
        if mode not in self.kernel_choices:
            self.kernel_choices[mode] = choose_kernels(self, mode)

    def measure_pass_costs(
        self, rows: Seq[int] = PASS_COST_ROWS, reps: int = 7, cached: bool = False
    ) -> None:
        """Time the speculation cost model (`pass_timing.measure_pass_costs`), once per runner.
        cached: take the table this host measured before for the same runner (`measured_cache`,
        keyed as the kernel choice is, with the kernel shapes and the thread count the passes
        run on), else measure and keep it there: every server start timed it (3.3 s of a 9.6 s
        start of the shipped file, docs/measured.md)."""
        if self.costs.table is not None:
            return
        if not cached:
            self.costs = measure_pass_costs(self, rows, reps)
            return
        from roofline.engine.runtime.kernel_choice import choice_key
        from roofline.engine.runtime.measured_cache import (
            measured_path,
            read_measured,
            write_measured,
        )

        chooser = self.thread_chooser
        key = {
            **choice_key(self.path, self.dtype, self.threads),
            "kernels": [self.kernels.one_row.to_json(), self.kernels.many_rows.to_json()],
            "pass_threads": self.threads if chooser is None else chooser.current,
            "rows": list(rows),
            "reps": reps,
        }
        path = measured_path("pass-costs", key)
        costs = read_measured(path, key, "costs", "pass-cost cache", PassCosts.from_json)
        if costs is None:
            costs = measure_pass_costs(self, rows, reps)
            if costs.table is not None and costs.one_row_s is not None:
                write_measured(path, key, "costs", costs.to_json())
        self.costs = costs

    def pass_cost(self, rows: int) -> float:
        """A pass over `rows` rows of one slot relative to one row (`PassCosts.cost`)."""
        return self.costs.cost(rows)

    @property
    def pass_costs(self) -> dict[int, float] | None:
        """The measured table (rows -> cost relative to one row); None before it was measured."""
        return dict(self.costs.table) if self.costs.table else None

    @property
    def one_row_pass_s(self) -> float | None:
        return self.costs.one_row_s

    def _use_threads(self) -> int:
        """Set the thread count for the next pass and return it. numba's count is per calling
        thread, so it is checked on every call, from the calling thread."""
        import numba

        chooser, asked = self.thread_chooser, self.pass_threads
        if asked is not None:
            n = min(asked, self.threads)
        else:
            n = self.threads if chooser is None else chooser.threads_for_pass()
        if numba.get_num_threads() != n:
            numba.set_num_threads(n)
        return n

    def _record_pass(self, threads: int, rows: int, seconds: float) -> None:
        """Tell the chooser how long a kernel pass took (the first pass may have compiled: not
        counted; nor a pass on the requests' own limit, not the chooser's choice)."""
        self._timed_passes += 1
        chosen = self.pass_threads is None
        if self.thread_chooser is not None and self._timed_passes > 1 and chosen:
            self.thread_chooser.record(threads, rows, seconds)

    def _check_ids(self, token_ids: Seq[int]) -> np.ndarray:
        # Plain Python on the few ids of a decode step: a decode step follows a pass that streamed
        # all the weights through the caches, and each numpy call on cold caches costs tens of
        # microseconds.
        ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        values = ids.tolist() if ids.size <= 64 else (int(ids.min()), int(ids.max()))
        if values and (min(values) < 0 or max(values) >= self.config.vocab_size):
            raise ValueError(
                f"token ids must be in [0, {self.config.vocab_size}), "
                f"got {min(values)}..{max(values)}"
            )
        return ids

    def position(self, slot: int) -> int:
        """Tokens held by the slot = the position the next token is written at."""
        return int(self.cache.lengths[self.cache.check_slot(slot)])

    def release(self, slot: int) -> None:
        self.cache.release(self.cache.check_slot(slot))

    def save_kv(self, slot: int, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the K/V of positions start..end-1 of the slot (a prefix-cache node)."""
        return self.cache.read(self.cache.check_slot(slot), int(start), int(end))

    def load_kv(
        self, slot: int, start: int, kv: tuple[np.ndarray, np.ndarray], rows: int | None = None
    ) -> None:
        """Write K/V that `save_kv` returned (their first `rows` positions; None: all) at positions
        start.. of the slot, which holds start positions (start 0 resets it); a prefill may then
        continue where they end."""
        slot = self.cache.check_slot(slot)
        if start == 0:
            self.cache.release(slot)
        self.cache.write(slot, int(start), *(a[:, :, :rows] for a in kv))

    def truncate(self, slot: int, length: int) -> None:
        """Roll the slot back to `length` positions (drop rejected speculative tokens)."""
        self.cache.truncate(self.cache.check_slot(slot), int(length))

    def prefill(
        self, slot: int, token_ids: Seq[int], *, start: int = 0, logits: bool = True
    ) -> np.ndarray | None:
        """Write a prompt's tokens at positions start, start + 1, ... of the slot; float32 logits
        (vocab,) of the last one (None with logits=False). start=0 resets the slot; a later start
        continues the prompt where the slot ends.

        The rows run in passes of the decode kernels (`prefill_passes`), each row's sums in the
        order a one-row decode takes, so its logits and K/V are those of decoding the prompt one
        token at a time: a prompt prefilled in one call, a chunk at a time between other requests'
        steps, or on top of K/V the prefix cache loaded gives the same bits."""
        slot = self.cache.check_slot(slot)
        ids = self._check_ids(token_ids)
        if ids.size == 0:
            raise ValueError("prefill needs at least one token")
        if start == 0:
            self.cache.release(slot)
        elif start != self.position(slot):
            raise ValueError(
                f"slot {slot} holds {self.position(slot)} positions; "
                f"a prefill cannot continue at {start} (it continues where the slot ends)"
            )
        self.cache.check_room(slot, ids.size)
        self.cache.forget_outside_windows(slot, self.prefill_chunk_tokens)
        c, end, out = self.config, start + ids.size, None
        passes = prefill_passes(
            start, end, n_heads=c.n_heads, head_dim=c.head_dim, attn_chunk=ATTN_CHUNK
        )
        for a, b in passes:
            want = logits and b == end
            out = self._run_rows(
                ids[a - start : b - start],
                np.full(b - a, slot, dtype=np.int64),
                np.arange(a, b, dtype=np.int64),
                last_only=True,
                no_logits=not want,
            )
            self.cache.lengths[slot] = b
        return out[0] if logits else None

    def _run_rows(
        self,
        tokens: np.ndarray,
        slots: np.ndarray,
        positions: np.ndarray,
        *,
        last_only: bool = False,
        no_logits: bool = False,
        cache_positions: np.ndarray | None = None,
        tree_base: np.ndarray | None = None,
        tree_path: np.ndarray | None = None,
    ) -> np.ndarray:
        from roofline.engine.kernels.decode import (
            Cache,
            Rows,
            decode_rows,
            kernel_experts,
            kernel_weights,
        )

        c = self.config
        n = tokens.shape[0]
        # no draft tree: every row's context is its slot's positions 0..position
        if tree_base is None:
            cache_positions, tree_base, tree_path = (
                positions,
                positions + 1,
                np.zeros((n, 1), dtype=np.int64),
            )
        logit_rows = np.arange(n if no_logits else n - 1 if last_only else 0, n, dtype=np.int64)
        logits = aligned_empty((logit_rows.shape[0], c.vocab_size), np.float32)
        n_threads = self._use_threads()
        started = time.perf_counter()
        rows = Rows(tokens, slots, positions, cache_positions, tree_base, tree_path, logit_rows)
        layers, head = kernel_weights(self.weights)
        cache = Cache(self._cos, self._sin, self.cache.k, self.cache.v)
        # a dense model's pass leaves experts out: numba types an omitted argument apart from an
        # explicit None, and one compiled pass serves the runner and the kernel tests alike
        experts = kernel_experts(self.weights)
        reads = decode_rows(
            rows,
            self.kernel_shape,
            layers,
            head,
            cache,
            logits,
            n_threads,
            self.kernel_choices.get(self.pass_kernels, self.kernels).for_rows(n),
            *(() if experts is None else (experts,)),
        )
        self._record_pass(n_threads, n, time.perf_counter() - started)
        self.last_expert_reads_by_layer = reads
        cap = c.final_softcap
        if cap is not None:  # transformers: logits / cap, tanh, * cap, in float32
            cap32 = np.float32(cap)
            np.multiply(
                np.tanh(np.divide(logits, cap32, out=logits), out=logits), cap32, out=logits
            )
        return logits

    @property
    def last_expert_reads(self) -> int:
        """Experts the last pass read, summed over layers."""
        return int(self.last_expert_reads_by_layer.sum())

    @property
    def one_row_expert_reads(self) -> int:
        """Experts a one-row pass reads, summed over layers (0 for a dense model)."""
        c = self.config
        return c.n_layers * c.n_experts_used if c.moe else 0

    @property
    def expert_read_bytes(self) -> float:
        """Bytes of one expert of one layer as this runner holds it (its rows and biases; 0.0 for a
        dense model)."""
        c = self.config
        return self.routed_expert_bytes / (c.n_layers * c.n_experts) if c.moe else 0.0

    def bytes_per_pass(self, expert_reads: int, passes: int) -> float:
        """Weight bytes a pass read on average, over `passes` passes that read `expert_reads`
        experts in all (summed over layers): `bytes_per_token` (one row: n_experts_used experts a
        layer) with the routed experts' share for the experts actually read. A k-row pass (a
        verify, a batch) reads the union of its rows' experts once."""
        if not self.config.moe or passes <= 0:
            return float(self.bytes_per_token)
        return moe_bytes_per_pass(
            self.bytes_per_token,
            self.expert_read_bytes,
            self.one_row_expert_reads,
            expert_reads,
            passes,
        )

    def decode(self, slots: Seq[int], token_ids: Seq[int]) -> np.ndarray:
        """One token per slot, each at its slot's own position; float32 logits (len(slots),
        vocab)."""
        ids = self._check_ids(token_ids)
        if ids.size != len(slots) or ids.size == 0:
            raise ValueError(
                f"decode needs one token per slot (got {len(slots)} slots, {ids.size} tokens)"
            )
        return np.concatenate(self.step([(s, [int(t)], None) for s, t in zip(slots, ids.tolist())]))

    def extend(self, slot: int, token_ids: Seq[int]) -> np.ndarray:
        """Several tokens for one slot at consecutive positions in one pass (a speculative verify of
        a chain); logits (len(token_ids), vocab), each row bit-identical to what decoding the tokens
        one by one gives."""
        if len(token_ids) == 0:
            raise ValueError("extend needs at least one token")
        return self.step([(slot, token_ids, None)])[0]

    def step(self, batch: Seq[tuple[int, Seq[int], Seq[int] | None]]) -> list[np.ndarray]:
        """One weight pass for several slots, each with its rows: (slot, tokens, parents).

        tokens[0] is the slot's next token, at position L = the slot's length; tokens[1:] are draft
        nodes; parents[i] is the row that row i follows (parents[0] = -1; None: a chain). Row i goes
        to cache position L + i, turns (RoPE) by L + depth(i), and attends to positions < L and its
        ancestors (`attention._row_scores`). Returns float32 logits (len(tokens), vocab) per
        slot, row i's bit-identical to decoding the path to it one token at a time; `keep`
        then keeps the accepted path."""
        slot_list = [self.cache.check_slot(s) for s, _, _ in batch]
        if len(set(slot_list)) != len(slot_list):
            raise ValueError(f"decode slots must be distinct, got {slot_list}")
        tokens, slots, positions, cache_pos, bases, paths, sizes = [], [], [], [], [], [], []
        for slot, (_, ids, parents) in zip(slot_list, batch):
            ids = self._check_ids(ids).tolist()
            if not ids:
                raise ValueError(f"slot {slot}: a step needs at least one token")
            if parents is not None and len(parents) != len(ids):
                raise ValueError(f"slot {slot}: {len(ids)} tokens but {len(parents)} parents")
            self.cache.check_room(slot, len(ids))
            self.cache.forget_outside_windows(slot, self.prefill_chunk_tokens)
            start = int(self.cache.lengths[slot])
            for i, path in enumerate(_ancestor_rows(parents, len(ids))):
                # ancestors are rows 0..i-1: in place, nothing to gather
                plain = len(path) - 1 == path[-1]
                lead = len(path) if plain else next(j for j, row in enumerate(path) if row != j)
                tokens.append(ids[i])
                slots.append(slot)
                positions.append(start + len(path) - 1)
                cache_pos.append(start + i)
                bases.append(start + lead)
                paths.append([start + row for row in path[lead:]])
            sizes.append(len(ids))
        width = max(1, max(len(p) for p in paths))
        tree_path = np.zeros((len(paths), width), dtype=np.int64)
        for r, p in enumerate(paths):
            tree_path[r, : len(p)] = p
        logits = self._run_rows(
            np.array(tokens, dtype=np.int64),
            np.array(slots, dtype=np.int64),
            np.array(positions, dtype=np.int64),
            cache_positions=np.array(cache_pos, dtype=np.int64),
            tree_base=np.array(bases, dtype=np.int64),
            tree_path=tree_path,
        )
        for slot, n in zip(slot_list, sizes):
            self.cache.lengths[slot] += n
        self.decode_passes += 1
        self.decode_expert_reads += self.last_expert_reads
        return np.split(logits, np.cumsum(sizes)[:-1])

    def keep(self, slot: int, start: int, rows: Seq[int]) -> None:
        """After a step from length `start`: keep rows `rows` (an accepted path: 0, then each row's
        child) as positions start, start + 1, ... and drop every other row of that step (rejected
        drafts)."""
        slot = self.cache.check_slot(slot)
        rows = [int(r) for r in rows]
        if rows != list(range(len(rows))):
            self.cache.move(slot, [start + r for r in rows], start)
        self.cache.truncate(slot, start + len(rows))

    def warmup(self) -> None:
        """Compile (or load from numba's cache) the decode kernels, touch the weights, and time the
        thread counts (`seed_threads`)."""
        if self.max_seq_len > 2:
            self.prefill(0, [0, 0])
        self.decode([0], [0])
        self.release(0)
        seed_threads(self)


def _ancestor_rows(parents: Seq[int] | None, n: int) -> list[list[int]]:
    """For each row i, the rows from row 0 down to i along parent links (a chain: 0..i)."""
    if parents is None:
        return [list(range(i + 1)) for i in range(n)]
    paths: list[list[int]] = []
    for i, p in enumerate(parents):
        if (i == 0) != (p == -1) or not -1 <= p < i:
            raise ValueError(
                f"parents must start with -1 and point to earlier rows, got {list(parents)}"
            )
        paths.append([0] if i == 0 else paths[p] + [i])
    return paths


def load_runner(
    model: str | os.PathLike | None = None,
    *,
    dtype: str = "fp32",
    threads: int | None = None,
    max_batch: int = 1,
    max_seq_len: int | None = None,
    warmup: bool = True,
    kernels: KernelsMode = "default",
) -> ModelRunner:
    """Load a checkpoint (None = the default model) into a ModelRunner ready to decode. kernels:
    "measured" takes this host's kernel shapes (`kernel_choice`: cached, else timed after the
    warm-up), "default" the defaults (as without a warm-up)."""
    from roofline.engine.loading import load_checkpoint

    if dtype not in DTYPES:
        raise UserError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    cores = available_cores()
    if threads is not None and not 1 <= threads <= cores:
        raise UserError(
            f"threads must be between 1 and {cores} (the cores available here), got {threads}"
        )
    if max_batch < 1:
        raise UserError(f"max_batch must be at least 1, got {max_batch}")
    # stored: the file's rows only
    checkpoint = load_checkpoint(model, dequantize=dtypes.DTYPES[dtype].packing != "stored")
    limit = checkpoint.config.max_seq_len
    if max_seq_len is not None and not 1 <= max_seq_len <= limit:
        raise UserError(
            f"max_seq_len must be between 1 and the model's context length {limit}, "
            f"got {max_seq_len}"
        )
    runner = ModelRunner(
        checkpoint, dtype=dtype, threads=threads, max_batch=max_batch, max_seq_len=max_seq_len
    )
    del checkpoint  # the runner keeps its own packed copy
    if warmup:
        runner.warmup()
        runner.offer_kernels(kernels)
        runner.kernels = runner.kernel_choices[kernels]
    return runner
