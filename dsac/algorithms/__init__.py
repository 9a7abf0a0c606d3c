"""Algorithms by name. Each provides a :class:`dsac.policy.Policy` subclass."""

from __future__ import annotations

import importlib

_POLICIES = {
    "sac": "dsac.algorithms.sac.policy:SACPolicy",
    "dqn": "dsac.algorithms.dqn.policy:DQNPolicy",
}


def get_policy_class(algo: str):
    """The policy class of an algorithm, imported on first use."""
    module_name, class_name = _POLICIES[algo].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def policy_class_for(config):
    """The user's ``config.policy_class`` if set, else the algorithm's policy."""
    if config.policy_class is not None:
        from dsac.config import load_object

        return load_object(config.policy_class, "policy_class")
    return get_policy_class(config.algo)


def callbacks_for(config):
    """An instance of ``config.callbacks`` (None when unset)."""
    if config.callbacks is None:
        return None
    from dsac.config import load_object

    return load_object(config.callbacks, "callbacks")()
