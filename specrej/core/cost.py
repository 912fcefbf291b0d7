"""What a race costs: FLOPs (``flops``, the one rule), Best-of-N's passes (``passes``, the one
splitter), the rows each arm decodes at each step, at most, a measured cost of one decoding step by
batch size (``StepCost``, the one step-time model), and the price of rows that start together and
leave as their answers end (``decode_cost``; ``expected_pass_cost`` for a pass of answers drawn at
random: the one Best-of-k pricing rule, which the page's verdict and the bench's wall time share).
No torch here.

``race_rows(budget, cfg)`` bounds the work from above: Best-of-N decodes its N candidates in
passes of ``rows_per_pass`` rows to full length (no answer ends early, no stop once matched);
Speculative Rejection's rows at token t are at most its first batch and at most what the memory
budget holds at t (memory-full decisions never leave more). ``StepCost`` turns rows into seconds
by interpolating decoding steps measured at a few batch sizes. The app uses the two to say, before
a run starts, whether it fits the deployment's time limit.
"""
from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from .config import AUTO, RunConfig
from .about import ABOUTS, PASSES
from .budget import KVBudget
from .settings import DeepConfSettings


def flops(params: int, tokens: float) -> float:
    """FLOPs of a model of ``params`` parameters reading or writing ``tokens`` tokens: 2 x params x tokens
    (a multiply and an add per weight per token). The weights' term of ``FlopModel``; the ledger counts with
    ``FlopModel`` (non-embedding weights and attention)."""
    return 2.0 * params * tokens


@dataclass(frozen=True)
class FlopModel:
    """A model's FLOPs as the field counts them (Kaplan et al. 2020, "Scaling laws for neural language models",
    Table 1, forward pass): per token, 2 x its non-embedding parameters (a multiply and an add per weight; the
    embedding tables are looked up, not multiplied: a BERT-like reward's vocabulary can be most of its parameters)
    plus attention's 2 x layers x context x d_model (its scores against the ``context`` tokens it attends to).
    The same rule for generators and reward models; ``of_module`` reads it off a model, and a caller may give its
    own (``LM.flop_model``, a reward's ``flop_model``) where a model is not a transformers one.

    Context: a generated or prefilled token at position p (the prompt's first token is 1) attends to p tokens
    (causal); a reward reading a sequence of T tokens counts T per token (an encoder attends both ways)."""

    params: float      # non-embedding parameters (the weights every token is multiplied by)
    layers: int = 0    # attention layers (0: no attention term, e.g. a plain parameter count)
    d_model: int = 0   # the attention's width (hidden size)

    def __post_init__(self):
        if not (self.params >= 0 and self.layers >= 0 and self.d_model >= 0):
            raise ValueError(f"a FlopModel's params, layers and d_model are counts of 0 or more, not {self}")

    def tokens(self, n: float, context: float = 0.0) -> float:
        """FLOPs of ``n`` tokens whose contexts sum to ``context`` (tokens attended to, over the n)."""
        return 2.0 * self.params * n + 2.0 * self.layers * self.d_model * context

    def sequence(self, start: int, length: int) -> float:
        """FLOPs of ``length`` tokens at positions start+1 .. start+length, each attending to its position: a
        prompt's prefill is ``sequence(0, P)``, an answer of g tokens after it ``sequence(P, g)``."""
        n = max(0, int(length))
        return self.tokens(n, n * start + n * (n + 1) / 2.0)

    def read(self, lengths) -> float:
        """FLOPs of an encoder reading sequences of these ``lengths`` (each token attends to its whole sequence)."""
        lengths = [max(0, int(t)) for t in lengths]
        return self.tokens(sum(lengths), sum(t * t for t in lengths))

    @classmethod
    def of_module(cls, module, config=None) -> "FlopModel":
        """The FlopModel of a torch module (duck-typed: no torch here): its parameters less its embedding tables
        (every ``Embedding`` module: words, positions, token types; and the output embedding a causal LM's
        ``get_output_embeddings`` names, tied or not: Kaplan's N leaves the unembedding out too), each tensor
        once; layers and width from its config (``num_hidden_layers`` / ``n_layer`` / ``num_layers``,
        ``hidden_size`` / ``n_embd`` / ``d_model``; 0, no attention term, where it names none)."""
        seen: dict[int, int] = {}
        for p in module.parameters():
            seen[id(p)] = p.numel()
        embedded: set[int] = set()
        for m in module.modules():
            if type(m).__name__.endswith("Embedding") and hasattr(m, "weight"):
                embedded.add(id(m.weight))
        out_emb = getattr(module, "get_output_embeddings", None)
        head = out_emb() if callable(out_emb) else None
        if head is not None and getattr(head, "weight", None) is not None:
            embedded.add(id(head.weight))
        params = sum(n for i, n in seen.items() if i not in embedded)
        config = config if config is not None else getattr(module, "config", None)

        def first(*names) -> int:
            for name in names:
                v = getattr(config, name, None)
                if isinstance(v, int) and v > 0:
                    return v
            return 0

        return cls(params, first("num_hidden_layers", "n_layer", "num_layers"),
                   first("hidden_size", "n_embd", "d_model"))


