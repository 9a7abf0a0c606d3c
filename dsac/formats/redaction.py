"""What of a URI the user gives may leave the process: :func:`redact_uri`, the one place dsac
hides credentials, used for every URI-like value (``--mlflow``, ``--wandb``, ``--address``,
``--storage_path``, a Tune trial's flags) wherever it is shown or written — ``config.json``,
the log, a tracker's params and config, error messages, ``repr(Config)``, ``best_config.yaml``,
``dsac-submit``'s printed command.

Hidden, with or without a ``scheme://``: the password of a userinfo (``user:***@host``; a lone
user, often a token, as ``***@host``), and the values of credential-like names (token,
session, password, key, secret, auth, signature, ...) in the query (``?token=``), in path
parameters (``;token=``) and in the fragment (``#access_token=``). Nothing here imports more
than the standard library.
"""

from __future__ import annotations

import re
import urllib.parse

# Names whose values are credentials: ?token=, ;session=, #access_token=, an api_key, a signature.
SECRET_NAME = re.compile(r"token|passw|pwd|secret|key|auth|credential|signature|session|cookie|jwt|bearer"
                         r"|^sig$|^sid$|^code$", re.IGNORECASE)
# A name=value of path parameters (``;name=value``, up to the next ``;`` or ``/``), and of a
# query or a fragment (``&`` or ``;`` between them).
_PATH_PARAMETER = re.compile(r"(;)([^=;/]*)=([^;/]*)")
_PARAMETER = re.compile(r"(^|[&;])([^=&;]*)=([^&;]*)")
# What a path starts with (a relative or absolute file name): no userinfo to look for.
_PATH_STARTS = ("/", ".", "~")


class Parts:
    """A URI split for redaction: ``head`` (``scheme://`` or ''), ``userinfo`` (None when there
    is none), ``rest`` (host, path, query and fragment), and ``loose``: the userinfo is what
    stands before the last ``@`` because a raw ``/``, ``?`` or ``#`` in it ends the authority
    early (a password that is not percent-encoded, or an ``@`` further on: hidden either way)."""

    def __init__(self, uri: str):
        scheme, sep, after = uri.partition("://")
        if not sep:
            scheme, after = "", uri
        self.head = f"{scheme}://" if sep else ""
        self.userinfo, self.rest, self.loose = None, after, False
        if (not sep and uri.startswith(_PATH_STARTS)) or (sep and after.startswith("/")):
            return  # a path, or an empty authority (sqlite:///home/a@b/mlflow.db): its "@" is a path's
        end = min((i for i in (after.find(c) for c in "/?#") if i >= 0), default=len(after))
        userinfo, at, host = after[:end].rpartition("@")
        if at:
            self.userinfo, self.rest = userinfo, host + after[end:]
        elif "@" in after:
            self.userinfo, _, self.rest = after.rpartition("@")
            self.loose = True

    def credentials(self) -> tuple[str | None, str | None]:
        """(user, password) of the userinfo, percent-decoded; None for those not given."""
        if self.userinfo is None:
            return None, None
        user, colon, password = self.userinfo.partition(":")
        return urllib.parse.unquote(user), urllib.parse.unquote(password) if colon else None

    def bare(self) -> str:
        """The URI without its userinfo."""
        return self.head + self.rest


def _secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(urllib.parse.unquote_plus(name)))


def _sections(rest: str) -> tuple[str, str | None, str | None]:
    """(host and path, query, fragment) of what follows a URI's userinfo; None for those absent."""
    before, hash_, fragment = rest.partition("#")
    path, question, query = before.partition("?")
    return path, query if question else None, fragment if hash_ else None


def _each_parameter(rest: str):
    """Every ``(match, pattern)`` of a name=value in ``rest``'s path, query and fragment."""
    path, query, fragment = _sections(rest)
    yield from ((m, _PATH_PARAMETER) for m in _PATH_PARAMETER.finditer(path))
    for part in (query, fragment):
        if part is not None:
            yield from ((m, _PARAMETER) for m in _PARAMETER.finditer(part))


def _hide_parameters(rest: str) -> str:
    def hide(pattern, text):
        return pattern.sub(lambda m: f"{m[1]}{m[2]}=***" if m[3] and _secret_name(m[2]) else m[0], text)

    path, query, fragment = _sections(rest)
    return (hide(_PATH_PARAMETER, path) + ("" if query is None else "?" + hide(_PARAMETER, query))
            + ("" if fragment is None else "#" + hide(_PARAMETER, fragment)))


def redact_uri(uri):
    """``uri`` as it may leave the process: its userinfo's password (a lone user: the user) and
    the values of its credential-like parameters as ``***``. Anything not a string (None) is
    returned as it is."""
    if not isinstance(uri, str):
        return uri
    parts = Parts(uri)
    if parts.userinfo is None:
        return parts.head + _hide_parameters(parts.rest)
    user, colon, _ = parts.userinfo.partition(":")
    return f"{parts.head}{user + ':***' if colon else '***'}@{_hide_parameters(parts.rest)}"


def redact_value(value):
    """``value`` with :func:`redact_uri` applied to every string in it (lists and dicts walked):
    a config's values or a trial's flags as they may be shown or written."""
    if isinstance(value, str):
        return redact_uri(value)
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_value(item) for item in value)
    return value


def secrets_of(uri) -> set[str]:
    """The secrets :func:`redact_uri` hides in ``uri``, as they stand in it."""
    if not isinstance(uri, str):
        return set()
    parts = Parts(uri)
    found = set()
    if parts.userinfo is not None:
        user, colon, password = parts.userinfo.partition(":")
        found.add(password if colon else user)
    found.update(m[3] for m, _ in _each_parameter(parts.rest) if m[3] and _secret_name(m[2]))
    return {secret for secret in found if secret}


def redact_text(text: str, uri) -> str:
    """``text`` (an error's message) with the secrets of ``uri`` in it as ``***``, raw or
    percent-decoded: a library's message may quote the URI it was given."""
    for secret in sorted(secrets_of(uri), key=len, reverse=True):
        for form in {secret, urllib.parse.unquote(secret), urllib.parse.quote(secret, safe="")}:
            text = text.replace(form, "***")
    return text
