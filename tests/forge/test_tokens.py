"""Forge tokens from the forge_token_source setting: environment names or a secrets file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from listener.forge.tokens import ForgeTokens, TokenSourceError, tokens_for

# The setting's shipped value (db/0019_tracked_repo.sql), file added per test.
SOURCE: dict[str, Any] = {
    "env": {"github": "CEASELESS_GITHUB_TOKEN", "gitea": "CEASELESS_GITEA_TOKEN"},
    "label_env": {"github": "CEASELESS_GITHUB_LABEL_TOKEN", "gitea": "CEASELESS_GITEA_LABEL_TOKEN"},
    "file": None,
}
GITHUB = "https://api.github.com"
GITEA = "https://gitea.example.com/api/v1"


def secrets(tmp_path: Path, document: Any, mode: int = 0o600) -> str:
    path = tmp_path / "forge-secrets.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    os.chmod(path, mode)
    return str(path)


def test_tokens_come_from_the_environment_variables_the_setting_names() -> None:
    environ = {
        "CEASELESS_GITHUB_TOKEN": "gh-runner\n",
        "CEASELESS_GITHUB_LABEL_TOKEN": "gh-labels",
        "CEASELESS_GITEA_TOKEN": "gt-runner",
    }

    github = tokens_for(SOURCE, "github", GITHUB, environ=environ)
    gitea = tokens_for(SOURCE, "gitea", GITEA, environ=environ)

    assert github == ForgeTokens(runner="gh-runner", labels="gh-labels")
    # No label token for Gitea: None, never the runner's token.
    assert gitea == ForgeTokens(runner="gt-runner", labels=None)


def test_a_renamed_variable_is_read_by_its_new_name() -> None:
    source = {"env": {"github": "MY_BOT_TOKEN"}, "label_env": {"github": "MY_LABEL_TOKEN"}}
    environ = {"MY_BOT_TOKEN": "a", "MY_LABEL_TOKEN": "b", "CEASELESS_GITHUB_TOKEN": "ignored"}

    assert tokens_for(source, "github", GITHUB, environ=environ) == ForgeTokens("a", "b")


def test_a_missing_token_is_none() -> None:
    assert tokens_for(SOURCE, "github", GITHUB, environ={}) == ForgeTokens(None, None)
    assert tokens_for({}, "gitea", GITEA, environ={"CEASELESS_GITEA_TOKEN": "x"}) == ForgeTokens(
        None, None
    )
    blank = {"CEASELESS_GITHUB_TOKEN": "  ", "CEASELESS_GITHUB_LABEL_TOKEN": ""}
    assert tokens_for(SOURCE, "github", GITHUB, environ=blank) == ForgeTokens(None, None)


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEASELESS_GITHUB_TOKEN", "from-env")
    monkeypatch.delenv("CEASELESS_GITHUB_LABEL_TOKEN", raising=False)

    assert tokens_for(SOURCE, "github", GITHUB) == ForgeTokens("from-env", None)


def test_a_secrets_file_entry_for_the_api_url_beats_the_forge_entry_and_the_environment(
    tmp_path: Path,
) -> None:
    path = secrets(
        tmp_path,
        {
            "github": {"token": "gh-runner", "label_token": "gh-labels"},
            "gitea": {"token": "any-gitea"},
            GITEA: {"token": "this-gitea", "label_token": "this-gitea-labels"},
        },
    )
    source = SOURCE | {"file": path}
    environ = {"CEASELESS_GITHUB_TOKEN": "env-runner", "CEASELESS_GITEA_LABEL_TOKEN": "env-l"}

    assert tokens_for(source, "github", GITHUB, environ=environ) == ForgeTokens(
        "gh-runner", "gh-labels"
    )
    assert tokens_for(source, "gitea", GITEA + "/", environ=environ) == ForgeTokens(
        "this-gitea", "this-gitea-labels"
    )
    other = "https://git.other.example/api/v1"
    # The forge entry, then the environment for what the file does not hold.
    assert tokens_for(source, "gitea", other, environ=environ) == ForgeTokens("any-gitea", "env-l")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_secrets_file_open_to_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = secrets(tmp_path, {"github": {"token": "gh-secret"}}, mode)

    with pytest.raises(TokenSourceError) as refused:
        tokens_for(SOURCE | {"file": path}, "github", GITHUB, environ={})

    message = str(refused.value)
    assert path in message
    assert f"mode {mode:04o}" in message
    assert f"chmod 600 {path}" in message
    assert "gh-secret" not in message


def test_a_missing_or_broken_secrets_file_is_a_clear_error_without_its_contents(
    tmp_path: Path,
) -> None:
    absent = str(tmp_path / "absent.json")
    with pytest.raises(TokenSourceError, match=r"absent\.json does not exist"):
        tokens_for(SOURCE | {"file": absent}, "github", GITHUB, environ={})

    broken = secrets(tmp_path, '{"github": {"token": "gh-secret"')
    with pytest.raises(TokenSourceError) as raised:
        tokens_for(SOURCE | {"file": broken}, "github", GITHUB, environ={})
    assert "is not valid JSON (line 1)" in str(raised.value)
    assert "gh-secret" not in str(raised.value)

    with pytest.raises(TokenSourceError, match="must hold a JSON object"):
        tokens_for(SOURCE | {"file": secrets(tmp_path, "[1]")}, "github", GITHUB, environ={})


def test_tokens_never_show_in_their_repr() -> None:
    tokens = ForgeTokens(runner="gh-secret-1", labels=None)

    assert repr(tokens) == "ForgeTokens(runner=set, labels=None)"
    assert "gh-secret-1" not in str(tokens)
