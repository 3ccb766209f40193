"""Rollout engines behind one interface: `generate(GenerationRequest) -> Generation`.

- `TransformersEngine`: `model.generate` on a local model path or an in-memory model; works
  everywhere (the default). Concurrent requests from parallel episodes are batched.
- `VLLMEngine`: `vllm.LLM`, when installed, with sampling parameters passed through; batched too.
- `OpenAIEngine`: any OpenAI-compatible chat endpoint (vLLM's or SGLang's server, hosted APIs) by
  base URL and model name, over plain urllib.
- `ScriptedEngine`: replays a fixed list of tool calls from a JSON/YAML file (tests and demos).

Token engines (transformers, vLLM) take the context as token ids and return the generated ids with
their logprobs; chat engines (OpenAI, scripted) take messages and return text.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .toolcalls import format_tool_call

ENGINE_KINDS = ("scripted", "transformers", "vllm", "openai")


class EngineError(RuntimeError):
    pass


@dataclass
class SamplingConfig:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # passed to the engine unchanged


@dataclass
class GenerationRequest:
    messages: list[dict[str, Any]]
    max_new_tokens: int
    prompt_ids: list[int] | None = None  # the context as tokens, for token engines
    problem: str = ""  # the problem's stem: scripted engines pick their script by it


@dataclass
class Generation:
    text: str
    token_ids: list[int] | None = None  # None: the engine does not report tokens
    logprobs: list[float] | None = None  # of each generated token under the engine's model
    finish_reason: str = "stop"  # "stop" (end of turn) or "length" (hit max_new_tokens)
    prompt_tokens: int | None = None


class Engine:
    name = "engine"
    takes_token_ids = False  # True: requests carry prompt_ids and replies carry token_ids
    tokenizer = None  # the model's tokenizer where the engine knows it
    max_context_tokens: int | None = None  # the model's own context limit where known

    def generate(self, request: GenerationRequest) -> Generation:
        raise NotImplementedError

    def close(self) -> None:
        """Release the model and threads; the engine is unusable afterwards."""


class _BatchingEngine(Engine):
    """Collects requests that parallel episodes make within a short window into one batch."""

    def __init__(self, max_batch: int, gather_s: float = 0.02):
        self.max_batch = max_batch
        self.gather_s = gather_s
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name=f"{self.name}-batcher", daemon=True)
        self._thread.start()

    def generate(self, request: GenerationRequest) -> Generation:
        if request.prompt_ids is None:
            raise EngineError(f"the {self.name} engine needs prompt_ids (the context as token ids)")
        future: Future = Future()
        self._queue.put((request, future))
        return future.result()

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            deadline = time.monotonic() + self.gather_s
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(item)
            try:
                generations = self._generate_batch([request for request, _ in batch])
            except BaseException as error:  # reported to every waiting episode, not lost here
                for _, future in batch:
                    future.set_exception(error)
                continue
            for (_, future), generation in zip(batch, generations, strict=True):
                future.set_result(generation)

    def generate_batch(self, requests: list[GenerationRequest]) -> list[Generation]:
        """A batch the caller already holds (the trainer's lockstep rollouts), generated at once in
        the caller's thread; `generate` is for episodes that each hold one request."""
        return self._generate_batch(requests)

    def _generate_batch(self, requests: list[GenerationRequest]) -> list[Generation]:
        raise NotImplementedError

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)


