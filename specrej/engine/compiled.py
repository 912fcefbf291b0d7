"""A decoding step written as one function that ``torch.compile`` can capture (Llama-family models).

Why: an eager decoding step of the embedded 135M model issues ~1,000 small ops (30 layers of norms,
rotary, attention pieces, copies) from Python; at 1-32 rows that, not the matmuls, is most of the
step (docs/performance.md). Here the step is a plain function of tensors: the prompt's keys and
values stored once (``[layers, kv_heads, P, d]``, as ``shared_prefix`` does), each row's own tokens
in preallocated buffers (``[layers, rows, kv_heads, T, d]``, grown by ``CHUNK``), the write position
a tensor, so one compiled graph serves every row count, prompt length and position (dynamic shapes;
inductor's C++ kernels on a CPU, CUDA graphs per bucket on a GPU).

What it keeps exact (fp32): every op is row-wise. The linears are the prepacked oneDNN kernels of
``packed.py`` (an opaque op to the compiler, so its rows are computed with one blocking whatever the
row count), and a lone row is never run alone: the cache keeps a second, duplicate row (CPU kernels
take another path for one row). So candidate c writes the same tokens in every arm and batch size,
as on the eager path; the tokens differ from the eager path's in the last bits of some logits (other
fused reductions), so recordings say which step made them (``Engine.step_kind``).

Off with ``SPECREJ_COMPILE=0`` (or ``eager``); ``SPECREJ_COMPILE=1`` forces it where it would
otherwise be skipped. Where it cannot be used (another family, sliding windows, biasless checks
failing, no compiler toolchain), the engine logs one line saying why and decodes eagerly.
"""
from __future__ import annotations

import logging
import os
import time
import weakref

import torch

from .packed import lone_row_padded, prepack_refused

log = logging.getLogger("specrej.engine.compiled")
COMPILE_ENV = "SPECREJ_COMPILE"
LAYERS_ENV = "SPECREJ_LAYERS_PER_GRAPH"
LAYERS_PER_GRAPH = 3  # layers one compiled graph runs (docs/performance.md: fewer calls a step, a longer first build)
CHUNK = 32            # own-token buffers grow by this many positions
FAMILIES = {"llama", "mistral", "qwen2", "qwen3"}

# key -> (packed weight or None, weight, bias, the dtype the packed weight computes in): read by the custom op
_WEIGHTS: dict[int, tuple] = {}


@torch.library.custom_op("specrej::linear", mutates_args=())
def _linear(x: torch.Tensor, key: torch.Tensor, out: int) -> torch.Tensor:
    """One linear layer (``out`` features) on the weight registered under ``key`` (a 0-d tensor, so
    one compiled layer serves every layer): its prepacked oneDNN form (``packed.py``), opaque to
    the compiler, or a plain ``F.linear`` where nothing was packed (CUDA). Where oneDNN cannot prepack
    the model's dtype on this CPU (bf16 on an AVX2-only CPU), the weight was packed in fp32 (the bf16
    values exactly) and the rows go in as fp32 and come out in the model's dtype."""
    pw, w, b, via = _WEIGHTS[int(key)]
    if pw is None:
        return torch.nn.functional.linear(x, w, b)
    if via == x.dtype:
        return lone_row_padded(lambda x2: torch.ops.mkldnn._linear_pointwise(x2, pw, b, "none", [], ""), x)
    return lone_row_padded(lambda x2: torch.ops.mkldnn._linear_pointwise(
        x2.to(via), pw, b, "none", [], "").to(x.dtype), x)


@_linear.register_fake
def _(x, key, out):
    return x.new_empty(*x.shape[:-1], out)


def mode() -> str:
    """``SPECREJ_COMPILE``: "auto" (default), "on" or "off"."""
    v = os.environ.get(COMPILE_ENV, "auto").strip().lower()
    return "off" if v in ("0", "false", "no", "off", "eager") else "on" if v in ("1", "true", "yes", "on") else "auto"


def unsupported(model) -> str | None:
    """Why this model's step cannot be compiled here (None: it can)."""
    c = model.config
    if getattr(c, "model_type", None) not in FAMILIES:
        return f"model type {getattr(c, 'model_type', None)!r} is not Llama/Mistral/Qwen2/Qwen3"
    if getattr(c, "hidden_act", "silu") != "silu":
        return f"activation {c.hidden_act!r}"
    rope = getattr(c, "rope_scaling", None) or getattr(c, "rope_parameters", None) or {}
    if (rope.get("rope_type") or rope.get("type") or "default") != "default":
        return f"rope type {rope.get('rope_type') or rope.get('type')!r}"
    if any(t != "full_attention" for t in (getattr(c, "layer_types", None) or ())):
        return "sliding-window layers"
    if getattr(c, "sliding_window", None) is not None and getattr(c, "use_sliding_window", True):
        return "a sliding window"
    if model.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return f"dtype {model.dtype}"
    if model.device.type == "cpu" and (why := prepack_refused(torch.float32)):
        return why
    return None


