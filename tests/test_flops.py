"""FLOPs as the field counts them (issue 63, 5; ``core.cost.FlopModel``): 2 x non-embedding parameters x tokens
plus attention's 2 x layers x context x d_model per token, for generators and reward models alike, read off the
model and overridable per model. A BERT-like reward whose vocabulary is most of its parameters, counted by hand;
the ledger of a real tiny race against the same hand count; a caller's own count for the generator."""
from __future__ import annotations

import pytest

from specrej.core.cost import FlopModel, flop_model_of, flops


def _bert():
    """A tiny BERT with a large embedding table: 30,000 words x 32 wide, 2 layers, 4 heads, FFN 64, 128 positions."""
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=30000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=128, type_vocab_size=2)).eval()


# By hand, a layer: Q, K, V 3 x (32 x 32 + 32) = 3,168; attention out 32 x 32 + 32 = 1,056; its LayerNorm 64;
# FFN in 32 x 64 + 64 = 2,112, out 64 x 32 + 32 = 2,080; LayerNorm 64: 8,544; two layers 17,088. Outside the
# layers: the embeddings' LayerNorm 64 and the pooler 32 x 32 + 32 = 1,056. Non-embedding: 18,208. The tables:
# words 30,000 x 32 = 960,000, positions 128 x 32 = 4,096, token types 2 x 32 = 64.
BERT_MATMUL = 17_088 + 64 + 1_056
BERT_TABLES = 960_000 + 4_096 + 64


def hand(params: int, layers: int, d_model: int, lengths) -> float:
    """Reading sequences of these lengths: 2 x params per token, and per token 2 x layers x T x d_model."""
    return sum(2 * params * t + 2 * layers * t * d_model * t for t in lengths)


def test_a_bert_like_reward_is_counted_by_its_matmuls_and_attention_not_its_vocabulary():
    bert = _bert()
    assert sum(p.numel() for p in bert.parameters()) == BERT_MATMUL + BERT_TABLES
    fm = FlopModel.of_module(bert)
    assert fm == FlopModel(BERT_MATMUL, 2, 32)
    lengths = [20, 35, 7]
    by_hand = hand(BERT_MATMUL, 2, 32, lengths)
    assert fm.read(lengths) == pytest.approx(by_hand, rel=0.05)
    assert fm.read(lengths) == pytest.approx(by_hand, rel=1e-12)   # within 5% asked; exact here
    # the old rule, 2 x every parameter x tokens, made it 50x its matmuls
    assert flops(BERT_MATMUL + BERT_TABLES, sum(lengths)) / by_hand > 40


class _BertReward:
    """A reward running the tiny BERT: every answer read as 20 tokens (so the ledger's per-call mean is exact)."""

    name, uses_token_stats = "bert-like", False

    def __init__(self):
        self.model = _bert()
        self.n_params = sum(p.numel() for p in self.model.parameters())

    def score(self, prompt, responses, stats=None):
        from specrej import Scored

        return Scored([float(len(set(r))) for r in responses], 20 * len(responses))


def test_the_ledger_counts_generator_and_reward_as_the_hand_count(tiny_lm):
    from specrej import RunConfig, best_of_n, run_to_completion

    reward = _BertReward()
    cfg = RunConfig(prompt="Tell me about the sea.", n=4, max_new_tokens=12, seed=0, budget=4096)
    fin = run_to_completion(best_of_n(tiny_lm, reward, cfg))
    led = fin.ledger
    # the reward: each of the 4 answers read once, 20 tokens: 4 x the hand count of one 20-token read
    assert led.scored == 4 and led.reward_tokens == 80
    assert led.reward_flops == pytest.approx(4 * hand(BERT_MATMUL, 2, 32, [20]), rel=0.05)
    # the generator (a tiny Llama: 2 layers of q 32 x 32, k and v 32 x 16, o 32 x 32, gate, up and down 32 x 64,
    # two RMSNorms of 32: 9,280 each; the final norm 32: 18,592, its embedding and untied head left out): the
    # prompt's P tokens at positions 1..P once, then each answer's g tokens at positions P+1..P+g
    m = tiny_lm.model.config
    assert (m.num_hidden_layers, m.hidden_size, m.tie_word_embeddings) == (2, 32, False)
    gen = FlopModel(18_592, 2, 32)
    assert flop_model_of(tiny_lm) == gen
    P = led.prompt_tokens
    by_hand = gen.sequence(0, P) + sum(gen.sequence(P, c.tokens) for c in fin.candidates)
    assert led.generated_tokens == sum(c.tokens for c in fin.candidates)
    assert led.generator_flops == pytest.approx(by_hand, rel=0.05)
    assert led.generator_flops == pytest.approx(by_hand, rel=1e-9)


