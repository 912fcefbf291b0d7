"""Every reward cache has a bound (issue 26): ``load_reward`` kept every distinct preference text a
visitor typed, forever. Three hundred distinct texts (and three hundred made-up arguments of another
kind) leave at most the bound in each cache, the most recent ones."""
from __future__ import annotations

import pytest


@pytest.fixture
def tiny_embedder(tiny_reward_dir, monkeypatch):
    """The preference reward on a tiny encoder (the test's reward model's body), caches emptied."""
    from specrej import rewards

    monkeypatch.setenv("SPECREJ_EMBEDDER", tiny_reward_dir)
    for cache in (rewards._preferences, rewards._loaded):   # forgetting is all a cache may do
        cache.clear()
    yield rewards
    for cache in (rewards._preferences, rewards._loaded):
        cache.clear()


def test_300_distinct_preference_texts_never_pass_the_bound(tiny_embedder):
    rewards = tiny_embedder
    sizes = []
    for i in range(300):
        rewards.load_reward(f"preference:concise answer number {i}")
        sizes.append(len(rewards._preferences))
    assert max(sizes) == rewards.MAX_PREFERENCE_REWARDS
    recent = rewards.load_reward("preference:concise answer number 299")
    assert recent is rewards.load_reward("preference:concise answer number 299")   # kept: the same object
    assert [k[0] for k in rewards._preferences][-1] == "concise answer number 299"
    first = "concise answer number 0"
    assert all(k[0] != first for k in rewards._preferences)   # the oldest went first
    again = rewards.load_reward(f"preference:{first}")   # and is built again when asked for
    assert again.preference == first and len(rewards._preferences) == rewards.MAX_PREFERENCE_REWARDS
    assert len(rewards._Embedder._cache) <= rewards.MAX_EMBEDDERS


def test_other_kinds_are_cached_by_their_spec_within_their_bound(tiny_embedder):
    rewards = tiny_embedder
    a = rewards.load_reward("confidence")
    assert rewards.load_reward("confidence", preference="ignored by this kind", relevance=0.1) is a
    for i in range(300):
        rewards.load_reward(f"confidence:{i}")
        assert len(rewards._loaded) <= rewards.MAX_LOADED_REWARDS
    assert len(rewards._preferences) == 0
