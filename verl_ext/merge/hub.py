"""`--push-to-hub`: upload a finished output dir with huggingface-hub. The token comes only from `HF_TOKEN`."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import MergeError

TOKEN_ENV = "HF_TOKEN"


def require_token() -> str:
    """The Hub token from the environment; checked before merging so a long merge does not end in a failed push."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise MergeError(f"--push-to-hub needs a write token in the {TOKEN_ENV} environment variable")
    return token


def push_folder(folder: Path, repo_id: str, private: bool, commit_message: str) -> str:
    """Create `repo_id` if needed and upload `folder`; returns the commit URL. Never prints the token."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    token = require_token()
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(
            folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message
        )
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", "?")
        # The exception text is the server's message; strip the token defensively in case it is echoed.
        message = str(exc).replace(token, "***")
        raise MergeError(f"push to https://huggingface.co/{repo_id} failed (HTTP {status}): {message}") from exc
    except Exception as exc:  # network stacks differ between huggingface-hub versions (requests, httpx)
        message = str(exc).replace(token, "***")
        raise MergeError(f"push to https://huggingface.co/{repo_id} failed ({type(exc).__name__}): {message}") from exc
    return str(getattr(commit, "commit_url", commit))
