"""Settings by env (``dsac/settings/presets.yaml``, rl-zoo's ``hyperparams/*.yml`` with the
record each entry was chosen from): :func:`apply_preset` fills the flags a run did not give
from its env's entry, or from the one ``--preset NAME`` names; ``--preset none`` turns it off."""

from __future__ import annotations

import functools
import logging
import os

from dsac.errors import DsacError, did_you_mean
from dsac.settings.coercion import flags_as_typed

log = logging.getLogger("dsac")

PRESETS_FILE = os.path.join(os.path.dirname(__file__), "presets.yaml")
# The sections a preset may set: an algorithm's hyperparameters, never what runs where.
PRESET_SECTIONS = ("algorithm", "model", "replay")
OFF = "none"


@functools.cache
def presets() -> dict:
    """The presets file, read once: ``{env id: {algo: entry}}``."""
    import yaml

    with open(PRESETS_FILE) as f:
        return yaml.safe_load(f) or {}


def env_name(env: str) -> str:
    """An ``--env`` as the presets name it: the id after a ``module:`` prefix."""
    return env.rsplit(":", 1)[-1] if isinstance(env, str) else ""


def preset_for(values: dict, default_env: str, default_algo: str) -> tuple[str, dict] | None:
    """``(name, entry)`` of the preset a run with flags ``values`` gets, or None."""
    chosen = values.get("preset")
    if chosen == OFF:
        return None
    algo = values.get("algo", default_algo)
    name = chosen or env_name(values.get("env", default_env))
    table = presets()
    if chosen and chosen not in table:
        raise DsacError(f"--preset {chosen}: no such preset{did_you_mean(chosen, list(table))} "
                        f"(presets: {', '.join(sorted(table))}, or none)")
    entry = (table.get(name) or {}).get(algo)
    if entry is None:
        if chosen:
            raise DsacError(f"--preset {chosen} has settings for {', '.join(sorted(table[chosen]))}, not --algo {algo}")
        return None
    if not all(values.get(flag) == value for flag, value in (entry.get("when") or {}).items()):
        if chosen:
            wanted = " ".join(f"--{flag}" if value is True else f"--{flag} {value}"
                              for flag, value in entry["when"].items())
            raise DsacError(f"--preset {chosen} is for runs with {wanted}")
        return None
    return name, entry


def record_commits(record: dict) -> list[str]:
    """The commits an entry's record names (one, or a list)."""
    return record["commit"] if isinstance(record["commit"], list) else [record["commit"]]


def apply_preset(values: dict, default_env: str, default_algo: str) -> dict:
    """``values`` with the flags its preset sets and it does not give, and ``preset`` naming
    the preset used (what a run's config.json then records); logs what it set and why."""
    found = preset_for(values, default_env, default_algo)
    if found is None:
        return values
    name, entry = found
    applied = {flag: value for flag, value in entry["set"].items() if flag not in values}
    if applied or not entry["set"]:  # an entry that sets nothing names the runs of the defaults
        record = entry["record"]
        log.info("preset %s (dsac/settings/presets.yaml): %s; chosen from %s at %s, seeds %s: %s. "
                 "A flag overrides it; --preset none turns it off", name,
                 flags_as_typed(applied) if applied else "no flag (its settings are the defaults)",
                 record["file"], ", ".join(record_commits(record)), ", ".join(map(str, record["seeds"])), entry["why"])
    return {**values, **applied, "preset": name}