def flop_model_of(obj) -> FlopModel:
    """How the ledger counts ``obj``'s FLOPs (a generator or a reward): its own ``flop_model`` where it has one (a
    caller's override: ``lm.flop_model = FlopModel(...)``, ``reward.flop_model = ...``), else read off the torch
    module it runs (``model``; a preference reward's ``embedder.model``; a wrapped reward's), else its
    ``n_params`` as it gives them with no attention term (a backend without the module, e.g. vLLM's: the old rule,
    2 x parameters x tokens), else 0."""
    for o in (obj, getattr(obj, "reward", None)):
        if o is None:
            continue
        own = getattr(o, "flop_model", None)
        if isinstance(own, FlopModel):
            return own
        for module in (getattr(o, "model", None), getattr(getattr(o, "embedder", None), "model", None)):
            if module is not None and callable(getattr(module, "parameters", None)):
                return FlopModel.of_module(module)
    return FlopModel(float(getattr(obj, "n_params", 0) or 0))


def passes(n: int, rows_per_pass: int) -> list[range]:
    """Candidates 0..n-1 in Best-of-N's passes of ``rows_per_pass`` rows: full passes, then the remainder."""
    if rows_per_pass < 1:
        raise ValueError("rows_per_pass must be at least 1")
    return [range(first, min(n, first + rows_per_pass)) for first in range(0, n, rows_per_pass)]


def decode_cost(lengths: Sequence[int], step: Callable[[int], float]) -> tuple[int, float]:
    """(steps, seconds) of rows that start together and decode until each has ``lengths[i]`` tokens:
    at step t the rows still decoding are those with at least t tokens, priced at ``step(rows)``."""
    lengths = sorted((max(0, int(x)) for x in lengths), reverse=True)
    seconds, rows = 0.0, len(lengths)
    for t in range(1, (lengths[0] if lengths else 0) + 1):
        while rows and lengths[rows - 1] < t:
            rows -= 1
        seconds += step(rows)
    return (lengths[0] if lengths else 0), seconds


def _hypergeom(n: int, good: int, m: int) -> list[float]:
    """P(R = r) for r = 0..m: r of ``good`` marked items among m drawn without replacement from n."""
    total = math.comb(n, m)
    return [math.comb(good, r) * math.comb(n - good, m - r) / total if r <= good and m - r <= n - good else 0.0
            for r in range(m + 1)]


def expected_pass_cost(lengths: Sequence[int], m: int, step: Callable[[int], float]) -> tuple[float, float]:
    """(E steps, E seconds) of a pass of ``m`` answers drawn at random from ``lengths``, by
    ``decode_cost``'s rule (a row leaves the step after its answer ends): R_t, the rows decoding at
    step t, is hypergeometric, so E seconds = sum over t of E[step(R_t)], exact. E steps is the
    expected longest length. The one Best-of-k pricing rule: ``verdict.bon_curve`` and the bench's
    modelled wall time (``curve.bon_point``) both price their passes with it."""
    n = len(lengths)
    if not 1 <= m <= n:
        raise ValueError(f"a pass of {m} rows from {n} answers")
    if m == n:
        steps, seconds = decode_cost(lengths, step)
        return float(steps), seconds
    steps = seconds = 0.0
    for t in range(1, max(lengths) + 1):
        good = sum(x >= t for x in lengths)
        p = _hypergeom(n, good, m)
        steps += 1.0 - p[0]
        seconds += sum(pr * step(r) for r, pr in enumerate(p) if r and pr)
    return steps, seconds


@dataclass(frozen=True)
class BestOfK:
    """Best-of-k drawn at random from one Best-of-N run's answers, in expectation: what it costs."""

    k: int
    steps: float     # expected decoding steps (each pass: its expected longest answer)
    seconds: float   # expected decoding seconds at the step's price (0.0 without one), plus k/N of the scoring
    flops: float     # expected FLOPs: the generator's prefill once and k answers, and k/N of the reward's


