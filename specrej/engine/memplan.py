"""The captured step's memory, planned from the race's admission: plain arithmetic over numbers (no torch).

What one pass of one arm holds on the device while its rows decode (a race holds every arm's at once, since the
arms take turns step by step and each keeps its buffers until its pass ends)::

    own keys, values   L x [2, rows bucket, kv heads, T, head dim]  bucket x T x slot bytes   (one block a layer)
    logits             [rows bucket, vocab] fp32                    the next step's input
    ids, lp, sc, out   [rows bucket] and [rows bucket, 3]           a few bytes a row
    a step's pool      the temporaries one captured step allocates: the head's output, the sampling's sort of
                       the logits, one layer's attention scores and MLP (a graph keeps its pool while it lives)

The rows are padded to a capture size (``capture_sizes``: 1, 2, ..., 8, then eight sizes an octave, as vLLM's
capture sizes grow coarser with the batch), so padding costs at most 1/8 of the rows. ``plan`` answers one
question, what buffers a pass lays out: ``(free bytes, model shape, rows, tokens, admitted slots, arms holding
buffers at once, capture sizes) -> Plan(rows bucket, positions T, bytes)``. ``arm_budget`` is its inverse for the
admission: the KV slots each of a race's arms may be granted so that all of them, padded, fit with their logits
and pools. ``relayout_peak``: the most a relayout holds (it frees the old graphs first and moves one layer at a
time, so never the old buffers and the new at once).
"""
from __future__ import annotations

from dataclasses import dataclass

AUTO_MAX_ROWS = 4096   # as ``core.budget.AUTO_MAX_ROWS``: n='auto' never opens with more rows
RACE_ARMS = 2          # a GPU's default budget is one arm's share of a race of this many arms (Best-of-N, SR)
HEADROOM = 0.9         # of the free memory a plan may fill (fragmentation, cuBLAS workspaces, the CUDA context)
KV_SHARE = 0.8         # of what is left after every arm's logits and pool: the rows' keys and values (the rest:
                       # the reward model's activations, prefill)
SORT_BYTES = 28        # bytes per logit the sampling's temporaries take with a full sort (top_k = 0): values,
                       # int64 ids, probabilities, their cumulative sums, a mask
TOPK_BYTES = 4         # ... with top_k: a copy of the logits at most
HEAD_BYTES = 6         # per logit: the head's output in the model's dtype (bf16) and its fp32 copy


