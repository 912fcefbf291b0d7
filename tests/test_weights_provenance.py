"""Issue 64 (2, 3): results tied to the weights that made them, and a clock that says when it was disturbed.

Every ``race_many`` row and the provenance carry content digests of the generator's and the reward's weights,
tokenizers and the generator's dtype (``specrej.fingerprint``); a resumed run refuses rows made by other weights
or another dtype; each row records the machine's load around its race, and a busy machine is named in words."""
from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch

SETTINGS = {"n": 3, "max_new_tokens": 6, "budget": 200, "seed": 1}
PROMPT = "Explain how a rainbow forms."


@pytest.fixture
def lm_copy(tiny_lm_dir, tmp_path):
    """A copy of the tiny generator's folder this test may write new weights into."""
    path = tmp_path / "lm"
    shutil.copytree(tiny_lm_dir, path)
    return path


def _resave_changed(folder) -> None:
    """Other weights saved into the same folder, as a researcher re-saving a checkpoint in place does."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)
    model.save_pretrained(folder)


def test_provenance_names_the_weights_by_content(tiny_lm_dir, tiny_reward_dir, length_reward):
    from specrej import load_generator, load_reward, provenance
    from specrej.fingerprint import folder_digest

    lm = load_generator(tiny_lm_dir, dtype="fp32")
    reward = load_reward(f"hf:{tiny_reward_dir}")
    p = provenance(dtype=lm.dtype, lm=lm, reward=reward)
    gen, rew = p["weights"]["generator"], p["weights"]["reward"]
    assert gen["sha256"] == folder_digest(tiny_lm_dir)[0] and gen["of"] == "2 files"   # weights + config.json
    assert gen["dtype"] == "float32" and len(gen["tokenizer_sha256"]) == 64
    assert rew["sha256"] == folder_digest(tiny_reward_dir)[0] and rew["sha256"] != gen["sha256"]
    # a Python reward: its code; an object: its state dict, taken again after an in-place change
    code = provenance(reward=length_reward)["weights"]["reward"]
    assert code["sha256"] is None and len(code["code_sha256"]) == 64
    from transformers import AutoModelForCausalLM, AutoTokenizer

    obj = load_generator(AutoModelForCausalLM.from_pretrained(tiny_lm_dir), tokenizer=AutoTokenizer.from_pretrained(
        tiny_lm_dir))
    before = provenance(lm=obj)["weights"]["generator"]
    assert before["of"] == "state dict" and before["tokenizer_sha256"] == gen["tokenizer_sha256"]
    with torch.no_grad():
        obj.model.lm_head.weight.add_(1e-3)
    assert provenance(lm=obj)["weights"]["generator"]["sha256"] != before["sha256"]


def test_resume_refuses_rows_made_by_other_weights_in_the_same_folder(lm_copy, length_reward, tmp_path):
    from specrej import load_generator, race_many, read_rows

    out = tmp_path / "rows.jsonl"
    rows = race_many([PROMPT], load_generator(lm_copy, dtype="fp32"), length_reward, SETTINGS, ["bon", "sr"], out=out,
                     progress=False)
    made = rows[0]["provenance"]["weights"]["generator"]["sha256"]
    assert len(made) == 64 and read_rows(out)[0]["provenance"]["weights"]["generator"]["sha256"] == made
    # the same weights again: resumed, nothing raced
    assert race_many([PROMPT], load_generator(lm_copy, dtype="fp32"), length_reward, SETTINGS, ["bon", "sr"],
                     out=out, progress=False) == read_rows(out)
    _resave_changed(lm_copy)
    with pytest.raises(ValueError, match=r"made by other weights.*the generator's weights \([0-9a-f]{12}… there"):
        race_many([PROMPT], load_generator(lm_copy, dtype="fp32"), length_reward, SETTINGS, ["bon", "sr"], out=out,
                  progress=False)


def test_resume_never_reuses_rows_of_another_dtype(lm_copy, length_reward, tmp_path):
    from specrej import load_generator, race_many

    out = tmp_path / "rows.jsonl"
    rows = race_many([PROMPT], str(lm_copy), length_reward, SETTINGS, ["bon", "sr"], out=out, progress=False,
                     dtype="bf16")
    assert rows[0]["provenance"]["dtype"] == "bfloat16"
    with pytest.raises(ValueError, match=r"the generator's dtype \('bfloat16' there, 'float32' here\)"):
        race_many([PROMPT], str(lm_copy), length_reward, SETTINGS, ["bon", "sr"], out=out, progress=False,
                  dtype="fp32")
    fresh = race_many([PROMPT], str(lm_copy), length_reward, SETTINGS, ["bon", "sr"], out=tmp_path / "fp32.jsonl",
                      progress=False, dtype="fp32")
    assert fresh[0]["provenance"]["dtype"] == "float32"
    with pytest.raises(ValueError, match=r"dtype='bf16' asks for bfloat16, but the generator given is loaded in float32"):
        race_many([PROMPT], load_generator(lm_copy, dtype="fp32"), length_reward, SETTINGS, ["bon", "sr"],
                  progress=False, dtype="bf16")


def test_rows_without_digests_are_refused_on_resume(tiny_lm, length_reward, tmp_path):
    from specrej import race_many

    out = tmp_path / "rows.jsonl"
    row = race_many([PROMPT], tiny_lm, length_reward, SETTINGS, ["bon", "sr"], out=out, progress=False)[0]
    del row["provenance"]["weights"]
    out.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="no weight digests there"):
        race_many([PROMPT], tiny_lm, length_reward, SETTINGS, ["bon", "sr"], out=out, progress=False)


def test_each_row_records_the_load_and_a_busy_machine_is_named(tiny_lm, length_reward, monkeypatch):
    import specrej.origin as origin
    from specrej import race_many
    from specrej.many import BusyMachineWarning

    monkeypatch.setattr(origin, "cores", lambda: 2)
    monkeypatch.setattr(origin, "_loadavg", lambda: [0.4, 0.5, 0.6])
    with warnings.catch_warnings():
        warnings.simplefilter("error", BusyMachineWarning)   # a quiet machine: no warning
        row = race_many([PROMPT], tiny_lm, length_reward, SETTINGS, ["bon", "sr"], progress=False)[0]
    load = row["provenance"]["load"]
    assert load["load_start"] == [0.4, 0.5, 0.6] and load["cores"] == 2 and load["busy"] is False
    assert load["wall_s"] > 0 and load["process_cpu_s"] >= 0
    monkeypatch.setattr(origin, "_loadavg", lambda: [3.9, 3.0, 2.0])
    with pytest.warns(BusyMachineWarning, match=r"busy during this prompt \(load up to 3.9 on 2 cores\).*not "
                                                r"reliable.*quiet machine, after warm_up.*median"):
        row = race_many(["Write a haiku about the sea."], tiny_lm, length_reward, SETTINGS, ["bon", "sr"],
                        progress=False)[0]
    assert row["provenance"]["load"]["busy"] is True