def layers_per_graph(layers: int) -> int:
    """How many layers one compiled graph runs for a model of ``layers``: the largest divisor of ``layers`` up to
    ``SPECREJ_LAYERS_PER_GRAPH`` (default ``LAYERS_PER_GRAPH``), so every call runs the same graph."""
    try:
        want = int(os.environ.get(LAYERS_ENV, "").strip() or LAYERS_PER_GRAPH)
    except ValueError:
        want = LAYERS_PER_GRAPH
    want = max(1, min(want, layers))
    return next(g for g in range(want, 0, -1) if layers % g == 0)


def linear_dtype(dtype: torch.dtype) -> tuple[torch.dtype, str | None]:
    """The dtype the compiled step's CPU linears compute in for a model in ``dtype``, and why, where it is not
    ``dtype`` itself: oneDNN's prepacked ``dtype`` where this CPU takes it, else fp32 (which every x86-64 CPU
    prepacks; bf16 and fp16 values are exact in fp32, so the step computes the same model, in fp32)."""
    why = prepack_refused(dtype) if dtype != torch.float32 else None
    return (dtype, None) if why is None else (torch.float32, why)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def fuse_in_place(mods) -> torch.Tensor:
    """The linears' weights stacked in one tensor ([sum of outs, in]), their parameters made views of it, so the
    model holds them once: a fused copy beside the model's own kept ~9.1 GB more on the 8B config (issue 60, 7). The
    model computes as before (the same values; each view is contiguous). Where an earlier ``Step`` fused them
    already (the weights are consecutive views of one storage), that tensor, not a new one."""
    ws = [m.weight for m in mods]
    ptr, offs = ws[0].untyped_storage().data_ptr(), [w.storage_offset() for w in ws]
    if (all(w.is_contiguous() and w.untyped_storage().data_ptr() == ptr and w.shape[1:] == ws[0].shape[1:] for w in ws)
            and all(offs[i] + ws[i].numel() == offs[i + 1] for i in range(len(ws) - 1))):
        rows = sum(w.shape[0] for w in ws)
        return ws[0].detach().as_strided((rows, *ws[0].shape[1:]), ws[0].stride(), offs[0])
    with torch.inference_mode(False), torch.no_grad():   # a plain tensor: the model may run outside inference mode
        w = torch.cat([x.detach() for x in ws])
        at = 0
        for m in mods:
            n = m.weight.shape[0]
            m.weight.data = w[at:at + n]   # the old weight freed here: the model's parameter is a view of w
            at += n
    return w.detach()


_next_key = [0]
_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