def _no_price(rows: int) -> float:
    return 0.0


def best_of_k(k: int, lengths: Sequence[int], rows_per_pass: int, step: Callable[[int], float] | None = None, *,
              params: float = 0.0, prompt_tokens: float = 0.0, reward_flops: float = 0.0, scoring_s: float = 0.0,
              memo: dict | None = None) -> BestOfK:
    """The one Best-of-k point (issue 41): k answers drawn at random from ``lengths`` (Best-of-N's N), decoded
    in ``passes`` of ``rows_per_pass`` rows, each pass priced by ``expected_pass_cost`` (a row leaves the step
    after its answer ends); FLOPs by ``flops`` for a generator of ``params`` parameters (its prompt once and k
    answers of the mean length) plus k/N of the run's ``reward_flops``; ``scoring_s``, the run's reward
    seconds, k/N of it. ``memo``: a dict kept per run and price, so a curve over every k prices each pass size
    once. The verdict maps it over k; the bench's curve adds its refilled and paged columns."""
    n = len(lengths)
    if not 1 <= k <= n:
        raise ValueError(f"Best-of-{k} from {n} answers")
    memo = {} if memo is None else memo
    steps = seconds = 0.0
    for m in map(len, passes(k, rows_per_pass)):
        if m not in memo:
            memo[m] = expected_pass_cost(lengths, m, step or _no_price)
        steps, seconds = steps + memo[m][0], seconds + memo[m][1]
    mean_len = sum(lengths) / n
    return BestOfK(k, steps, seconds + scoring_s * k / n,
                   flops(params, prompt_tokens + k * mean_len) + reward_flops * k / n)


def bon_rows(budget: KVBudget, n: int, max_new_tokens: int) -> list[int]:
    """Rows at each decoding step of Best-of-N: passes of ``rows_per_pass`` rows, each to full length."""
    return [len(p) for p in passes(n, budget.rows_per_pass(n, max_new_tokens)) for _ in range(max_new_tokens)]


def sr_rows(budget: KVBudget, n0: int, max_new_tokens: int) -> list[int]:
    """At most the rows of Speculative Rejection at each step: its first batch, capped at each token
    by what the budget holds (at least one row: a decision always keeps one)."""
    return [max(1, min(n0, budget.rows_that_fit(t))) for t in range(1, max_new_tokens + 1)]


def race_rows(budget: KVBudget, cfg: RunConfig, *, sr_auto: bool,
              methods: tuple[str, ...] = ("bon", "sr")) -> dict[str, list[int]]:
    """Rows per step of each arm of a race at ``cfg``, by method (a method's second arm gets its index):
    ``{"bon": [...], "sr": [...]}`` by default (``sr_auto``: Speculative Rejection opens with the batch that
    fills memory at ``cfg.first_decision``). Bounds from above: Best-of-N, its continuous-batching form and
    DeepConf decode in passes of the rows that fit at full length (a DeepConf trace may reach the end);
    ST-BoN opens with all N rows, capped by what the budget holds, as Speculative Rejection does."""
    n = budget.auto_n(cfg.first_decision) if cfg.n == AUTO else cfg.n
    n0 = budget.auto_n(cfg.first_decision) if sr_auto else n
    out: dict[str, list[int]] = {}
    for i, method in enumerate(methods):
        key = method if method not in out else f"{method}{i}"
        about = ABOUTS[method]
        if about.schedule == PASSES:
            out[key] = bon_rows(budget, n, cfg.max_new_tokens)
        else:   # its opening rows at once (n='auto': the batch that fills memory at the first decision)
            out[key] = sr_rows(budget, n0 if about.auto_n else n, cfg.max_new_tokens)
    return out


# What a decoding step reads beyond the next token's logits, named as a method asks its engine for it (one
# per-request option, ``reads=``, that every backend takes): ``"top-20"`` its 20 highest log-probabilities
# (DeepConf's token confidence), ``"hidden"`` every layer's hidden state (ST-BoN's chain feature).


def read_kwargs(reads) -> dict:
    """What ``reads`` (a tuple of read names, or a ``read_key``) asks an engine to keep: ``{"conf_topk": 20}``,
    ``{"hidden": True}``, ``{}``; a ValueError names an unknown read."""
    out: dict = {}
    for part in filter(None, reads.split("+") if isinstance(reads, str) else reads):
        if part == "hidden":
            out["hidden"] = True
        elif isinstance(part, str) and part.startswith("top-") and part[4:].isdigit() and int(part[4:]) > 0:
            out["conf_topk"] = int(part[4:])
        else:
            raise ValueError(f"unknown extra read {part!r}: 'top-<k>' or 'hidden'")
    return out


