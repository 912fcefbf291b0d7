"""A whole decoding step as one function over buffers made when the rows start: one CUDA graph per row bucket.

Why (issue 49): on an H200 (2026-12-04, docs/performance.md, the GPU) the compiled step (``compiled.py``) was 2.6x
slower than transformers' static-cache ``generate``: the host issued ~2,500 kernels a step, the step called 31
graphs from Python, and ``mode="reduce-overhead"`` failed, because one step ran several captured graphs that handed
their outputs to each other. Here one function (``Graphed.run``) does a whole step: it samples every row's next
token from the logits with the race's coupled uniforms, adds the token's statistics, feeds it through every layer
(keys and values written at the step's position, a device tensor) and leaves the next logits, all in buffers
allocated when the rows start. On CUDA it is captured once per row bucket (rows padded to a capture size:
1-8, then eight sizes an octave, ``memplan.capture_sizes``: at most 1/8 of the rows are padding) with
``torch.cuda.graph`` and replayed each step: one launch, and one device-to-host copy (each row's token and its
statistics so far). The host keeps the tokens' bookkeeping (end of sequence,
stop strings, length) and which rows live (``select``: a gather within the same buffers, outside the graphs).

The buffers (``memplan``: planned from the run's admission): the prompt's keys and values once, each row's own in
one block a layer, ``layers x [2, rows, kv heads, T, head dim]``, where ``T`` is what the admitted KV slots grant
the live rows (``budget // rows``, plus the last token's write; the whole answer where no budget was given) and
what the device's free memory holds beside the logits and a step's pool. Once the rows have been pruned and
reach ``T``, the buffers are laid out again for the rows alive (``relayouts``; at most once per decision in a
Speculative Rejection race): the old graphs and their pool freed first, then layer by layer (a new block, the live
rows copied in, the old block freed), so a relayout never holds the old buffers and the new at once; the new
layout's graphs are captured into a pool of their own.

Attention reads the rows' own positions filled so far, rounded up to a window of ``WINDOW`` (a graph per bucket and
window), not the whole buffer. On CUDA as matmuls in the model's dtype (fp32 softmax), with no cast of a cache; on a CPU the compiled
step's row-wise form (``compiled.Step._layer_fn``: each row's own reduction, so a candidate writes the same tokens
in any batch). The linears are the compiled step's (prepacked oneDNN on a CPU, ``F.linear`` on CUDA).

Exact: a captured step replays what ``run`` computes eagerly over the same buffers (``capture=False`` runs it so;
the CUDA tests compare the two). On a CPU nothing is captured and the path is off by default: ``SPECREJ_GRAPH=1``
runs it there (the tests do: its tokens equal the compiled step's). ``SPECREJ_GRAPH=0`` switches it off on CUDA,
where it is the default for the models the compiled step takes (``compiled.unsupported``).
"""
from __future__ import annotations

import logging
import math
import os
import time
import weakref

import torch

from . import compiled, memplan

log = logging.getLogger("specrej.engine.captured")
GRAPH_ENV = "SPECREJ_GRAPH"
FUSE_ENV = "SPECREJ_FUSE"   # "1": the body's pieces compiled by inductor (no CUDA graphs of its own), then captured
MIN_BUCKET = 2          # a lone row runs as two (CPU kernels take another path for one row)
WINDOW = 64             # a step attends to the rows' own positions in windows of this many: the filled ones, rounded up


def mode() -> str:
    """``SPECREJ_GRAPH``: "auto" (default: on for CUDA), "on" (also on a CPU, uncaptured) or "off"."""
    v = os.environ.get(GRAPH_ENV, "auto").strip().lower()
    return "off" if v in ("0", "false", "no", "off") else "on" if v in ("1", "true", "yes", "on") else "auto"