def test_a_callers_own_count_overrides_the_generators_and_the_rewards(tiny_lm):
    from specrej import CallableReward, RunConfig, best_of_n, run_to_completion

    mine = FlopModel(1_000, 0, 0)   # e.g. a model whose weights are not a torch module here
    was = getattr(tiny_lm, "flop_model", None)
    tiny_lm.flop_model = mine
    try:
        reward = CallableReward(lambda p, rs: [float(len(r)) for r in rs], name="length")
        reward.flop_model = FlopModel(10, 0, 0)
        fin = run_to_completion(best_of_n(tiny_lm, reward, RunConfig(prompt="Hi.", n=2, max_new_tokens=6, seed=1,
                                                                      budget=4096)))
    finally:
        if was is None:
            del tiny_lm.flop_model
        else:
            tiny_lm.flop_model = was
    led = fin.ledger
    assert led.generator_flops == pytest.approx(2 * 1_000 * (led.prompt_tokens + led.generated_tokens))
    assert led.reward_flops == pytest.approx(2 * 10 * led.reward_tokens)
    assert flop_model_of(reward) == FlopModel(10)
    # a reward with no model and no count of its own: 0 FLOPs; with only n_params: the old rule, no attention
    assert flop_model_of(object()) == FlopModel(0)

    class Counted:
        n_params = 500
    assert flop_model_of(Counted()) == FlopModel(500)
    with pytest.raises(ValueError):
        FlopModel(-1)


def test_the_bench_recounts_a_record_exactly_from_its_rows_or_bounds_it_from_best_of_ns_answers():
    from specrej.bench.protocol import recount_flops

    fm = FlopModel(100, 2, 4)
    # Speculative Rejection on a prompt of 10: 2 rows for 3 steps, then 1 row for 2: 8 tokens at positions
    # 1, 1, 2, 2, 3, 3, 4, 5 (21), each attending to 10 + its position; recorded by the old rule (2 x 500 x 18)
    rec = {"prompt_tokens": 10, "bon": {"tokens": [5, 3, 2]}}
    sr = {"method": "sr", "generated_tokens": 8, "flops": flops(500, 18), "profile": [[2, 3], [1, 2]]}
    count, exact = recount_flops(sr, rec, 500, fm)
    assert exact and count == pytest.approx(fm.sequence(0, 10) + fm.tokens(8, 8 * 10 + 21))
    # no profile: bounded by Best-of-N's 8 highest positions (5, 4, 3, 3, 2, 2, 2, 1 of answers of 5, 3, 2: 22)
    count, exact = recount_flops({**sr, "profile": None}, rec, 500, fm)
    assert not exact and count == pytest.approx(fm.sequence(0, 10) + fm.tokens(8, 8 * 10 + 22))
    # a reward's FLOPs stay as recorded (the record's less its generator's by the old rule)
    count, _ = recount_flops({**sr, "flops": flops(500, 18) + 7.0}, rec, 500, fm)
    assert count == pytest.approx(fm.sequence(0, 10) + fm.tokens(8, 8 * 10 + 21) + 7.0)
    # a record made since keeps its reward's FLOPs apart (its ``flops`` may be a live ledger's, counted otherwise)
    count, _ = recount_flops({**sr, "flops": 1e9, "reward_flops": 5.0}, rec, 500, fm)
    assert count == pytest.approx(fm.sequence(0, 10) + fm.tokens(8, 8 * 10 + 21) + 5.0)


@pytest.mark.slow
def test_the_embedded_generators_count_is_the_one_the_bench_recounts_older_files_with():
    from specrej import load_generator
    from specrej.bench.run import EMBEDDED_FLOPS, generator_flop_model

    try:
        lm = load_generator("embedded", dtype="fp32")
    except Exception as e:   # no embedded wheel here
        pytest.skip(f"the embedded generator is not installed ({e})")
    assert lm.n_params == 134_515_008 and flop_model_of(lm) == EMBEDDED_FLOPS
    assert generator_flop_model({"model": "embedded", "generator_params": 134_515_008}) == EMBEDDED_FLOPS


def test_best_of_ks_flops_on_the_curve_are_the_prompt_once_and_k_mean_answers():
    from specrej.analysis.curve import bon_point
    from specrej.bench.protocol import prompt_run

    fm = FlopModel(100, 2, 4)
    rec = {"prompt_tokens": 10, "bon": {"scores": [0.1, 0.5, 0.9], "tokens": [5, 3, 2],
                                        "ledger": {"reward_flops": 30.0}}}
    run = prompt_run(rec, flops(500, 1), fm)
    mean = (fm.sequence(10, 5) + fm.sequence(10, 3) + fm.sequence(10, 2)) / 3
    for k in (1, 2, 3):   # the reward's 30 FLOPs: k/3 of them
        assert bon_point(run, k, rows_per_pass=1).flops == pytest.approx(fm.sequence(0, 10) + k * mean + 10 * k)
    # without a FlopModel: the older rule, 2 x 500 x (prompt + k x the mean length)
    old = prompt_run(rec, flops(500, 1))
    assert bon_point(old, 3, rows_per_pass=1).flops == pytest.approx(flops(500, 10 + 10) + 30)