def read_options(reads) -> tuple[int, bool]:
    """``reads`` as an engine keeps them: (the k of its top-k log-probabilities, 0 for none; whether it keeps the
    hidden states)."""
    kw = read_kwargs(reads)
    return kw.get("conf_topk", 0), kw.get("hidden", False)


def read_key(reads=()) -> str:
    """The one name of ``reads`` (``Ledger.reads``, ``StepCost.reads``): ``"top-20"``, ``"hidden"``,
    ``"top-20+hidden"``, ``""`` for nothing extra (Best-of-N, Speculative Rejection); the order never matters."""
    kw = read_kwargs(reads)
    return "+".join(([f"top-{kw['conf_topk']}"] if "conf_topk" in kw else []) + (["hidden"] if kw.get("hidden") else []))


def reads_of(key: str) -> tuple[str, ...]:
    """A ``read_key`` back as the reads an engine is asked for: ``"top-20+hidden"`` -> ``("top-20", "hidden")``."""
    return tuple(filter(None, read_key(key).split("+")))


# what the rivals read each step at their defaults: DeepConf its top-k log-probabilities, ST-BoN every layer's
# hidden states (another k than the default is not measured: the page says its reads are not priced)
RIVAL_READS = (read_key((f"top-{DeepConfSettings.conf_topk}",)), read_key(("hidden",)))


def read_words(key: str) -> str:
    """A ``read_key`` in words: "the top-20 log-probabilities", "every layer's hidden states"."""
    kw = read_kwargs(key)
    words = ([f"the top-{kw['conf_topk']} log-probabilities"] if "conf_topk" in kw else []) + \
            (["every layer's hidden states"] if kw.get("hidden") else [])
    return " and ".join(words)


