"""Whether the Hugging Face Hub can be used: offline mode, whether the Hub answers (asked once,
with a short bound, at start-up), and what the local Hugging Face cache already holds. This is
where "why does it fail offline?" is answered; it knows no checkpoint registry (checkpoints).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def hub_offline() -> bool:
    """True when the Hub must not be used: offline mode (`offline_mode`), or a Hub that did not
    answer the one check this process makes (`hub_reachable`, asked first at start-up)."""
    return offline_mode() or not hub_reachable()


def offline_mode() -> bool:
    """True when the Hub is switched off (HF_HUB_OFFLINE=1 or SPECWHISPER_OFFLINE=1); then the
    Hub is never asked, not even whether it answers."""
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("SPECWHISPER_OFFLINE", ""))
    return any(f.strip().lower() in ("1", "true", "yes", "on") for f in flags)


HUB_CHECK_TIMEOUT_S = 3.0  # DNS, connect and the reply together; a Hub that answers takes < 1 s


_hub_answers: dict[str, bool] = {}  # endpoint -> did it answer; the first check's answer stays


_hub_check_lock = threading.Lock()


def hub_endpoint() -> str:
    """The Hub's address as huggingface_hub reads it: HF_ENDPOINT, else https://huggingface.co."""
    return os.environ.get("HF_ENDPOINT", "").strip().rstrip("/") or "https://huggingface.co"


def hub_reachable() -> bool:
    """Whether the Hub's endpoint answered one HTTP request within HUB_CHECK_TIMEOUT_S.

    Decided the first time it is asked (the page's choices, at start-up) and kept for the life
    of the process: without it, an unreachable Hub lists checkpoints that then fail after
    huggingface_hub's retries (about 24 s). Not asked in offline mode (`hub_offline` checks
    that first). A Hub that answers later is used after a restart.
    """
    endpoint = hub_endpoint()
    with _hub_check_lock:
        if endpoint not in _hub_answers:
            answered = _answers(endpoint, HUB_CHECK_TIMEOUT_S)
            _hub_answers[endpoint] = answered
            if not answered:
                log.warning(
                    "The Hugging Face Hub (%s) did not answer within %g s: only local folders "
                    "and Hub checkpoints already in the local cache are offered, loaded "
                    "without it.",
                    endpoint,
                    HUB_CHECK_TIMEOUT_S,
                )
        return _hub_answers[endpoint]


def forget_hub_check() -> None:
    """Ask the Hub again at the next `hub_reachable` (for tests: the app asks once)."""
    with _hub_check_lock:
        _hub_answers.clear()


def _answers(url: str, timeout_s: float) -> bool:
    """Whether an HTTP server at `url` gives any reply but a server error within `timeout_s`.
    The request runs in a daemon thread, so that a name lookup, which no socket timeout
    bounds, cannot hold start-up longer than that either."""
    answered: list[bool] = []

    def ask() -> None:
        try:
            request = urllib.request.Request(url, method="HEAD")
            urllib.request.urlopen(request, timeout=timeout_s).close()
            answered.append(True)
        except urllib.error.HTTPError as e:  # a status is an answer; a 5xx Hub cannot serve
            answered.append(e.code < 500)
        except Exception:  # refused, timed out, no route, no name: not reachable
            answered.append(False)

    thread = threading.Thread(target=ask, name="hub-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(answered and answered[0])


def hub_cache_dir() -> Path:
    """The Hugging Face Hub cache folder, read from the environment at each call (as
    huggingface_hub reads it at import): HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else
    $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    folder = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    folder = folder or os.path.join(home, "hub")
    return Path(os.path.expandvars(folder)).expanduser()


@dataclass(frozen=True)
class HubSnapshot:
    """One Hub checkpoint as the local cache holds it."""

    folder: Path  # <cache>/models--org--name/snapshots/<revision>
    revision: str  # the commit hash of that snapshot


def cached_snapshot(repo_id: str) -> HubSnapshot | None:
    """The cached snapshot of a Hub model repo that `refs/main` points at (or the only snapshot
    when no ref was recorded), if it holds a config.json and safetensors weights; else None.

    Reads the cache's folder layout (models--org--name/refs, snapshots/<hash>/...) directly,
    which is cheap enough to call whenever the page lists its choices.
    """
    if not HUB_ID_PATTERN.match(repo_id):
        return None
    repo = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    try:
        if ref.is_file():
            revision = ref.read_text().strip()
        else:
            found = [p.name for p in (repo / "snapshots").iterdir() if p.is_dir()]
            revision = found[0] if len(found) == 1 else ""
    except OSError:
        return None
    folder = repo / "snapshots" / revision
    if not COMMIT_PATTERN.match(revision) or not (folder / "config.json").is_file():
        return None
    weights = ("model.safetensors", "model.safetensors.index.json")
    if not any((folder / name).is_file() for name in weights):
        return None
    return HubSnapshot(folder, revision)


log = logging.getLogger(__name__)


HUB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


COMMIT_PATTERN = re.compile(r"^[0-9a-f]{40}$")
