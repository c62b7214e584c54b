"""Reaching the Hugging Face hub: fail fast when it is unreachable.

Offline, ``huggingface_hub`` retries every request with back-off for about a minute before
it gives up. :func:`hub_access` probes the hub once (a TCP connection, a few seconds at
most) and, when it is unreachable, switches the library to offline mode for the block, so
weights already in the local cache still load and anything else fails at once.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

PROBE_TIMEOUT = 3.0
"""Seconds to wait for the hub's TCP handshake."""


def hub_reachable(timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether the hub endpoint accepts a TCP connection (``False`` in offline mode)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


@contextmanager
def hub_access() -> Iterator[bool]:
    """Within the block, use only the local cache when the hub is unreachable.

    Yields:
        Whether the hub is reachable.
    """
    from huggingface_hub import constants

    online = hub_reachable()
    previous = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = previous or not online
    try:
        yield online
    finally:
        constants.HF_HUB_OFFLINE = previous


def offline_hint(online: bool) -> str:
    """What to tell a user whose download failed."""
    if online:
        return "Pass --weights FILE with a local checkpoint (safetensors preferred)."
    from huggingface_hub import constants

    return (
        f"The hub ({constants.ENDPOINT}) is unreachable and the weights are not in the local "
        "cache. Pass --weights FILE with a local checkpoint (safetensors preferred)."
    )