def fuse_mode() -> bool:
    """``SPECREJ_FUSE=1``: fuse the body (an experiment until a GPU has measured it; off by default)."""
    return os.environ.get(FUSE_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


def bucket(n: int) -> int:
    """The rows a graph runs for ``n`` live rows: the next capture size (``memplan.CAPTURE_SIZES``), at least
    ``MIN_BUCKET``."""
    return memplan.bucket_for(n, memplan.CAPTURE_SIZES, MIN_BUCKET)


class Body:
    """A model's decoding step as plain tensor code (the compiled step's weights and pieces, uncompiled).

    ``fuse`` (default ``SPECREJ_FUSE``): its three pieces (embedding and rotary; one layer, called for each; final norm
    and head) compiled by inductor with dynamic shapes and no CUDA graphs of their own, so a capture records the
    fused kernels (SGLang's way: ~60 ops a layer become a few kernels). The keys' and values' writes stay outside
    the compiled pieces (written inside, functionalisation would copy the whole buffer). ``warm`` compiles them."""

    def __init__(self, model, attention: str | None = None, fuse: bool | None = None):
        self.step = compiled.Step(model, compile_=False)
        self.model = weakref.ref(model)   # (weak: a body is a value of the per-model tables)
        self.device, self.dtype = self.step.device, self.step.dtype
        self.attention = attention or ("matmul" if self.device.type == "cuda" else "rowwise")
        self.fuse = fuse_mode() if fuse is None else bool(fuse)
        st = self.step
        self._start, self._end = st._start_fn, st._end_fn
        self._layer = st._layer_fn if self.attention == "rowwise" else self._layer_mm
        if self.fuse:
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            fused = lambda f: torch.compile(f, dynamic=True, fullgraph=True)   # noqa: E731
            self._start, self._layer, self._end = fused(self._start), fused(self._layer), fused(self._end)
        self.warmed = not self.fuse

    def release(self) -> None:
        self.step.release()

    def warm(self) -> float:
        """Compile the fused pieces now on dummy buffers (sizes all different, so no two share a symbol), so no race
        pays for it; returns seconds (0 where nothing is fused, or already warm)."""
        if self.warmed:
            return 0.0
        t0 = time.perf_counter()
        try:
            self._warm()
        except Exception as e:   # a compiler failure: the plain pieces instead (never a failed race because of it)
            log.error("specrej: fusing the decoding step failed; it runs unfused (%s: %s)", type(e).__name__,
                      str(e).splitlines()[0][:300] if str(e) else "", exc_info=e)
            st = self.step
            self.fuse, self._start, self._end = False, st._start_fn, st._end_fn
            self._layer = st._layer_fn if self.attention == "rowwise" else self._layer_mm
        self.warmed = True
        return time.perf_counter() - t0

    def _warm(self) -> None:
        st, dev = self.step, self.device
        L, kvh, d = st.layers_n, st.kv_heads, st.head_dim
        with torch.inference_mode():   # the buffers as a step sees them: its rows and window a slice of them, or all
            for rows, T, P, more_rows, more_T in ((3, 7, 5, 2, 4), (4, 9, 6, 0, 0), (5, 10, 7, 1, 0), (6, 11, 8, 0, 3)):
                pre = torch.zeros(L, 2, kvh, P, d, dtype=self.dtype, device=dev)
                own = [torch.zeros(2, rows + more_rows, kvh, T + more_T, d, dtype=self.dtype, device=dev)[:, :rows, :, :T]
                       for _ in range(L)]
                g = torch.tensor(1, device=dev)
                self.forward(torch.zeros(rows, dtype=torch.long, device=dev), g + P, g, own, pre)

    def forward(self, tok: torch.Tensor, pos: torch.Tensor, g: torch.Tensor, own: torch.Tensor,
                pre: torch.Tensor) -> torch.Tensor:
        """tok [B]; pos, g: 0-d int64 on the device (tok's position, the rows' own tokens before it); own: each layer's
        [2, B, kvh, T, d] (a list, or one [L, 2, B, kvh, T, d] tensor), whose position g is written here; pre [L, 2,
        kvh, P, d]. Returns the next logits [B, V] fp32."""
        st = self.step
        x, cos, sin, mask = self._start(tok, pos, g, own[0][0, 0, 0, :, 0])
        at = g.view(1)
        for i, w in enumerate(st.layer_w):
            x, k, v = self._layer(x, cos, sin, mask, own[i], pre[i], *w)
            own[i][0].index_copy_(2, at, k.unsqueeze(2))
            own[i][1].index_copy_(2, at, v.unsqueeze(2))
        return self._end(x)[0]

    def _layer_mm(self, x, cos, sin, mask, own, pre, ln1, ln2, kqkv, ko, kgu, kdown, qn, kn):
        """``compiled.Step._layer_fn`` with its attention as batched matmuls in the model's dtype (no cache cast):
        the prompt's part one matmul per kv head over every row, the rows' own part one per row and head."""
        st = self.step
        qg, k, v = st._qkv(x, cos, sin, ln1, kqkv, qn, kn)                      # qg [R, kvh, grp, d]
        R, kvh, grp, d = qg.shape
        qh = qg.permute(1, 0, 2, 3).reshape(kvh, R * grp, d)                    # the prompt's part: per kv head
        P, T = pre.shape[2], own.shape[3]
        s_p = torch.bmm(qh, pre[0].transpose(1, 2)).view(kvh, R, grp, P).permute(1, 0, 2, 3)
        s_o = torch.matmul(qg, own[0].transpose(2, 3))                          # [R, kvh, grp, T]
        s_c = (qg.float() * k[:, :, None, :].float()).sum(-1, keepdim=True)     # the current token
        s = torch.cat((s_p.float() * st.scaling, s_o.float() * st.scaling + mask, s_c * st.scaling), -1).softmax(-1)
        w = s.to(x.dtype)
        a_p = torch.bmm(w[..., :P].permute(1, 0, 2, 3).reshape(kvh, R * grp, P), pre[1])
        att = (a_p.view(kvh, R, grp, d).permute(1, 0, 2, 3).float()
               + torch.matmul(w[..., P:P + T], own[1]).float()
               + s[..., P + T:] * v[:, :, None, :].float())                     # [R, kvh, grp, d]
        return st._out_mlp(x, att, ln2, ko, kgu, kdown), k, v


_bodies: "weakref.WeakKeyDictionary[torch.nn.Module, Body | None]" = weakref.WeakKeyDictionary()
_failed: "weakref.WeakKeyDictionary[torch.nn.Module, str]" = weakref.WeakKeyDictionary()   # why capture failed


def body_for(model) -> Body | None:
    """The model's ``Body`` where this path is on for it (``mode``; the compiled step's families, not after a
    failed capture), else None."""
    m = mode()
    if m == "off" or (m == "auto" and model.device.type != "cuda") or model in _failed:
        return None
    if model in _bodies:
        return _bodies[model]
    why = compiled.unsupported(model)
    b = None
    if why is None:
        try:
            b = Body(model)
        except Exception as e:   # a layout the pieces do not take: the compiled (or eager) step instead
            why = f"{type(e).__name__}: {str(e)[:200]}"
    if why is not None:
        log.warning("specrej: no captured step (%s)", why)
    _bodies[model] = b
    return b


def failure(model) -> str | None:
    """Why capturing ``model``'s step failed in this process (it then decodes on the compiled or eager step)."""
    return _failed.get(model)


def _give_up(body: Body, err: BaseException) -> str:
    """A capture failed: say why once, with the traceback, and switch the body's model off this path for the
    process (its later engines take the compiled step, else the eager one)."""
    why = f"{type(err).__name__}: {err}".strip()
    model = body.model()
    if model is not None and model not in _failed:
        log.error("specrej: capturing the decoding step failed; this pass finishes on the same step uncaptured "
                  "and the model decodes on the compiled step from now on (%s)", why.splitlines()[0][:300],
                  exc_info=err)
        _failed[model] = why
        _bodies[model] = None
    return why


class Graphed:
    """One pass's rows on a ``Body``: its buffers, a graph per row bucket (CUDA), the step and the rows' selection.

    ``uniforms`` [max_new_tokens, n_total] fp64 on the device: the race's coupled uniforms by position and candidate
    (``hf.coupled_uniforms``, every position computed once); ``sample``: the engine's sampling function;
    ``budget``: the rows' own KV slots the run was admitted (the prompt's shared slots left out; None: none given,
    the whole answer where memory holds it); ``full_sort``: the sampling sorts the whole vocabulary (top_k = 0: a
    larger step, ``memplan.step_bytes``)."""

    def __init__(self, body: Body, prompt_cache, prompt_logits: torch.Tensor, ids: list[int], *,
                 uniforms: torch.Tensor, sample, max_new_tokens: int, capture: bool | None = None,
                 budget: int | None = None, full_sort: bool = True):
        self.net, self.sample = body, sample
        self.device = body.device
        self.capture = (self.device.type == "cuda") if capture is None else bool(capture)
        self.uniforms, self.max_new = uniforms, int(max_new_tokens)
        self.budget, self.full_sort = budget, bool(full_sort)
        self.pre = compiled.prompt_kv(prompt_cache)
        self.prefix_len = self.pre.shape[3]
        st = body.step
        self.shape = memplan.Shape(layers=st.layers_n, kv_heads=st.kv_heads, head_dim=st.head_dim,
                                   dtype_bytes=self.pre.element_size(), vocab=st.vocab, heads=st.heads,
                                   hidden=st.hidden, intermediate=st.inter)
        self.log_vocab = math.log(prompt_logits.shape[-1])
        self.n = len(ids)
        self.graphs: dict[tuple[int, int], object] = {}   # (rows bucket, attention window) -> its graph
        self.relayouts = 0
        self.failed: str | None = None   # why capturing failed (this pass then ran uncaptured)
        self._pool = None                # this layout's graph pool (a relayout starts a new one)
        self.g = torch.zeros((), dtype=torch.long, device=self.device)      # the rows' own tokens fed so far
        self.fed = 0                                                        # g, as the host counts it
        self.plan: memplan.Plan | None = None
        T = self._positions(bucket(self.n))
        if T < 1:
            raise torch.cuda.OutOfMemoryError(f"the rows' keys and values do not fit: {self.plan and self.plan.why}")
        self._layout(bucket(self.n), T)
        self.ids[:self.n] = torch.tensor(ids, device=self.device)
        self.ids[self.n:] = self.ids[0]
        self.logits.copy_(prompt_logits.to(self.device).expand(self.rows, -1))

    # ---- buffers

    def _positions(self, rows: int, freed: int = 0, admitted: bool = True) -> int:
        """The own-token positions the buffers hold for the live rows, padded to ``rows`` (``memplan.plan`` over the
        admitted slots, unless ``admitted`` is False, and, on CUDA, the device's free memory plus ``freed``: what
        this pass still holds and is about to free)."""
        free = None
        if self.device.type == "cuda":
            free = torch.cuda.mem_get_info(self.device)[0] + int(freed)
        self.plan = memplan.plan(free, self.shape, self.n, self.max_new, budget=self.budget if admitted else None,
                                 sizes=memplan.CAPTURE_SIZES, minimum=MIN_BUCKET, prefix=self.prefix_len,
                                 full_sort=self.full_sort)
        assert self.plan.rows == rows, (self.plan.rows, rows)
        return self.plan.positions

    def held_bytes(self) -> int:
        """What this pass's buffers hold now (keys and values, logits, ids, sums): what a relayout frees."""
        return sum(t.numel() * t.element_size() for t in (*self.own, self.logits, self.ids, self.lp, self.sc,
                                                            self.out))

    def _layout(self, rows: int, T: int) -> None:
        """New buffers for ``rows`` rows and ``T`` own positions."""
        L, _, kvh, _, d = self.pre.shape
        self.own = [self.pre.new_zeros(2, rows, kvh, T, d) for _ in range(L)]   # one block a layer
        self.logits = torch.zeros(rows, self.net.step.vocab, dtype=torch.float32, device=self.device)
        self.ids = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.lp = torch.zeros(rows, dtype=torch.float64, device=self.device)
        self.sc = torch.zeros(rows, dtype=torch.float64, device=self.device)
        self.out = torch.zeros(rows, 3, dtype=torch.float64, device=self.device)   # token, lp sum, sc sum
        self.rows, self.T = rows, T
        self.graphs.clear()

    def _relayout(self) -> None:
        """Lay the buffers out again for the rows alive (their ``fed`` positions kept): the old graphs and their
        pool freed first, the new size planned with the old buffers counted as free, then one layer at a time a new
        block made, the live rows copied in and the old block freed (``memplan.relayout_peak``)."""
        self.graphs.clear()
        self._pool = None   # a pool per layout: nothing of the old one is still alive when the new graphs capture
        if self.device.type == "cuda":
            torch.cuda.empty_cache()   # the old pool's blocks back to the device, where mem_get_info sees them
        rows, held = bucket(self.n), self.held_bytes()
        T = self._positions(rows, freed=held)
        if T <= self.fed:   # rows kept past what their admission grants (a rule that is not the budget's): memory's
            T = self._positions(rows, freed=held, admitted=False)
        if T <= self.fed:
            raise torch.cuda.OutOfMemoryError(f"the rows' keys and values at {self.fed + 1} tokens do not fit"
                                              + (f": {self.plan.why}" if self.plan and self.plan.why else ""))
        n, f = self.n, self.fed
        L, _, kvh, _, d = self.pre.shape
        for i in range(L):
            new = self.pre.new_zeros(2, rows, kvh, T, d)
            new[:, :n, :, :f] = self.own[i][:, :n, :, :f]
            self.own[i] = new   # the old block freed here
            if self.device.type == "cuda":
                torch.cuda.empty_cache()   # ... and handed back, so the next layer's larger block can take it
        logits = self.logits.new_zeros(rows, self.logits.shape[1])
        logits[:n] = self.logits[:n]
        ids = self.ids.new_zeros(rows)
        ids[:n] = self.ids[:n]
        ids[n:] = ids[0]
        lp, sc = self.lp.new_zeros(rows), self.sc.new_zeros(rows)
        lp[:n], sc[:n] = self.lp[:n], self.sc[:n]
        self.logits, self.ids, self.lp, self.sc = logits, ids, lp, sc
        self.out = torch.zeros(rows, 3, dtype=torch.float64, device=self.device)
        self.rows, self.T = rows, T
        self.relayouts += 1

    def own_length(self) -> int:
        return self.fed

    # ---- one step

    def window(self) -> int:
        """The own positions this step attends to: those filled and the one it writes, rounded up to ``WINDOW``
        (at most ``T``). Attention reads the keys and values of these only, not the whole buffer (at the paper's
        scale, 2,048 rows x 232 positions of the 8B config, ~62 GB a step); the mask hides the rest of the window.
        Chosen on the host, which counts the positions (``fed``): a graph per (bucket, window), a few per bucket."""
        return min(self.T, -(-(self.fed + 1) // WINDOW) * WINDOW)

    def run(self, b: int) -> None:
        """The step on the first ``b`` rows: sample, statistics, feed; everything in the buffers, g advanced. The
        layers attend to the own positions in ``window()``."""
        logits = self.logits[:b]
        u = self.uniforms[self.g.view(1), self.ids[:b]]   # (a 0-d index would be read on the host: no capture)
        tok = self.sample(logits, u)
        lse, mean = logits.logsumexp(-1), logits.mean(-1)
        self.lp[:b] += (logits.gather(-1, tok[:, None]).squeeze(-1) - lse).double()
        self.sc[:b] += (lse - mean - self.log_vocab).double()
        self.out[:b, 0].copy_(tok)   # exact in fp64 (ids below 2**53): the host's one copy holds all three
        self.out[:b, 1].copy_(self.lp[:b])
        self.out[:b, 2].copy_(self.sc[:b])
        w = self.window()
        nxt = self.net.forward(tok, self.g + self.prefix_len, self.g, [o[:, :b, :, :w] for o in self.own], self.pre)
        self.logits[:b].copy_(nxt)
        self.g += 1

    def step(self) -> list[tuple[int, float, float]]:
        """One step of the live rows; returns each one's (sampled token, log-probability sum, self-certainty sum)
        so far: the step's one copy to the host."""
        if self.fed >= self.T:   # the buffers' positions are used up: lay them out again for the rows alive
            self._relayout()
        b = bucket(self.n)
        graph = self._graph(b) if self.capture else None
        if graph is None:
            self.run(b)
        else:
            graph.replay()
        self.fed += 1
        return [(int(t), lp, sc) for t, lp, sc in self.out[:self.n].tolist()]

    def _graph(self, b: int):
        """The captured step for ``b`` rows and this step's window, captured at its first use; None where capturing
        failed: then this pass runs the same body uncaptured over the same buffers (the same step, so the race goes
        on), and ``failed`` says why."""
        key = (b, self.window())
        graph = self.graphs.get(key)
        if graph is not None:
            return graph
        state = (self.logits, self.lp, self.sc, self.g)
        saved = [t.clone() for t in state]

        def restore():
            for t, s in zip(state, saved):
                t.copy_(s)

        try:
            graph = self.graphs[key] = self._capture(b, restore)
            return graph
        except Exception as e:   # any failure, on any bucket: never a failed race because of capture
            self.capture, self.failed = False, _give_up(self.net, e)
            self.graphs.clear()
            if self.device.type == "cuda":
                try:
                    torch.cuda.synchronize(self.device)
                except Exception:   # a sticky device error: the uncaptured step below raises it plainly
                    pass
            restore()   # the buffers as they were before the step (the warm-up may have run, or half of it)
            return None

    def _capture(self, b: int, restore):
        """Capture the step for ``b`` rows (and this step's window) after one warm-up step whose effects on the
        buffers ``restore`` undoes."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self.run(b)   # the warm-up (cuBLAS workspaces, lazy inits); position g is written again below
        torch.cuda.current_stream(self.device).wait_stream(side)
        restore()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self.run(b)
        return graph

    # ---- the rows

    def select(self, keep: list[int]) -> None:
        """Keep only these rows (positions), in this order, in the first rows of the same buffers."""
        n = len(keep)
        idx = torch.tensor(keep, device=self.device)
        for o in self.own:   # a layer at a time: the temporary is one layer's kept rows, not the whole cache's
            o[:, :n] = o[:, idx]
        for t in (self.logits, self.ids, self.lp, self.sc):
            t[:n] = t[idx]
        self.n = n
        b = bucket(n)
        if n < b:   # the padding rows: copies of the first (finite, valid ids)
            self.ids[n:b] = self.ids[0]
