"""Masking secrets in what autotune shows or logs: passwords in URIs (user:password@, and lone
users where they may be tokens), secret-looking query keys, and secrets repeated in free text."""
from __future__ import annotations

from urllib.parse import parse_qsl, unquote, unquote_plus, urlsplit

MASK = "***"
SECRET_KEYS = ("pass", "pwd", "secret", "token", "key", "auth", "credential", "sig", "cookie", "session")
"""Query-string keys whose values are masked: any key containing one of these (case-insensitive,
after percent-decoding): password, sslpassword, passwd, token, access_token, api_key, ..."""
_DB_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mariadb", "oracle", "mssql", "cockroachdb")
"""Schemes whose lone user name (no password) is shown; elsewhere (http, ...) a lone user may be a token."""


def _is_scheme(s: str) -> bool:
    return bool(s) and s[0].isascii() and s[0].isalpha() and all(c.isascii() and (c.isalnum() or c in "+-.")
                                                                 for c in s)


def _secret_key(key: str) -> bool:
    k = unquote_plus(key).lower()
    return any(w in k for w in SECRET_KEYS)


def _mask_pairs(text: str) -> str:
    """``a=1&password=x;token=y`` -> ``a=1&password=***;token=***``; a segment without ``=``
    (which could be a bare token, or the rest of a password holding an ``&``) is masked whole."""
    def one(seg: str) -> str:
        key, eq, _ = seg.partition("=")
        if not eq:
            return MASK if seg else seg
        return f"{key}={MASK}" if _secret_key(key) else seg
    return "&".join(";".join(one(seg) for seg in part.split(";")) for part in text.split("&"))


def _mask_rest(rest: str, fragment: bool = True) -> str:
    """Host, path, query and fragment with the query's (and fragment's) secrets masked."""
    q, h = rest.find("?"), rest.find("#") if fragment else -1
    if h >= 0 and (q < 0 or h < q):          # a fragment, no query before it
        return rest[:h] + "#" + _mask_pairs(rest[h + 1:])
    if q < 0:
        return rest
    query, hsep, frag = rest[q + 1:].partition("#") if fragment else (rest[q + 1:], "", "")
    return rest[:q] + "?" + _mask_pairs(query) + (hsep + _mask_pairs(frag) if hsep else "")


def _mask_structure(uri: str) -> str:
    scheme, sep, rest = uri.partition("://")
    if not sep or not _is_scheme(scheme):
        # no ``scheme://``: a path, ``memory``, ``sqlite:relative.db``, or a malformed URL.
        # Whatever stands before an '@' may be credentials
        at = uri.rfind("@")
        return MASK + "@" + _mask_rest(uri[at + 1:], fragment=False) if at >= 0 else _mask_rest(uri, fragment=False)
    if rest.startswith("/"):                 # no authority: sqlite:////abs.db, file:///x
        return f"{scheme}://{_mask_rest(rest)}"
    at = rest.rfind("@")                     # a password may hold '@': the last one ends the user part
    if at < 0:
        netloc = rest
        for c in "/?#":
            netloc = netloc.partition(c)[0]
        host, colon, port = netloc.rpartition(":")
        if colon and not port.isdigit() and not (netloc.startswith("[") and netloc.endswith("]")) and port:
            # 'user:password' with the '@host' left out: not a port
            return f"{scheme}://{MASK}"
        return f"{scheme}://{_mask_rest(rest)}"
    userinfo, hostpart = rest[:at], rest[at + 1:]
    if "?" in userinfo or "#" in userinfo:
        # ambiguous: a password holding an unescaped ? or #, or an '@' in the query or fragment
        # (where what follows it may be the rest of a secret value): hide it all
        return f"{scheme}://{MASK}"
    if "/" in userinfo:
        # ambiguous: a password holding an unescaped /, or an '@' in the path: hide up to it
        return f"{scheme}://{MASK}@{_mask_rest(hostpart)}"
    user, colon, _ = userinfo.partition(":")
    if colon:
        shown = f"{user}:{MASK}"
    elif scheme.lower().partition("+")[0] in _DB_SCHEMES:
        shown = user
    else:
        shown = MASK
    return f"{scheme}://{shown}@{_mask_rest(hostpart)}"


