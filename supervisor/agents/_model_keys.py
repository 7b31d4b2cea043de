"""The API key of an agent's model endpoint: its ``apiKeyId`` looked up in the policy's ``model_keys`` (an
environment variable's name, or a key file's path). A missing or empty key is a :class:`ModelError` naming the id and
where the key was looked for, never the key."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._chat_reply import ModelError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["resolve_api_key"]


def resolve_api_key(
    api_key_id: str | None, model_keys: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> str | None:
    """The API key for ``apiKeyId``: ``model_keys`` maps it to an environment variable name or a key file path.

    ``None`` when the agent names no ``apiKeyId`` (a local model without authentication). Raises
    :class:`ModelError` (not transient) naming the id and the source, never the key.
    """
    if not api_key_id:
        return None
    source = model_keys.get(api_key_id)
    if source is None:
        raise ModelError(
            f"no API key is configured for apiKeyId {api_key_id!r}; add it to the policy's "
            f"model_keys (an environment variable name, or a key file path)",
            transient=False,
        )
    if "/" in source:
        try:
            with open(source, encoding="utf-8") as fh:
                key = fh.read().strip()
        except OSError as exc:
            raise ModelError(
                f"cannot read the key file of apiKeyId {api_key_id!r} ({source}): {exc.strerror or exc}",
                transient=False,
            ) from exc
    else:
        key = (os.environ if environ is None else environ).get(source, "").strip()
    if not key:
        where = f"key file {source}" if "/" in source else f"environment variable {source}"
        raise ModelError(f"the API key of apiKeyId {api_key_id!r} is empty or missing ({where})", transient=False)
    return key
