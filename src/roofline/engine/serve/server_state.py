"""What the routes of the server share (`ServerState`): the runner's facts, the scheduler, the API
key, the metrics registry, and the per-request work done in a worker thread: parsing the body,
templating and tokenizing the prompt (with the 400s those raise).
"""

from __future__ import annotations

import collections
import hmac
import time
from typing import Any

from fastapi import Request
from prometheus_client import CollectorRegistry

from roofline.engine.runtime.scheduler import Scheduler
from roofline.engine.serve.http_limits import Limits
from roofline.engine.serve.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    parse_json_body,
    parse_request,
)
from roofline.engine.serve.server_metrics import RefusalCollector, SchedulerCollector
from roofline.engine.serve.shutdown import Drain
from roofline.errors import UserError
from roofline.response_stats import ServerStats


def _pass_costs(runner: Any) -> tuple[tuple[int, float], ...] | None:
    """The runner's measured pass costs (rows, relative cost); None when not measured."""
    table = getattr(runner, "pass_costs", None)
    return tuple(sorted(table.items())) if isinstance(table, dict) and len(table) > 1 else None


def _kernels(runner: Any) -> str | None:
    """The line that says which kernel shapes the runner's passes take (`KernelChoice`)."""
    choice = getattr(runner, "kernels", None)
    return choice.describe() if choice is not None else None


class ServerState:
    """What the routes share: the runner's facts, the scheduler, the key. One per app."""

    def __init__(
        self,
        scheduler: Scheduler,
        served_model_name: str | None,
        api_key: str | None,
        limits: Limits,
        drain: Drain,
        metrics_require_key: bool,
    ):
        self.runner = scheduler.runner
        self.scheduler = scheduler
        self.model_name = served_model_name or self.runner.name
        self.api_key = api_key
        self.limits = limits
        self.drain = drain
        self.metrics_require_key = metrics_require_key
        self.created = int(time.time())
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SchedulerCollector(scheduler))
        # HTTP status -> requests refused
        self.refused: collections.Counter[int] = collections.Counter()
        self.registry.register(RefusalCollector(self.refused))

    def check_auth(self, request: Request) -> None:
        if not self.api_key:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.api_key.encode()
        ):
            raise APIError(
                401,
                "missing or incorrect API key: send the server's --api-key as "
                "'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise APIError(
                404,
                f"the model {model!r} does not exist; this server serves {self.model_name!r}",
                param="model",
                code="model_not_found",
            )

    def model_card(self) -> dict[str, Any]:
        """A /v1/models entry. `roofline.bytes_per_token` = weight bytes this engine reads per
        decoded token at its dtype (the runner's count, as bench and tune use it): bench holds a run
        against the local ceiling with it; `file_bytes_per_token` = the same count over the weights
        as the file stores them (what the model needs), the second ceiling every run is shown
        against. No file path: the server's disk layout is nobody's business."""
        r = self.runner
        acceptance = getattr(self.scheduler.speculation, "acceptance", None)
        return {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "roofline",
            "max_model_len": self.scheduler.max_seq_len,
            "roofline": ServerStats(
                bytes_per_token=int(r.bytes_per_token),
                file_bytes_per_token=int(r.file_bytes_per_token),
                dtype=r.dtype,
                hardware="local",
                max_batch=self.scheduler.max_batch,
                max_seq_len=self.scheduler.max_seq_len,
                cross_request_memory=bool(
                    getattr(self.scheduler.speculation, "cross_request", False)
                ),
                position_acceptance=tuple(acceptance.rows()) if acceptance is not None else (),
                pass_costs=_pass_costs(r),
                one_row_pass_s=getattr(r, "one_row_pass_s", None),
                decode_passes=r.decode_passes,
                kernels=_kernels(r),
                **_expert_counts(r),
            ).to_json(),
        }

    def parse(self, raw: bytes, chat: bool):
        """Parse and validate a body (in a worker thread: a few MB of JSON take a while)."""
        return parse_request(
            ChatCompletionRequest if chat else CompletionRequest, parse_json_body(raw)
        )

    def refuse_long_text(self, texts: list[str], param: str) -> None:
        """A 400 before tokenizing when the byte length alone proves the prompt overflows the
        context: no token stands for more than `max_token_bytes` bytes, so B bytes are at least B /
        max_token_bytes tokens."""
        per_token = getattr(self.runner.tokenizer, "max_token_bytes", None)
        if not per_token:
            return
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        at_least = -(-n_bytes // per_token)
        if at_least >= self.scheduler.max_seq_len:
            raise APIError(
                400,
                f"this model's maximum context length is {self.scheduler.max_seq_len} tokens, "
                f"but the prompt has at least {at_least} ({n_bytes} bytes of text, "
                f"at most {per_token} bytes a token); shorten the prompt",
                param=param,
                code="context_length_exceeded",
            )

    def prompt_ids(self, req, chat: bool) -> list[int]:
        """Template and tokenize (slow on long prompts: called in a worker thread). In a chat only
        the template may emit special tokens; what the messages say is tokenized as text."""
        tok = self.runner.tokenizer
        if chat:
            messages = req.template_messages()
            self.refuse_long_text([m["content"] for m in messages], "messages")
            try:
                if hasattr(tok, "encode_chat"):
                    return tok.encode_chat(messages, add_generation_prompt=True)
                return tok.encode(
                    tok.apply_chat_template(messages, add_generation_prompt=True),
                    add_special_tokens=False,
                )
            except APIError:
                raise
            except (
                UserError,
                ValueError,
                TypeError,
            ) as e:  # templates raise on, e.g., roles they do not accept
                raise APIError(
                    400,
                    f"the model's chat template rejected the messages: {e}",
                    param="messages",
                    code="invalid_value",
                ) from None
        prompt = req.single_prompt()
        if isinstance(prompt, str):
            self.refuse_long_text([prompt], "prompt")
            return tok.encode(prompt, add_special_tokens=True)
        vocab = self.runner.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt):
            raise APIError(
                400,
                f"prompt token ids must lie in [0, {vocab})",
                param="prompt",
                code="invalid_value",
            )
        return list(prompt)


def _expert_counts(r) -> dict[str, Any]:
    """A mixture of experts' ServerStats counts (none for a dense model)."""
    if not r.config.moe:
        return {}
    return {
        "expert_reads": r.decode_expert_reads,
        "expert_read_bytes": r.expert_read_bytes,
        "one_row_expert_reads": r.one_row_expert_reads,
    }
