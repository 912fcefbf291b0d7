"""Speculative Rejection on your own model and reward, end to end: loaded by path and as objects, raced over a
JSONL file of prompts with the command line and with ``race_many``, then the flat per-candidate table and the
provenance. docs/library.md's "Your own model and reward" is this script and its output
(tests/test_own_models.py runs it).

    python scripts/own_models.py                                   # a tiny pair it builds and saves itself
    python scripts/own_models.py --lm my-llama --reward my-rm --prompts my-prompts.jsonl

Without ``--lm``/``--reward`` it saves a 2-layer Llama (random weights, a 300-token tokenizer trained here) and a
Llama reward model of the same size to ``--work``: their answers are noise, which is beside the point here (the
plumbing is the same for a real pair; for real answers give your own folders or hub ids).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPTS = ["Give me three tips for staying healthy.", "Explain how a rainbow forms.", "Write a haiku about the sea."]
ARMS = ["bon", "sr:alpha=0.5,decision=interval,interval=8"]
SETTINGS = {"n": 8, "max_new_tokens": 24, "seed": 0}


def save_tiny_pair(work: Path) -> tuple[str, str]:
    """A tiny Llama generator and a Llama reward model (one score output) saved hub-style under ``work``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator(PROMPTS * 8, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<|im_start|>",
                                  eos_token="<|im_end|>", pad_token="<pad>")
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    config = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    out = []
    for name, cls, extra in (("lm", LlamaForCausalLM, {}), ("rm", LlamaForSequenceClassification, {"num_labels": 1})):
        torch.manual_seed(len(out))
        folder = work / name
        cls(LlamaConfig(**config, **extra)).save_pretrained(folder)
        tok.save_pretrained(folder)
        out.append(str(folder))
    return out[0], out[1]


def show(title: str, text: str = "") -> None:
    print(f"\n## {title}" + (f"\n{text}" if text else ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lm", help="your generator: a folder or hub id of a causal LM (default: a tiny one saved here)")
    p.add_argument("--reward", help="your reward model: a folder or hub id of a sequence-classification model")
    p.add_argument("--prompts", type=Path, help="a JSONL file of prompts (default: three written here)")
    p.add_argument("--work", type=Path, default=Path("own-models"), help="where the models and results go")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "auto"],
                   help="the generator's precision, the same for every path (auto picks by a timing probe, which "
                        "under load can pick differently in the CLI's process)")
    args = p.parse_args(argv)

    from specrej import Tally, load_generator, load_reward, race_arms, race_many, read_rows, RunConfig

    args.work.mkdir(parents=True, exist_ok=True)
    lm_dir, rm_dir = args.lm, args.reward
    if lm_dir is None or rm_dir is None:
        tiny_lm, tiny_rm = save_tiny_pair(args.work)
        lm_dir, rm_dir = lm_dir or tiny_lm, rm_dir or tiny_rm
    prompts = args.prompts
    if prompts is None:
        prompts = args.work / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in PROMPTS))
    show("1. Loaded by path", f"generator {lm_dir}\nreward    hf:{rm_dir}")
    lm, reward = load_generator(lm_dir, dtype=args.dtype), load_reward(f"hf:{rm_dir}")
    print(f"generator: {lm.n_params:,} parameters, {str(lm.dtype).removeprefix('torch.')}; "
          f"reward: {reward.n_params:,} parameters, named {reward.name!r}")

    show("2. Raced over the prompts with race_many")
    api_out = args.work / "api.jsonl"
    api_out.unlink(missing_ok=True)
    rows = race_many(prompts, lm, reward, SETTINGS, ARMS, out=api_out, progress=False)
    for row in rows:
        sr, bon = row["arms"]["sr"], row["arms"]["bon"]
        print(f"{row['prompt'][:40]:40}  bon #{bon['winner']} {bon['score']:+.4f} ({bon['generated_tokens']} tokens)"
              f"  sr #{sr['winner']} {sr['score']:+.4f} ({sr['generated_tokens']} tokens, "
              f"{row['comparison']['sr']['flops']['words']} FLOPs)")

    show("3. The same with the command line")
    cli_out = args.work / "cli.jsonl"
    cli_out.unlink(missing_ok=True)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in SETTINGS.items()]
    command = [sys.executable, "-m", "specrej", "--model", lm_dir, "--reward", f"hf:{rm_dir}", "--prompts",
               str(prompts), "--out", str(cli_out), "--arms", *ARMS, *flags, "--dtype", args.dtype, "--quiet"]
    print("$ python -m specrej " + " ".join(command[3:]))
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        print(done.stdout, done.stderr, sep="\n")
        return done.returncode
    print(done.stdout.rstrip())
    same = [(a["arms"][k]["winner"], a["arms"][k]["generated_tokens"]) == (b["arms"][k]["winner"],
                                                                          b["arms"][k]["generated_tokens"])
            for a, b in zip(rows, read_rows(cli_out)) for k in ("bon", "sr")]
    print(f"the command line and race_many agree on {sum(same)} of {len(same)} (prompt, arm) winners and token counts")

    show("4. Loaded as objects, with a plain function as a second reward")
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    model, tok = AutoModelForCausalLM.from_pretrained(lm_dir), AutoTokenizer.from_pretrained(lm_dir)
    own_lm = load_generator(model, tokenizer=tok)
    own_rm = load_reward(AutoModelForSequenceClassification.from_pretrained(rm_dir),
                         tokenizer=AutoTokenizer.from_pretrained(rm_dir))

    def distinct_words(prompt: str, responses: list[str]) -> list[float]:   # any function is a reward
        return [float(len(set(r.split()))) for r in responses]

    tally = Tally()
    cfg = RunConfig(prompt=PROMPTS[0], **SETTINGS)
    for event in race_arms(own_lm, own_rm, cfg, ARMS):
        tally.add(event)
    words = Tally()
    for event in race_arms(own_lm, distinct_words, cfg, ARMS):
        words.add(event)
    print(f"the objects compute in their own dtype ({str(own_lm.dtype).removeprefix('torch.')}), so where the path "
          "loaded another, their tokens differ from section 2's")
    print(f"the loaded reward model picked #{tally.finished['sr'].winner.id} (sr) and "
          f"#{tally.finished['bon'].winner.id} (bon); distinct_words picked #{words.finished['sr'].winner.id} and "
          f"#{words.finished['bon'].winner.id}")

    show("5. The flat per-candidate table (Tally.to_rows), the first prompt's race")
    table = tally.to_rows()
    print(f"{'arm':4} {'id':>3} {'status':9} {'score':>8} {'tokens':>6} {'pruned in':>9}  winner")
    for r in table:
        pruned = "" if r["round_pruned"] is None else str(r["round_pruned"])
        print(f"{r['arm']:4} {r['id']:>3} {r['status']:9} {r['score']:>+8.4f} {r['tokens']:>6} {pruned:>9}  "
              f"{'yes' if r['winner'] else ''}")

    show("6. Provenance (every results row carries it)")
    for key, value in rows[0]["provenance"].items():
        print(f"{key:13} {value if not isinstance(value, list) else ' '.join(map(str, value))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