def _parsed_secrets(uri: str) -> list[str]:
    """Passwords and secret query values as urllib and SQLAlchemy read the URI (each its own
    way): none of them may survive the masking."""
    found = []
    try:
        parts = urlsplit(uri)
        found += [parts.password or "", unquote(parts.password or "")]
        found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if _secret_key(k)]
        found += [v for k, v in parse_qsl(parts.fragment, keep_blank_values=True) if _secret_key(k)]
    except ValueError:
        pass
    try:
        from sqlalchemy.engine import make_url
        url = make_url(uri)
        found.append(url.password or "")
        found += [str(v) for k, v in url.query.items() if _secret_key(k)]
    except Exception:  # noqa: BLE001 - not an SQLAlchemy URL
        pass
    return [s for s in found if len(s) >= 3]


def mask_uri(uri: str | None) -> str | None:
    """A URI with its secrets masked: the password (``postgresql://user:***@host/db``), the values
    of secret-looking query keys (``?password=***``, ``token``, ``api_key``, ...) and, for other
    than database URLs, a user name standing alone (often a token: ``https://***@host``).

    Parsed by structure, not by pattern: the user part ends at the *last* '@' (a password may
    hold '@', where SQLAlchemy's parser stops at the first and shows the rest as the host). A
    URI whose '@' could belong to the path as well as to a password with an unescaped '/'
    (where urllib's parser stops early and shows the rest as the path) is hidden up to its last
    '@'; one whose '@' could belong to the query or fragment (a password with '?' or '#') is
    hidden whole, as is ``scheme://user:password`` without its host. The result is then
    checked against what urllib and SQLAlchemy parse as the password and secret values; any of
    them still visible masks the whole URI. A query value holding an unescaped '&' or ';' is
    cut there, as every parser cuts it: percent-encode such passwords."""
    if uri is None:
        return None
    uri = str(uri)
    masked = _mask_structure(uri)
    if any(secret in masked for secret in _parsed_secrets(uri)):
        scheme, sep, _ = uri.partition("://")
        return f"{scheme}://{MASK}" if sep and _is_scheme(scheme) else MASK
    return masked


_TOKEN_EDGES = "'\"()<>[]{},;"


def mask_text(text: str | None) -> str | None:
    """Free text (an error message) on one line, with every URI-like word masked (mask_uri),
    ``key=value`` words with a secret-looking key masked, and the word after ``password:``,
    ``token:`` and the like."""
    if text is None:
        return None
    out, after_key = [], False
    for word in str(text).split():
        core = word.strip(_TOKEN_EDGES + ".:")
        key, eq, _ = core.partition("=")
        if not core:
            masked = core
        elif after_key:
            masked = MASK
        elif eq and "://" not in key and "@" not in key and _secret_key(key):
            masked = f"{key}={MASK}"
        elif "://" in core:            # the URI may follow a prefix: url='postgresql://...
            j = core.find("://")
            while j > 0 and core[j - 1].isascii() and (core[j - 1].isalnum() or core[j - 1] in "+-."):
                j -= 1
            masked = (MASK if "@" in core[:j] else core[:j]) + mask_uri(core[j:])
        elif "@" in core or "?" in core:
            masked = mask_uri(core)
        elif eq:
            masked = _mask_pairs(core)
        else:
            masked = core
        after_key = word.endswith(":") and _secret_key(word.strip(_TOKEN_EDGES + ".:"))
        start = word.find(core)
        out.append(word[:start] + masked + word[start + len(core):] if core else word)
    return " ".join(out)
