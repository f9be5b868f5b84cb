"""The forge lane's I/O: a REST client for GitHub and Gitea, and where its tokens come from.

Nothing here decides anything: which issue becomes which job, who is admitted
and which label a job shows are SQL's (functions/7x). These modules fetch and
write what the database asks for, with a deadline on every call and no token
in any message.
"""

from listener.forge.client import (
    Comment,
    ForgeClient,
    ForgeError,
    ForgeRepo,
    Issue,
    Listing,
    PullRequest,
    RateLimited,
)
from listener.forge.tokens import ForgeTokens, TokenSourceError, tokens_for

__all__ = [
    "Comment",
    "ForgeClient",
    "ForgeError",
    "ForgeRepo",
    "ForgeTokens",
    "Issue",
    "Listing",
    "PullRequest",
    "RateLimited",
    "TokenSourceError",
    "tokens_for",
]