class TransformersEngine(_BatchingEngine):
    name = "transformers"
    takes_token_ids = True

    def __init__(self, model, tokenizer, sampling: SamplingConfig | None = None, max_batch: int = 8):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.max_context_tokens = getattr(model.config, "max_position_embeddings", None)
        self._batches = 0
        eos = model.generation_config.eos_token_id if model.generation_config.eos_token_id is not None \
            else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(self.eos_ids))
        super().__init__(max_batch)

    @classmethod
    def from_pretrained(cls, path: str | Path, sampling: SamplingConfig | None = None, device: str = "cpu",
                        max_batch: int = 8) -> TransformersEngine:
        """Load a local model directory (nothing is downloaded)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not Path(path).is_dir():
            raise EngineError(f"{path}: not a local model directory (config.json, weights, tokenizer); "
                              "this engine never downloads")
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype="auto").to(device)
        return cls(model, tokenizer, sampling, max_batch)

    def _generate_batch(self, requests: list[GenerationRequest]) -> list[Generation]:
        import torch

        device = next(self.model.parameters()).device
        width = max(len(r.prompt_ids) for r in requests)
        # Left padding: every prompt ends at the same column, where generation starts.
        input_ids = torch.tensor([[self.pad_id] * (width - len(r.prompt_ids)) + r.prompt_ids for r in requests],
                                 device=device)
        attention_mask = torch.tensor([[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids)
                                       for r in requests], device=device)
        sampling = self.sampling
        options: dict[str, Any] = {"do_sample": sampling.temperature > 0}
        if sampling.temperature > 0:
            options.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed + self._batches)
        self._batches += 1
        with torch.no_grad():
            output = self.model.generate(
                input_ids=input_ids, attention_mask=attention_mask,
                max_new_tokens=max(r.max_new_tokens for r in requests), pad_token_id=self.pad_id,
                return_dict_in_generate=True, output_logits=True, **options, **sampling.extra)
        generated = output.sequences[:, width:]
        # Logprobs under the model itself (temperature 1, no top-p/top-k), as vLLM reports them.
        logits = torch.stack(output.logits, dim=1).float()
        logprobs = logits.log_softmax(-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)
        results = []
        for row, request in enumerate(requests):
            ids = generated[row].tolist()[: request.max_new_tokens]
            end = next((i + 1 for i, token in enumerate(ids) if token in self.eos_ids), None)
            ids = ids[:end] if end else ids
            results.append(Generation(
                text=self.tokenizer.decode(ids, skip_special_tokens=False), token_ids=ids,
                logprobs=logprobs[row, : len(ids)].tolist(), finish_reason="stop" if end else "length",
                prompt_tokens=len(request.prompt_ids)))
        return results


class VLLMEngine(_BatchingEngine):
    name = "vllm"
    takes_token_ids = True

    def __init__(self, model: str, sampling: SamplingConfig | None = None, max_batch: int = 256, **llm_options):
        try:
            from vllm import LLM, SamplingParams
        except ImportError:
            raise EngineError("vLLM is not installed: pip install 'cuda-agent[vllm]', or use "
                              "--engine transformers (or --engine openai against a vLLM server)") from None
        self._sampling_params = SamplingParams
        self.sampling = sampling or SamplingConfig()
        self.llm = LLM(model=model, **llm_options)
        self.tokenizer = self.llm.get_tokenizer()
        model_config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        self.max_context_tokens = getattr(model_config, "max_model_len", None)
        super().__init__(max_batch)

    def _generate_batch(self, requests: list[GenerationRequest]) -> list[Generation]:
        sampling = self.sampling
        options: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p,
                                   "seed": sampling.seed, "logprobs": 1, **sampling.extra}
        if sampling.top_k > 0:
            options["top_k"] = sampling.top_k
        params = [self._sampling_params(max_tokens=r.max_new_tokens, **options) for r in requests]
        outputs = self.llm.generate([{"prompt_token_ids": r.prompt_ids} for r in requests], params, use_tqdm=False)
        results = []
        for request, output in zip(requests, outputs, strict=True):
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [step[token].logprob for step, token in zip(completion.logprobs, ids, strict=True)] \
                if completion.logprobs else None
            results.append(Generation(
                text=completion.text if not self.tokenizer else self.tokenizer.decode(ids, skip_special_tokens=False),
                token_ids=ids, logprobs=logprobs,
                finish_reason="length" if completion.finish_reason == "length" else "stop",
                prompt_tokens=len(request.prompt_ids)))
        return results


class OpenAIEngine(Engine):
    """Chat completions over HTTP. Tool results are sent as user messages in <tool_response>
    tags, since our tool calls are text, not the API's native tool-call objects."""

    name = "openai"
    # Rate limits and overloaded servers answer with these; anything else is the caller's error.
    RETRY_STATUSES = (429, 500, 502, 503, 504)

    def __init__(self, base_url: str, model: str, sampling: SamplingConfig | None = None,
                 api_key: str | None = None, timeout_s: float = 600.0, retries: int = 3,
                 tokenizer=None, max_context_tokens: int | None = None):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.sampling = sampling or SamplingConfig()
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.tokenizer = tokenizer
        self.max_context_tokens = max_context_tokens

    def generate(self, request: GenerationRequest) -> Generation:
        sampling = self.sampling
        body: dict[str, Any] = {"model": self.model, "messages": _wire_messages(request.messages),
                                "max_tokens": request.max_new_tokens, "temperature": sampling.temperature,
                                "top_p": sampling.top_p}
        if sampling.top_k > 0:
            body["top_k"] = sampling.top_k
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        body.update(sampling.extra)
        data = self._post(body)
        try:
            choice = data["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise EngineError(f"{self.url}: unexpected reply (no choices[0].message): {str(data)[:300]}") from None
        text = message.get("content") or ""
        for call in message.get("tool_calls") or []:  # servers that parse tool calls themselves
            function = call.get("function", {})
            arguments = function.get("arguments") or "{}"
            text += "\n" + format_tool_call(function.get("name", ""), json.loads(arguments)
                                            if isinstance(arguments, str) else arguments)
        logprob_entries = (choice.get("logprobs") or {}).get("content") or []
        return Generation(
            text=text, logprobs=[entry["logprob"] for entry in logprob_entries] or None,
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            prompt_tokens=(data.get("usage") or {}).get("prompt_tokens"))

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        payload = json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            http_request = urllib.request.Request(self.url, data=payload, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(http_request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as error:
                detail = error.read().decode(errors="replace")[:500]
                if error.code not in self.RETRY_STATUSES or attempt == self.retries:
                    raise EngineError(f"{self.url} answered {error.code}: {detail}") from None
            except (urllib.error.URLError, TimeoutError) as error:
                if attempt == self.retries:
                    raise EngineError(f"{self.url} unreachable ({error}); is the server running and "
                                      "the base URL right (it should end in /v1)?") from None
            time.sleep(2 ** attempt)
        raise AssertionError("unreachable")


def _wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    wired = []
    for message in messages:
        if message["role"] == "tool":
            wired.append({"role": "user", "content": f"<tool_response name=\"{message.get('name', '')}\">\n"
                                                     f"{message['content']}\n</tool_response>"})
        else:
            wired.append({"role": message["role"], "content": message["content"]})
    return wired


@dataclass
class Script:
    """Turns to replay: each turn is one tool call, a list of calls, or {"text": ...}."""

    turns: list[Any]
    directory: Path  # where `content_file` arguments are found

    @classmethod
    def load(cls, path: str | Path) -> Script:
        path = Path(path)
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
        turns = data["turns"] if isinstance(data, dict) else data
        if not isinstance(turns, list):
            raise EngineError(f"{path}: a script is a list of turns (or {{'turns': [...]}})")
        return cls(turns, path.parent)

    def reply(self, turn: int) -> str:
        if turn >= len(self.turns):
            return "The script has no more steps.\n" + format_tool_call("finish", {"summary": "script ended"})
        step = self.turns[turn]
        if isinstance(step, dict) and "text" in step:
            return step["text"]
        calls = step if isinstance(step, list) else [step]
        return "\n".join(format_tool_call(call["name"], self._arguments(call.get("arguments", {}))) for call in calls)

    def _arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        arguments = dict(arguments)
        if "content_file" in arguments:
            arguments["content"] = (self.directory / arguments.pop("content_file")).read_text()
        return arguments


class ScriptedEngine(Engine):
    """Replays scripts: turn k of an episode is the script's step k (counted from the assistant
    messages so far), so the engine holds no per-episode state."""

    name = "scripted"

    def __init__(self, scripts: dict[str, Script], tokenizer=None):
        self.scripts = scripts
        self.tokenizer = tokenizer

    @classmethod
    def from_path(cls, path: str | Path, tokenizer=None) -> ScriptedEngine:
        """A script file (used for every problem) or a directory of `<problem stem>.yaml|.json`."""
        path = Path(path)
        if path.is_file():
            return cls({"*": Script.load(path)}, tokenizer)
        if path.is_dir():
            scripts = {p.stem: Script.load(p) for p in sorted(path.iterdir()) if p.suffix in (".json", ".yaml", ".yml")}
            if scripts:
                return cls(scripts, tokenizer)
        raise EngineError(f"{path}: give a script file or a directory of <problem stem>.yaml scripts")

    def generate(self, request: GenerationRequest) -> Generation:
        script = self.scripts.get(request.problem) or self.scripts.get("*")
        if script is None:
            raise EngineError(f"no script for problem {request.problem!r}; scripts exist for {sorted(self.scripts)}")
        turn = sum(message["role"] == "assistant" for message in request.messages)
        return Generation(script.reply(turn))


def build_engine(kind: str, model: str | None, sampling: SamplingConfig, device: str = "cpu",
                 base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 tokenizer_path: str | None = None, max_batch: int = 8) -> Engine:
    """The engine a command line asks for."""
    if kind not in ENGINE_KINDS:
        raise EngineError(f"unknown engine {kind!r}; use one of {', '.join(ENGINE_KINDS)}")
    if not model:
        raise EngineError(f"--engine {kind} needs --model (a script for scripted, a model path or name otherwise)")
    tokenizer = None
    if tokenizer_path:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
    if kind == "scripted":
        return ScriptedEngine.from_path(model, tokenizer)
    if kind == "transformers":
        return TransformersEngine.from_pretrained(model, sampling, device, max_batch)
    if kind == "vllm":
        return VLLMEngine(model, sampling, max_batch=max_batch)
    if not base_url:
        raise EngineError("--engine openai needs --base-url, e.g. http://127.0.0.1:8000/v1")
    return OpenAIEngine(base_url, model, sampling, api_key=os.environ.get(api_key_env), tokenizer=tokenizer)
