"""dsac: distributed reinforcement learning (SAC, Ape-X DQN) on Ray, TensorFlow 2 and gymnasium.

The public API, imported lazily so ``import dsac`` stays light in rollout workers::

    from dsac import Trainer, Policy, Callbacks, Config, register_custom_model
"""

__version__ = "0.1.0"

_EXPORTS = {
    "Trainer": "dsac.runtime.trainer",
    "Config": "dsac.config",
    "Policy": "dsac.policy",
    "Callbacks": "dsac.runtime.callbacks",
    "Episode": "dsac.runtime.callbacks",
    "register_custom_model": "dsac.models.catalog",
    "load_weights": "dsac.formats.files",
    "load_policy": "dsac.formats.inference",
    "run": "dsac.runtime.runner",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dsac' has no attribute {name!r}")
