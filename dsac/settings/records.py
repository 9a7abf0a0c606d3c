"""What a file of flags is and what it may decide: a YAML or JSON mapping read with one-line
errors, and a run's own record (its ``config.json``), which is data, not the user's word
(docs/safety.md#a-run-directory-is-data). :func:`dsac.config.file_values` applies these rules
at every entry point that reads such a file."""

from __future__ import annotations

import json
import logging

from dsac.errors import DsacError
from dsac.formats.files import document_limit, read_text
from dsac.settings.registry import printable, refuse_untrusted_code

log = logging.getLogger("dsac")

# The key that marks a run's record: the config.json dsac writes into a run directory
# (:meth:`Config.record`), so it can be told from a user's own YAML/JSON file.
RECORD_MARKER = "dsac_record"
# What a run's record may not decide (docs/safety.md#a-run-directory-is-data): where the driver
# connects (address: a Ray cluster, whose replies are unpickled), where the run's config, metrics,
# videos and weights are sent (mlflow, wandb), and what it reads or writes outside its directory
# (storage_path, init_weights, output_dir, resume). Only the command line (a caller's overrides)
# sets them; code a record names is refused without consent (refuse_untrusted_code).
RECORD_EXCLUDED_KEYS = ("address", "mlflow", "wandb", "storage_path", "init_weights", "output_dir", "resume")


def is_record(values: dict) -> bool:
    """Whether a mapping read from a file is a run's record: it carries dsac's marker or — a
    ``config.json`` of dsac before the marker — ``custom_models``, which every ``config.json``
    dsac wrote has held (since before ``--config`` existed) and which no flag sets."""
    return RECORD_MARKER in values or "custom_models" in values


# Keys no file decides: builders come from the registry or module:Name; consent is given by the
# caller, never by the file; resuming is a command, not a setting.
NOT_FROM_A_FILE = (RECORD_MARKER, "custom_models", "defaulted", "trust_code", "resume")


def read_mapping(path: str, source: str) -> dict:
    """A YAML (``.yaml``/``.yml``) or JSON file holding a mapping, with one-line errors."""
    yaml_file = path.endswith((".yaml", ".yml"))
    text = read_text(path, source, document_limit(path))  # the parse's memory: a small multiple of this
    try:
        if yaml_file:
            import yaml

            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as exc:  # yaml.YAMLError / json.JSONDecodeError: say where, in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DsacError(f"{source}: not valid {'YAML' if yaml_file else 'JSON'} ({printable(first)})") from None
    if not isinstance(values, dict):
        raise DsacError(f"{source}: must hold a mapping of flag names to values")
    return values


def record_values(values: dict, overrides: dict, source: str) -> dict:
    """The values of a run's record that a run may take (docs/safety.md#a-run-directory-is-data):
    a record imports no code, connects nowhere, sends nothing anywhere and reads or writes
    nothing outside its run directory unless the caller (the command line) says the same.

    Code it names is refused (one line) unless ``overrides`` give the same value or
    ``trust_code``; :data:`RECORD_EXCLUDED_KEYS` are dropped, and one log line names those the
    record set that ``overrides`` do not."""
    if not overrides.get("trust_code"):
        refuse_untrusted_code(values, source, overrides)
    left_out = [key for key in RECORD_EXCLUDED_KEYS if values.get(key) is not None and key not in overrides]
    if left_out:
        log.warning("%s is a run's record, read as data: %s left out (a record connects nowhere and reads or writes "
                    "nothing outside its run directory: type %s to use %s)", source, ", ".join(left_out),
                    " ".join(f"--{key}" for key in left_out), "it" if len(left_out) == 1 else "them")
    return {key: value for key, value in values.items() if key not in RECORD_EXCLUDED_KEYS}