class Step:
    """The model's decoding step as tensors: ``step(tok, pos, g, own, pre)``.

    Compiled as three graphs: a run of ``layers_per_graph`` layers (called once per run with those layers'
    weights, so a 30-layer model compiles three layers, not thirty, and a step makes ten calls) and the ends
    (embedding, rotary, mask; final norm, head)."""

    def __init__(self, model, compile_: bool = True, mode: str | None = None):
        """``mode``: torch.compile's (``"reduce-overhead"``: CUDA graphs on a GPU; default inductor's kernels)."""
        c = model.config
        self.device, self.dtype = model.device, model.dtype
        self.layers_n = c.num_hidden_layers
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps = float(c.rms_norm_eps)
        self.scaling = self.head_dim ** -0.5
        rot = model.model.rotary_emb
        self.inv_freq = rot.inv_freq.float().to(self.device)
        self.rot_scale = float(getattr(rot, "attention_scaling", 1.0))
        self.embed = model.get_input_embeddings().weight
        pack = self.device.type == "cpu"
        self._keys: list[int] = []
        via, why = linear_dtype(self.dtype) if pack else (self.dtype, None)
        #: how the linears run, in words (recordings and logs say it): e.g. "oneDNN bf16, prepacked"
        self.linears = ("F.linear" if not pack else f"oneDNN {_NAMES.get(via, via)}, prepacked" + (
            "" if why is None else f" (the {_NAMES.get(self.dtype, self.dtype)} weights upcast: "
                                   f"this CPU cannot prepack {_NAMES.get(self.dtype, self.dtype)}: {why})"))
        if why is not None:
            log.warning("specrej: the compiled step's linears run in fp32 on this CPU (%s)", self.linears)

        def linear(*mods) -> tuple[torch.Tensor, int]:
            if len(mods) == 1:
                w = mods[0].weight.detach()
            elif pack:
                w = torch.cat([m.weight.detach() for m in mods])   # (prepacked below: a copy of its own anyway)
            else:
                w = fuse_in_place(mods)   # CUDA: no second copy of the weights
            bs = [m.bias for m in mods]
            b = None if all(x is None for x in bs) else torch.cat(
                [x.detach() if x is not None else w.new_zeros(m.out_features) for x, m in zip(bs, mods)])
            if not pack:   # CUDA: the weights themselves (the compiler's own matmuls; CUDA graphs need no CPU input)
                return (w, b), w.shape[0]
            _next_key[0] += 1
            k = _next_key[0]
            wv, bv = w.to(via), (None if b is None else b.to(via))
            _WEIGHTS[k] = (torch.ops.mkldnn._reorder_linear_weight(wv, 128), w, bv, via)
            self._keys.append(k)
            return torch.tensor(k), w.shape[0]

        self.packed = pack
        self.layer_w = []
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            qn, kn = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
            (kqkv, _), (ko, _), (kgu, n_gu), (kdown, _) = (linear(a.q_proj, a.k_proj, a.v_proj), linear(a.o_proj),
                                                          linear(m.gate_proj, m.up_proj), linear(m.down_proj))
            self.layer_w.append((layer.input_layernorm.weight, layer.post_attention_layernorm.weight,
                                 kqkv, ko, kgu, kdown,
                                 None if qn is None else qn.weight, None if kn is None else kn.weight))
        self.group = layers_per_graph(self.layers_n)
        self.groups = [tuple(self.layer_w[a:a + self.group]) for a in range(0, self.layers_n, self.group)]
        self.inter = n_gu // 2
        self.hidden = c.hidden_size
        self.norm = model.model.norm.weight
        self.head, self.vocab = linear(model.get_output_embeddings())
        self.compiled = compile_
        # each Step (each model) is one more compiled variant of the same three functions
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        torch._inductor.config.cpp.dynamic_threads = True   # one kernel for any thread count (see ``warm``)
        wrap = (lambda f: torch.compile(f, fullgraph=True, mode=mode)) if compile_ else (lambda f: f)
        self._start, self._layers, self._end = wrap(self._start_fn), wrap(self._layers_fn), wrap(self._end_fn)

    def release(self) -> None:
        for k in self._keys:
            _WEIGHTS.pop(k, None)

    def __call__(self, tok, pos, g, own, pre, hidden: bool = False, gi: int | None = None):
        """tok [R] ids; pos, g: 0-d int64 (position of tok, rows' own tokens before it); own: keys and
        values [L, 2, R, kvh, T, d] (position g is written here); pre: the prompt's [L, 2, kvh, P, d].
        Returns logits [R, V] fp32; with ``hidden``, (logits, every layer's hidden state [R, L + 1, hidden]
        fp32: the embeddings, each layer's output, the last one normed, as transformers'
        ``output_hidden_states`` gives them). ``gi``: g as an int (read from ``g`` when not given).

        Each layer attends to the prompt, the rows' earlier tokens and the current one; a run of layers returns
        their current keys and values, written into ``own`` here, between graphs: written inside a graph, the
        in-place write becomes a copy of the whole buffer (functionalisation)."""
        gi = int(g) if gi is None else gi
        mark = torch._dynamo.mark_dynamic if self.compiled else (lambda t, dims: None)
        t_axis = own[0, 0, 0, 0, :, 0]   # [T]: the own-token buffer's positions (grown by CHUNK)
        mark(tok, 0)
        mark(t_axis, 0)   # dynamic from the first build: a race past ``warm``'s CHUNK positions compiles nothing
        x, cos, sin, mask = self._start(tok, pos, g, t_axis)
        mark(x, 0)
        mark(mask, 0)
        states = [x] if hidden else None
        for a, weights in zip(range(0, self.layers_n, self.group), self.groups):
            o, p = own[a:a + self.group], pre[a:a + self.group]
            mark(o, (2, 4))
            mark(p, 3)
            x, ks, vs, xs = self._layers(x, cos, sin, mask, o, p, weights)
            o[:, 0, :, :, gi].copy_(ks)
            o[:, 1, :, :, gi].copy_(vs)
            if hidden:
                states.extend(xs.unbind(0))
        logits, normed = self._end(x)
        if not hidden:
            return logits
        return logits, torch.stack(states[:-1] + [normed], dim=1).float()   # the last layer's output is normed

    def _start_fn(self, tok, pos, g, t_axis):
        x = self.embed[tok]                                                # [R, hidden]
        freqs = pos.float() * self.inv_freq                                # [d/2]
        emb = torch.cat((freqs, freqs))
        cos = (emb.cos() * self.rot_scale).to(x.dtype)
        sin = (emb.sin() * self.rot_scale).to(x.dtype)
        t = torch.arange(t_axis.shape[0], device=tok.device)
        mask = torch.where(t < g, 0.0, float("-inf"))                     # [T]: the own tokens before this one
        return x, cos, sin, mask

    def _layers_fn(self, x, cos, sin, mask, own, pre, weights):
        """A run of layers (``weights``: each layer's, ``own``/``pre``: their slices of the caches): the last
        one's output, every layer's current key and value (stacked), and every layer's output (stacked)."""
        ks, vs, xs = [], [], []
        for i, w in enumerate(weights):
            x, k, v = self._layer_fn(x, cos, sin, mask, own[i], pre[i], *w)
            ks.append(k)
            vs.append(v)
            xs.append(x)
        return x, torch.stack(ks), torch.stack(vs), torch.stack(xs)

    def _qkv(self, x, cos, sin, ln1, kqkv, qn, kn):
        """A layer's queries [R, kv heads, group, d] and current key and value [R, kv heads, d], rotated."""
        R = x.shape[0]
        h, kvh, d = self.heads, self.kv_heads, self.head_dim
        qd, kd = h * d, kvh * d
        hs = _rms(x, ln1, self.eps)
        qkv = self._lin(hs, kqkv, qd + 2 * kd)
        q = qkv[:, :qd].view(R, h, d)
        k = qkv[:, qd:qd + kd].view(R, kvh, d)
        v = qkv[:, qd + kd:].view(R, kvh, d)
        if qn is not None:
            q, k = _rms(q, qn, self.eps), _rms(k, kn, self.eps)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        return q.view(R, kvh, h // kvh, d), k, v

    def _out_mlp(self, x, att, ln2, ko, kgu, kdown):
        """The attention's output [R, kv heads, group, d] projected and added, then the MLP's."""
        x = x + self._lin(att.to(x.dtype).reshape(x.shape[0], self.heads * self.head_dim), ko, self.hidden)
        hs = _rms(x, ln2, self.eps)
        gu = self._lin(hs, kgu, 2 * self.inter)
        return x + self._lin(torch.nn.functional.silu(gu[:, :self.inter]) * gu[:, self.inter:], kdown, self.hidden)

    def _layer_fn(self, x, cos, sin, mask, own, pre, ln1, ln2, kqkv, ko, kgu, kdown, qn, kn):
        q, k, v = self._qkv(x, cos, sin, ln1, kqkv, qn, kn)
        qg = q.float()
        # scores as broadcast products summed over d: each row its own loop, whatever the row count
        s_p = (qg[:, :, :, None, :] * pre[0][None, :, None].float()).sum(-1) * self.scaling
        s_o = (qg[:, :, :, None, :] * own[0][:, :, None].float()).sum(-1) * self.scaling + mask
        s_c = (qg * k[:, :, None, :].float()).sum(-1, keepdim=True) * self.scaling     # the current token
        P, T = pre.shape[2], own.shape[3]
        s = torch.cat((s_p, s_o, s_c), dim=-1).softmax(-1)                 # [R, kvh, grp, P + T + 1]
        att = ((s[..., :P, None] * pre[1][None, :, None].float()).sum(-2)
               + (s[..., P:P + T, None] * own[1][:, :, None].float()).sum(-2)
               + s[..., P + T:] * v[:, :, None, :].float())                 # [R, kvh, grp, d]
        return self._out_mlp(x, att, ln2, ko, kgu, kdown), k, v

    def _end_fn(self, x):
        normed = _rms(x, self.norm, self.eps)
        return self._lin(normed, self.head, self.vocab).float(), normed

    def _lin(self, x, w, out: int):
        """A linear layer: the packed oneDNN op by key on a CPU, ``F.linear`` on (weight, bias) elsewhere."""
        if self.packed:
            return torch.ops.specrej.linear(x, w, out)
        return torch.nn.functional.linear(x, w[0], w[1])


def prompt_kv(prompt_cache) -> torch.Tensor:
    """The prompt's keys and values once, as the steps read them: [layers, 2, kv heads, P, head dim]."""
    return torch.stack([torch.stack([layer.keys[0], layer.values[0]]) for layer in prompt_cache.layers])


class StaticRows:
    """The rows' cache for ``Step``: the prompt once, each row's tokens in buffers grown by ``CHUNK``.

    A lone row is kept as two (the second a copy) so no kernel ever runs on one row."""

    def __init__(self, step: Step, prompt_cache, rows: int):
        self.step = step
        self.pre = prompt_kv(prompt_cache)
        L, _, kvh, self.prefix_len, d = self.pre.shape                  # [L, 2, kvh, P, d]
        self.n = rows
        self.own = self.pre.new_zeros(L, 2, max(rows, 2), kvh, CHUNK, d)
        self.g = 0

    def own_length(self) -> int:
        return self.g

    def feed(self, tok: torch.Tensor, hidden: bool = False):
        """One token per row (tok: [rows]) -> next-token logits [rows, vocab] fp32 (and, with ``hidden``,
        every layer's hidden state [rows, layers + 1, hidden_size])."""
        if self.g >= self.own.shape[4]:
            self._grow()
        dev, phys = self.own.device, self.own.shape[2]
        tok = tok.to(dev)
        if tok.shape[0] < phys:
            tok = torch.cat([tok, tok[:1].expand(phys - tok.shape[0])])
        pos = torch.tensor(self.prefix_len + self.g, device=dev)
        out = self.step(tok, pos, torch.tensor(self.g, device=dev), self.own, self.pre, hidden=hidden, gi=self.g)
        self.g += 1
        return (out[0][:self.n], out[1][:self.n]) if hidden else out[:self.n]

    def _grow(self) -> None:
        old = self.own
        self.own = old.new_zeros(*old.shape[:4], old.shape[4] + CHUNK, old.shape[5])
        self.own[..., :old.shape[4], :] = old

    def batch_select_indices(self, idx: torch.Tensor) -> None:
        self.n = len(idx)
        if self.n == 1:
            idx = idx.repeat(2)
        self.own = self.own[:, :, idx.to(self.own.device)]


_steps: "weakref.WeakKeyDictionary[torch.nn.Module, Step | None]" = weakref.WeakKeyDictionary()


def step_for(model) -> Step | None:
    """The model's ``Step`` (built once per model; compiled where ``mode()`` allows); None where it cannot
    be used, with one log line saying why."""
    if model in _steps:
        return _steps[model]
    m = mode()
    why = "SPECREJ_COMPILE=0" if m == "off" else unsupported(model)
    st = None
    if why is None:
        try:
            st = Step(model, compile_=True)
            warm(st)
        except Exception as e:   # no C++ toolchain, an inductor failure: decode eagerly
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            st = None
    if why is not None:
        log.warning("specrej: decoding eagerly (no compiled step): %s", why)
    _steps[model] = st
    return st


def use(model, step: "Step | None") -> None:
    """Make ``step`` the one engines of ``model`` decode with (None: the eager forward): for measuring both."""
    _steps[model] = step


def warm(step: Step, rows: tuple[int, ...] = (2, 3)) -> float:
    """Compile the step now on dummy inputs (first call), so no race pays for it; returns seconds.

    A compiled graph is specialised to the torch thread count (dynamo guards on it), and the app races with
    one thread on a busy machine (``components/session/pace.py``): both counts are compiled here. The C++
    kernels read the thread count when they run (``cpp.dynamic_threads``), so the second is a cache hit."""
    t0 = time.perf_counter()
    L, kvh, d = step.layers_n, step.kv_heads, step.head_dim
    threads = torch.get_num_threads()
    counts = (threads, 1) if step.compiled and step.device.type == "cpu" and threads > 1 else (threads,)
    with torch.inference_mode():
        for r, n in ((r, n) for n in counts for r in rows):
            torch.set_num_threads(n)
            pre = torch.zeros(L, 2, kvh, 5, d, dtype=step.dtype, device=step.device)
            own = torch.zeros(L, 2, r, kvh, CHUNK, d, dtype=step.dtype, device=step.device)
            tok = torch.zeros(r, dtype=torch.long, device=step.device)
            step(tok, torch.tensor(5, device=step.device), torch.tensor(0, device=step.device), own, pre)
    torch.set_num_threads(threads)
    return time.perf_counter() - t0