@dataclass(frozen=True)
class StepCost:
    """Seconds per decoding step by batch size, from steps measured at a few sizes.

    The fit never prices more rows cheaper than fewer. The measured times are first made
    non-decreasing by the **suffix minimum** (``fitted``: the time at a size is the fastest measured
    at that size or any larger one), because timing noise is one-sided: load only ever slows a step,
    so a larger batch measured faster shows that the smaller one costs at most that much (the
    ``from_passes`` and ``merged`` rule, the fastest, applied across sizes). A running maximum would
    instead keep a slowed measurement and lift every larger size to it. Between measured sizes the
    fitted points are joined linearly; below the smallest, its time (by monotonicity, a bound from
    above); beyond the largest (``extrapolates``), the last fitted segment's slope, which is never
    negative: a step's cost assumed to grow at most linearly in its rows, never measured there. One
    measured size: that time at every size. The app measures it (``specrej.backends.steptime.measure``), the
    bench from its real passes (``from_passes``). ``rows`` and ``seconds`` stay as measured.

    ``reads``: what a step that reads more than the logits costs, measured on the same machine with the plain
    step (``steptime.measure(reads=...)``: the two in turn, same model, dtype, threads and engine): for each
    ``read_key`` ("top-20", "hidden"), its step's time over the plain step's at each of ``rows`` (the median over
    pairs of steps), never below 1 (an extra read never makes a step faster: a ratio measured below 1 is noise,
    priced as 1). ``reading``
    prices a rival's step with it; Best-of-N's and Speculative Rejection's steps read nothing extra."""

    rows: tuple[int, ...]
    seconds: tuple[float, ...]
    reads: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def __post_init__(self):
        if not self.rows or len(self.rows) != len(self.seconds) or list(self.rows) != sorted(set(self.rows)):
            raise ValueError("StepCost needs distinct batch sizes, in increasing order, each with its time")
        if any(not (s > 0 and math.isfinite(s)) for s in self.seconds):
            raise ValueError("StepCost's times must be positive")
        for key, ratios in self.reads:
            read_kwargs(key)
            if len(ratios) != len(self.rows) or any(not (r >= 1 and math.isfinite(r)) for r in ratios):
                raise ValueError(f"StepCost's {key!r} read needs a ratio of at least 1 at each batch size")

    @property
    def read_keys(self) -> tuple[str, ...]:
        """The extra reads measured with this step (``reads``)."""
        return tuple(k for k, _ in self.reads)

    def reading(self, key: str) -> "StepCost | None":
        """The step of a method that reads ``key`` each step (``read_key``): the plain step's measured times
        times the measured ratio at each size, priced by the same fit. ``""``: this step. None when ``key`` was
        not measured here (an older recording, a GPU step measured plain, another k)."""
        if not key:
            return self
        ratios = dict(self.reads).get(key)
        if ratios is None:
            return None
        return StepCost(self.rows, tuple(s * r for s, r in zip(self.seconds, ratios)))

    @classmethod
    def from_passes(cls, passes: list[dict]) -> "StepCost":
        """From measured passes (``{"rows", "step_s"}`` each): the fastest at each batch size."""
        by_rows: dict[int, float] = {}
        for p in passes:
            by_rows[p["rows"]] = min(p["step_s"], by_rows.get(p["rows"], math.inf))
        return cls(tuple(sorted(by_rows)), tuple(by_rows[r] for r in sorted(by_rows)))

    @property
    def points(self) -> list[list]:
        """[[rows, seconds], ...], for a JSON record."""
        return [[r, s] for r, s in zip(self.rows, self.seconds)]

    def to_record(self) -> dict:
        """``{"rows", "seconds"}`` (and ``"reads"``: ``[[key, [ratio, ...]], ...]`` where measured), for a
        recording's meta; ``from_record`` reads it back."""
        out: dict = {"rows": list(self.rows), "seconds": list(self.seconds)}
        if self.reads:
            out["reads"] = [[k, list(r)] for k, r in self.reads]
        return out

    @classmethod
    def from_record(cls, d: dict) -> "StepCost":
        return cls(tuple(d["rows"]), tuple(d["seconds"]), tuple((k, tuple(r)) for k, r in d.get("reads") or ()))

    @functools.cached_property
    def fitted(self) -> tuple[float, ...]:
        """The measured times made non-decreasing: at each size the fastest measured there or larger."""
        out, low = [], math.inf
        for s in reversed(self.seconds):
            low = min(low, s)
            out.append(low)
        return tuple(reversed(out))

    @property
    def measured_max(self) -> int:
        """The largest batch measured: beyond it the price is extrapolated."""
        return self.rows[-1]

    def extrapolates(self, rows: int) -> bool:
        """Whether ``step(rows)`` is priced beyond the largest measured batch (the last slope extended)."""
        return rows > self.rows[-1]

    def step(self, rows: int) -> float:
        """Seconds of one decoding step at ``rows`` rows (see the class: never falls as rows rise)."""
        r, f = self.rows, self.fitted
        if len(r) == 1 or rows <= r[0]:
            return f[0]
        i = min(bisect.bisect_left(r, rows), len(r) - 1)   # the segment r[i-1]..r[i]; beyond: the last one
        return f[i - 1] + (f[i] - f[i - 1]) / (r[i] - r[i - 1]) * (rows - r[i - 1])

    def total(self, rows_per_step: Iterable[int]) -> float:
        """Seconds for these steps (rows at each)."""
        return sum(self.step(r) for r in rows_per_step)

    def scaled(self, factor: float) -> "StepCost":
        """Every step ``factor`` times slower (a busy machine: a probe's time over the quiet one's)."""
        return StepCost(self.rows, tuple(s * factor for s in self.seconds), self.reads)   # a ratio stays

    def merged(self, other: "StepCost") -> "StepCost":
        """The faster of the two at each measured batch size (the machine at its quietest); an extra read's
        ratio, the mean of the two where both measured it (each a median of paired ratios, whose noise moves it
        either way: the smaller of the two would flatter a rival)."""
        if self.rows != other.rows:
            return other
        mine, theirs = dict(self.reads), dict(other.reads)
        reads = tuple((k, tuple((a + b) / 2 for a, b in zip(mine[k], theirs[k])) if k in mine and k in theirs
                       else mine.get(k) or theirs[k]) for k in dict.fromkeys([*mine, *theirs]))
        return StepCost(self.rows, tuple(min(a, b) for a, b in zip(self.seconds, other.seconds)), reads)


def race_seconds(budget: KVBudget, cfg: RunConfig, cost: StepCost, *, sr_auto: bool,
                 methods: tuple[str, ...] = ("bon", "sr")) -> float:
    """The decoding time of a race of these arms at ``cfg``, bounded from above (``race_rows``), at ``cost``."""
    return sum(cost.total(r) for r in race_rows(budget, cfg, sr_auto=sr_auto, methods=methods).values())