def capture_sizes(limit: int = AUTO_MAX_ROWS, per_octave: int = 8) -> tuple[int, ...]:
    """Row counts a step is captured for: every count up to ``per_octave``, then ``per_octave`` evenly spaced
    sizes in each octave ([8, 16]: 9..16; [16, 32]: 18, 20, ..., 32; [1024, 2048]: 1152, 1280, ..., 2048), up to
    the first size >= ``limit``. Padding ``n`` rows to the next size adds less than 1/``per_octave`` of ``n``."""
    sizes = list(range(1, per_octave + 1))
    while sizes[-1] < limit:
        lo = 1 << (sizes[-1].bit_length() - 1)   # the octave [lo, 2 lo] the last size opens
        step = max(1, lo // per_octave)
        sizes.append(sizes[-1] + step)
    return tuple(sizes)


CAPTURE_SIZES = capture_sizes()


def bucket_for(n: int, sizes: tuple[int, ...] = CAPTURE_SIZES, minimum: int = 1) -> int:
    """The capture size ``n`` rows run as: the smallest of ``sizes`` >= max(n, minimum); past the largest, the next
    multiple of the largest step."""
    n = max(int(n), int(minimum), 1)
    for s in sizes:
        if s >= n:
            return s
    step = sizes[-1] - sizes[-2] if len(sizes) > 1 else 1
    return -(-n // step) * step


def padding_waste(n: int, sizes: tuple[int, ...] = CAPTURE_SIZES, minimum: int = 1) -> float:
    """The share of a step's rows that are padding at ``n`` live rows: (bucket - n) / bucket."""
    b = bucket_for(n, sizes, minimum)
    return (b - n) / b


def padding_factor(sizes: tuple[int, ...] = CAPTURE_SIZES, up_to: int = AUTO_MAX_ROWS, minimum: int = 1) -> float:
    """The most a bucket holds per live row, over 1..``up_to`` rows: max(bucket / n) (1.125 for eight an octave)."""
    worst, prev = 1.0, 0
    for s in sizes:   # within (prev, s] the worst n is prev + 1
        n = prev + 1
        if n > up_to:
            break
        worst = max(worst, bucket_for(n, sizes, minimum) / n)
        prev = s
    return worst


@dataclass(frozen=True, kw_only=True)
class Shape:
    """What the plan reads of a model: its cache's shape and the widths a step's temporaries take."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    vocab: int
    heads: int
    hidden: int
    intermediate: int

    @property
    def slot_bytes(self) -> int:
        """One token of one row in the cache: keys and values, every layer (``LM.kv_bytes_per_slot``)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @classmethod
    def of(cls, config, dtype_bytes: int) -> "Shape":
        """From a transformers config (Llama-family names; a family without a separate MLP width, 4 x hidden)."""
        heads, hidden = config.num_attention_heads, config.hidden_size
        return cls(layers=config.num_hidden_layers, kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                   head_dim=getattr(config, "head_dim", None) or hidden // heads, dtype_bytes=int(dtype_bytes),
                   vocab=config.vocab_size, heads=heads, hidden=hidden,
                   intermediate=getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None)
                   or 4 * hidden)


LLAMA3_8B = Shape(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2, vocab=128256, heads=32, hidden=4096,
                  intermediate=14336)


def fixed_bytes(shape: Shape, rows: int) -> int:
    """The pass's buffers besides the keys and values: logits (fp32), ids, two fp64 sums, the [rows, 3] copy."""
    return rows * (4 * shape.vocab + 8 + 16 + 24)


def step_bytes(shape: Shape, rows: int, positions: int, prefix: int = 0, full_sort: bool = True) -> int:
    """The temporaries one step allocates at ``rows`` rows (a captured graph's pool): the largest of the head's
    output with the sampling, and one layer's attention scores (fp32, three alive: scores, softmax, a cast) and MLP."""
    V = shape.vocab
    head = rows * V * (HEAD_BYTES + (SORT_BYTES if full_sort else TOPK_BYTES))
    scores = rows * shape.heads * (prefix + positions + 1) * 4 * 3
    layer = scores + rows * (3 * shape.intermediate + 4 * shape.hidden
                             + (shape.heads + 2 * shape.kv_heads) * shape.head_dim) * shape.dtype_bytes
    return max(head, layer)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A pass's buffers: ``rows`` (the capture size its rows pad to) x ``positions`` own positions, and their bytes
    (``kv_bytes`` the keys and values, ``other_bytes`` the logits, sums and one step's pool). ``fits``: within the
    memory it was planned in (``why`` says otherwise)."""

    rows: int
    positions: int
    kv_bytes: int
    fixed_bytes: int   # logits, ids, sums
    pool_bytes: int    # one step's temporaries (a captured graph's pool)
    free: int | None
    why: str | None = None

    @property
    def other_bytes(self) -> int:
        return self.fixed_bytes + self.pool_bytes

    @property
    def bytes(self) -> int:
        return self.kv_bytes + self.other_bytes

    @property
    def fits(self) -> bool:
        return self.why is None


def plan(free: int | None, shape: Shape, rows: int, tokens: int, *, budget: int | None = None, arms: int = 1,
         sizes: tuple[int, ...] = CAPTURE_SIZES, minimum: int = 1, prefix: int = 0, full_sort: bool = True,
         headroom: float = HEADROOM) -> Plan:
    """The buffers for ``rows`` live rows that write up to ``tokens`` positions each.

    ``budget``: the rows' own KV slots the run was admitted (``KVBudget.total`` less the shared prompt): the
    positions are what it grants the live rows, ``budget // rows``, plus one (a pass's last token is never fed back,
    but the step writes its key anyway), at most ``tokens``; None: ``tokens``. ``free``: the device memory the
    pass may take now (None: a CPU, nothing checked); ``arms``: passes that lay out buffers from that same ``free``
    (each gets an equal share). Where the share holds fewer positions than granted, the plan holds what fits,
    and ``why`` says so when not even one position fits."""
    b = bucket_for(rows, sizes, minimum)
    want = int(tokens) if budget is None else max(1, min(int(tokens), int(budget) // max(int(rows), 1) + 1))
    slot = shape.slot_bytes
    fixed, pool = fixed_bytes(shape, b), step_bytes(shape, b, want, prefix, full_sort)
    other = fixed + pool
    if free is None:
        return Plan(rows=b, positions=want, kv_bytes=b * want * slot, fixed_bytes=fixed, pool_bytes=pool, free=None)
    share = int(free * headroom) // max(int(arms), 1)
    T = min(want, max(0, share - other) // (b * slot))
    why = None if T >= 1 else (f"{b} rows' logits and step ({other / 2**30:.2f} GiB) and one position of keys and "
                               f"values ({b * slot / 2**30:.2f} GiB) exceed the {share / 2**30:.2f} GiB free for them")
    return Plan(rows=b, positions=max(T, 0), kv_bytes=b * max(T, 0) * slot, fixed_bytes=fixed, pool_bytes=pool,
                free=int(free), why=why)


def arm_budget(free: int, shape: Shape, *, arms: int = RACE_ARMS, max_rows: int = AUTO_MAX_ROWS,
               positions: int = 256, prefix: int = 0, full_sort: bool = True, sizes: tuple[int, ...] = CAPTURE_SIZES,
               kv_share: float = KV_SHARE, headroom: float = HEADROOM) -> int:
    """The KV slots each of ``arms`` arms may be admitted on a device with ``free`` bytes, so that every arm's
    buffers at once fit: each arm's logits and pool at up to ``max_rows`` rows set aside, ``kv_share`` of the rest
    split between the arms, each share divided by the worst padding (``padding_factor``)."""
    overhead = arms * (fixed_bytes(shape, max_rows) + step_bytes(shape, max_rows, positions, prefix, full_sort))
    kv = (int(free * headroom) - overhead) * kv_share
    return max(0, int(kv / arms / (padding_factor(sizes, max_rows) * shape.slot_bytes)))


def relayout_peak(old: Plan, new: Plan, layers: int) -> int:
    """The most a relayout holds (``captured.Graphed._relayout``): the old graphs and their pool freed first, then
    layer by layer a new block made, the live rows copied in and the old block freed; so at worst the larger
    buffers whole and one layer of the other, both passes' logits and sums, and no pool (the new graphs are
    captured after): never the old keys and values and the new at once."""
    L = max(int(layers), 1)
    kv = max(old.kv_bytes + new.kv_bytes // L, new.kv_bytes + old.kv_bytes // L)
    return kv + old.fixed_bytes + new.fixed_bytes
