"""The one place where names become code: algorithms by name, ``module:Name`` specs (with the
trust rules for names read from files), and the user's classes checked to be what they claim.

Nothing here imports an algorithm, Ray or TensorFlow at import time; an algorithm's package
is imported when its name is first asked for.
"""

from __future__ import annotations

import importlib

from dsac.errors import DsacError

# name -> "package:attribute" of its :class:`dsac.algorithms.Algorithm`. A third algorithm is
# a folder under dsac/algorithms/ (its settings in its config.py) and one line here.
ALGORITHMS = {
    "sac": "dsac.algorithms.sac:ALGORITHM",
    "dqn": "dsac.algorithms.dqn:ALGORITHM",
    "crossq": "dsac.algorithms.crossq:ALGORITHM",
}
ALGOS = tuple(ALGORITHMS)


def algorithm(name: str):
    """The :class:`dsac.algorithms.Algorithm` called ``name`` (one-line error otherwise)."""
    if name not in ALGORITHMS:
        raise DsacError(f"--algo must be one of {', '.join(ALGOS)}, got {name!r}")
    module_name, attribute = ALGORITHMS[name].split(":")
    return getattr(importlib.import_module(module_name), attribute)


def algorithm_settings(name: str) -> type:
    """The dataclass of the ``algorithm`` section of algorithm ``name``: ``SETTINGS`` of
    ``dsac/algorithms/<name>/config.py`` (a subclass of :class:`dsac.settings.sections.AlgorithmSettings`)."""
    if name not in ALGORITHMS:
        raise DsacError(f"--algo must be one of {', '.join(ALGOS)}, got {name!r}")
    package = ALGORITHMS[name].split(":")[0]
    return importlib.import_module(f"{package}.config").SETTINGS


def printable(text: str) -> str:
    """``text`` with every character that is not printable (a newline, a terminal's escape) as
    its escape sequence: a message that quotes a library's error, which may quote a name read
    from a file, stays one line without terminal codes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def split_spec(spec: str, kind: str) -> tuple[str, str]:
    """``(module, name)`` of ``"module:Name"``; a one-line error when it is not of that form."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or not all(part.isidentifier() for part in module_name.split(".")):
        raise DsacError(f"{kind} {spec!r} must be given as module:Name (a Python module, a colon, a name)")
    return module_name, attr


def load_object(spec, kind: str):
    """A class or function given as itself or as ``"module:Name"``."""
    if not isinstance(spec, str):
        return spec
    module_name, attr = split_spec(spec, kind)
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise DsacError(f"cannot load {kind} {spec!r}: {printable(exc)}") from None
    except Exception as exc:  # the module raised while being imported
        raise DsacError(f"cannot load {kind} {spec!r}: importing {module_name} raised "
                        f"{type(exc).__name__}: {printable(exc)}") from None


def load_subclass(spec, base: type, kind: str) -> type:
    """:func:`load_object`, refusing anything that is not a subclass of ``base``."""
    cls = load_object(spec, kind)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise DsacError(f"{kind} {spec!r} is not a dsac.{base.__name__} subclass")
    return cls


def policy_class_for(run) -> type:
    """The acting policy's class: the user's ``policy_class`` if the run section ``run``
    (:class:`dsac.settings.sections.RunSettings`) names one (a :class:`dsac.policy.Policy` subclass, which
    plays both roles), else its algorithm's acting policy."""
    if run.policy_class is not None:
        from dsac.policy import Policy

        return load_subclass(run.policy_class, Policy, "policy_class")
    return algorithm(run.algo).policy_class


def learner_class_for(run, verbose: bool = False) -> type:
    """The learner's class: the user's ``policy_class`` (built with ``build_learner=True``) if
    the run section ``run`` names one, else its algorithm's learner, whose module imports
    TensorFlow (quietly unless ``verbose``)."""
    if run.policy_class is not None:
        return policy_class_for(run)
    from dsac.runtime.tf_setup import import_tensorflow

    import_tensorflow(verbose)  # quietly, before the learner's module imports it
    return load_object(algorithm(run.algo).learner, "learner")


def callbacks_for(run):
    """An instance of the run section's ``callbacks`` (a :class:`dsac.runtime.callbacks.Callbacks`
    subclass), or None."""
    if run.callbacks is None:
        return None
    from dsac.runtime.callbacks import Callbacks

    return load_subclass(run.callbacks, Callbacks, "callbacks")()


# Keys whose string values can name code to import: module:Name.
CODE_KEYS = ("env", "policy_class", "callbacks", "custom_model")


def names_code(key: str, value) -> bool:
    """Whether ``value`` of config key ``key`` names a module to import."""
    if not isinstance(value, str):
        return False
    return key in ("policy_class", "callbacks") or ":" in value


def refuse_untrusted_code(values: dict, source: str, typed: dict | None = None) -> None:
    """Strings in a file never become code without consent (as Hugging Face's
    ``trust_remote_code``): refuse when ``values`` (read from ``source``) names a module to
    import, unless the user typed that same value (``typed``: typing it is consent)."""
    typed = typed or {}
    for key in CODE_KEYS:
        value = values.get(key)
        if names_code(key, value) and typed.get(key) != value:
            module = value.partition(":")[0] or value
            raise DsacError(
                f"{source} names code to import: {key} {value!r} (module {module!r}); nothing was imported. "
                "If you trust the file, allow it with --trust_code (trust_code=True in Python)"
            )
