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
