"""Rollout engines: batched transformers generation, the OpenAI-compatible client against a local
HTTP server, vLLM's glue against a recording stand-in module, and script replay."""

import json
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from policy.engines import (
    EngineError,
    GenerationRequest,
    OpenAIEngine,
    SamplingConfig,
    ScriptedEngine,
    TransformersEngine,
    VLLMEngine,
    build_engine,
)
from policy.tiny_model import build_tiny_model_and_tokenizer
from policy.toolcalls import parse_tool_calls


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model_and_tokenizer()


def _prompt(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)


def test_transformers_batches_concurrent_requests_like_single_ones(tiny):
    model, tokenizer = tiny
    engine = TransformersEngine(model, tokenizer, SamplingConfig(temperature=0), max_batch=4)
    try:
        prompts = [tokenizer.encode(_prompt(tokenizer, text), add_special_tokens=False)
                   for text in ("write a relu kernel for me", "hi")]
        singles = [engine.generate(GenerationRequest([], 10, prompt_ids=ids)) for ids in prompts]
        batched: dict[int, object] = {}
        threads = [threading.Thread(target=lambda i=i: batched.__setitem__(
            i, engine.generate(GenerationRequest([], 10 - 4 * i, prompt_ids=prompts[i])))) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        engine.close()
    assert engine._batches == 3  # two single calls, then one batch of both
    for index, single in enumerate(singles):
        together = batched[index]
        limit = 10 - 4 * index
        assert together.token_ids == single.token_ids[:limit]  # left padding does not change the result
        assert together.logprobs == pytest.approx(single.logprobs[:limit], abs=1e-4)
        assert all(lp <= 0 for lp in together.logprobs)
        assert len(together.token_ids) == limit and together.finish_reason == "length"
        assert together.text == tokenizer.decode(together.token_ids, skip_special_tokens=False)


def test_transformers_cuts_at_end_of_turn_and_reports_stop(tiny):
    import torch

    model, tokenizer = tiny
    eos = tokenizer.eos_token_id
    others = torch.tensor([i for i in range(len(tokenizer)) if i != eos])
    # Make the end-of-turn token the only possible one, so sampling stops at once.
    handle = model.lm_head.register_forward_hook(lambda module, inputs, output: output.index_fill(-1, others, -1e9))
    engine = TransformersEngine(model, tokenizer, SamplingConfig(temperature=1.0, seed=3))
    try:
        generation = engine.generate(GenerationRequest([], 8, prompt_ids=tokenizer.encode("hello")))
    finally:
        handle.remove()
        engine.close()
    assert generation.token_ids == [eos] and generation.finish_reason == "stop"


def test_transformers_from_pretrained_loads_offline(tmp_path, tiny):
    from policy.tiny_model import save_model_and_tokenizer

    model, tokenizer = tiny
    path = save_model_and_tokenizer(model, tokenizer, tmp_path / "tiny")
    engine = build_engine("transformers", str(path), SamplingConfig(temperature=0))
    try:
        assert engine.max_context_tokens == model.config.max_position_embeddings
        assert engine.generate(GenerationRequest([], 3, prompt_ids=tokenizer.encode("hi"))).token_ids
    finally:
        engine.close()
    with pytest.raises(EngineError, match="never downloads"):
        build_engine("transformers", str(tmp_path / "missing"), SamplingConfig())


class _ChatServer:
    """A local OpenAI-compatible endpoint that records requests and answers from a queue."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                status, payload = server.replies.pop(0)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def _completion(content, finish="stop", tool_calls=None, logprobs=None):
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    choice = {"message": message, "finish_reason": finish}
    if logprobs:
        choice["logprobs"] = {"content": [{"token": "x", "logprob": value} for value in logprobs]}
    return {"choices": [choice], "usage": {"prompt_tokens": 42}}


def test_openai_engine_sends_the_conversation_and_parses_the_reply():
    server = _ChatServer([
        (503, {"error": "overloaded"}),  # retried
        (200, _completion("Let me verify.", tool_calls=[
            {"type": "function", "function": {"name": "run", "arguments": "{\"command\": \"ls\"}"}}],
            logprobs=[-0.5, -0.25])),
        (400, {"error": "bad model"}),
    ])
    try:
        engine = OpenAIEngine(server.url, "my-model", SamplingConfig(0.7, 0.9, 20, 5, {"min_p": 0.1}),
                              api_key="secret", retries=1)
        engine_messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                           {"role": "assistant", "content": "a"}, {"role": "tool", "name": "verify", "content": "ok"}]
        import policy.engines as engines_module

        engines_module.time.sleep, original_sleep = (lambda s: None), engines_module.time.sleep
        try:
            generation = engine.generate(GenerationRequest(engine_messages, 77))
            with pytest.raises(EngineError, match="400"):
                engine.generate(GenerationRequest(engine_messages, 77))
        finally:
            engines_module.time.sleep = original_sleep
    finally:
        server.close()
    body = server.requests[1]["body"]
    assert server.requests[1]["path"] == "/v1/chat/completions" and server.requests[1]["auth"] == "Bearer secret"
    assert body["model"] == "my-model" and body["max_tokens"] == 77
    assert (body["temperature"], body["top_p"], body["top_k"], body["seed"], body["min_p"]) == (0.7, 0.9, 20, 5, 0.1)
    assert body["messages"][3]["role"] == "user" and '<tool_response name="verify">' in body["messages"][3]["content"]
    calls = parse_tool_calls(generation.text).calls
    assert [(c.name, c.arguments) for c in calls] == [("run", {"command": "ls"})]
    assert generation.logprobs == [-0.5, -0.25] and generation.prompt_tokens == 42
    assert generation.finish_reason == "stop" and generation.token_ids is None


def test_openai_engine_unreachable_says_what_to_check():
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "m", retries=0, timeout_s=2)
    with pytest.raises(EngineError, match="unreachable"):
        engine.generate(GenerationRequest([{"role": "user", "content": "x"}], 5))


def test_vllm_engine_passes_sampling_through(monkeypatch):
    recorded = {}

    class FakeParams:
        def __init__(self, **options):
            self.options = options

    class FakeLLM:
        def __init__(self, model, **options):
            recorded["init"] = (model, options)
            self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=2048))

        def get_tokenizer(self):
            return types.SimpleNamespace(decode=lambda ids, skip_special_tokens: "|".join(map(str, ids)))

        def generate(self, prompts, params, use_tqdm):
            recorded["prompts"], recorded["params"] = prompts, [p.options for p in params]
            def step(token, value):
                return {token: types.SimpleNamespace(logprob=value), 99: types.SimpleNamespace(logprob=-9)}
            completion = types.SimpleNamespace(token_ids=(5, 6), text="ignored", finish_reason="length",
                                               logprobs=[step(5, -0.1), step(6, -0.2)])
            return [types.SimpleNamespace(outputs=[completion]) for _ in prompts]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM, SamplingParams=FakeParams))
    engine = VLLMEngine("/models/m", SamplingConfig(0.6, 0.95, 0, 7, {"repetition_penalty": 1.1}),
                        gpu_memory_utilization=0.5)
    try:
        generation = engine.generate(GenerationRequest([], 33, prompt_ids=[1, 2, 3]))
    finally:
        engine.close()
    assert recorded["init"] == ("/models/m", {"gpu_memory_utilization": 0.5})
    assert recorded["prompts"] == [{"prompt_token_ids": [1, 2, 3]}]
    assert recorded["params"] == [{"max_tokens": 33, "temperature": 0.6, "top_p": 0.95, "seed": 7, "logprobs": 1,
                                   "repetition_penalty": 1.1}]
    assert (generation.token_ids, generation.logprobs, generation.finish_reason) == ([5, 6], [-0.1, -0.2], "length")
    assert generation.text == "5|6" and engine.max_context_tokens == 2048


def test_vllm_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(EngineError, match="pip install"):
        VLLMEngine("m")


def test_scripted_engine_replays_per_problem_and_ends_with_finish(tmp_path):
    (tmp_path / "kernel.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "relu.yaml").write_text(
        "turns:\n"
        "  - {text: thinking only}\n"
        "  - - {name: write_file, arguments: {path: kernels/k.cu, content_file: kernel.cu}}\n"
        "    - {name: compile}\n")
    engine = ScriptedEngine.from_path(tmp_path)

    def reply(turn, problem="relu"):
        history = [{"role": "assistant", "content": ""}] * turn
        return engine.generate(GenerationRequest(history, 100, problem=problem)).text

    assert reply(0) == "thinking only"
    calls = parse_tool_calls(reply(1)).calls
    assert [c.name for c in calls] == ["write_file", "compile"]
    assert calls[0].arguments == {"path": "kernels/k.cu", "content": "__global__ void k() {}\n"}
    assert [c.name for c in parse_tool_calls(reply(2)).calls] == ["finish"]
    with pytest.raises(EngineError, match="no script for problem 'softmax'"):
        reply(0, "softmax")


def test_build_engine_errors_name_the_missing_option():
    with pytest.raises(EngineError, match="needs --base-url"):
        build_engine("openai", "m", SamplingConfig())
    with pytest.raises(EngineError, match="needs --model"):
        build_engine("scripted", None, SamplingConfig())
    with pytest.raises(EngineError, match="unknown engine"):
        build_engine("llamacpp", "m", SamplingConfig())
