"""Forge tokens from the forge_token_source setting: environment names or a secrets file, each
sent only to the origins it is bound to."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg
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
# Gitea has no canonical host: its whole-forge tokens go where hosts.gitea says.
BOUND_GITEA = SOURCE | {"hosts": {"gitea": ["https://gitea.example.com"]}}


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

    github = tokens_for(SOURCE, "github", GITHUB, allowed=True, environ=environ)
    gitea = tokens_for(BOUND_GITEA, "gitea", GITEA, allowed=True, environ=environ)

    assert github == ForgeTokens(runner="gh-runner", labels="gh-labels")
    # No label token for Gitea: None, never the runner's token.
    assert gitea == ForgeTokens(runner="gt-runner", labels=None)


def test_a_renamed_variable_is_read_by_its_new_name() -> None:
    source = {"env": {"github": "MY_BOT_TOKEN"}, "label_env": {"github": "MY_LABEL_TOKEN"}}
    environ = {"MY_BOT_TOKEN": "a", "MY_LABEL_TOKEN": "b", "CEASELESS_GITHUB_TOKEN": "ignored"}

    assert tokens_for(source, "github", GITHUB, allowed=True, environ=environ) == ForgeTokens(
        "a", "b"
    )


def test_a_missing_token_is_none() -> None:
    assert tokens_for(SOURCE, "github", GITHUB, allowed=True, environ={}) == ForgeTokens(None, None)
    assert tokens_for(
        {}, "gitea", GITEA, allowed=True, environ={"CEASELESS_GITEA_TOKEN": "x"}
    ) == ForgeTokens(None, None)
    blank = {"CEASELESS_GITHUB_TOKEN": "  ", "CEASELESS_GITHUB_LABEL_TOKEN": ""}
    assert tokens_for(SOURCE, "github", GITHUB, allowed=True, environ=blank) == ForgeTokens(
        None, None
    )


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEASELESS_GITHUB_TOKEN", "from-env")
    monkeypatch.delenv("CEASELESS_GITHUB_LABEL_TOKEN", raising=False)

    assert tokens_for(SOURCE, "github", GITHUB, allowed=True) == ForgeTokens("from-env", None)


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

    assert tokens_for(source, "github", GITHUB, allowed=True, environ=environ) == ForgeTokens(
        "gh-runner", "gh-labels"
    )
    assert tokens_for(source, "gitea", GITEA + "/", allowed=True, environ=environ) == ForgeTokens(
        "this-gitea", "this-gitea-labels"
    )
    other = "https://git.other.example/api/v1"
    # Another Gitea host gets neither the forge entry nor the variable until hosts names it...
    assert tokens_for(source, "gitea", other, allowed=True, environ=environ) == ForgeTokens(
        None, None
    )
    # ...and then the forge entry, then the environment for what the file does not hold.
    bound = source | {"hosts": {"gitea": ["https://git.other.example"]}}
    assert tokens_for(bound, "gitea", other, allowed=True, environ=environ) == ForgeTokens(
        "any-gitea", "env-l"
    )


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_secrets_file_open_to_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = secrets(tmp_path, {"github": {"token": "gh-secret"}}, mode)

    with pytest.raises(TokenSourceError) as refused:
        tokens_for(SOURCE | {"file": path}, "github", GITHUB, allowed=True, environ={})

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
        tokens_for(SOURCE | {"file": absent}, "github", GITHUB, allowed=True, environ={})

    broken = secrets(tmp_path, '{"github": {"token": "gh-secret"')
    with pytest.raises(TokenSourceError) as raised:
        tokens_for(SOURCE | {"file": broken}, "github", GITHUB, allowed=True, environ={})
    assert "is not valid JSON (line 1)" in str(raised.value)
    assert "gh-secret" not in str(raised.value)

    with pytest.raises(TokenSourceError, match="must hold a JSON object"):
        tokens_for(
            SOURCE | {"file": secrets(tmp_path, "[1]")}, "github", GITHUB, allowed=True, environ={}
        )


def test_tokens_never_show_in_their_repr() -> None:
    tokens = ForgeTokens(runner="gh-secret-1", labels=None)

    assert repr(tokens) == "ForgeTokens(runner=set, labels=None)"
    assert "gh-secret-1" not in str(tokens)


ENVIRON = {"CEASELESS_GITHUB_TOKEN": "gh-runner", "CEASELESS_GITEA_TOKEN": "gt-runner"}


@pytest.mark.parametrize(
    ("url", "sent"),
    [
        ("https://api.github.com", True),
        ("https://github.com/acme/widgets.git", True),  # git's host
        ("https://API.GitHub.com:443/", True),
        ("http://api.github.com", False),  # another scheme is another origin
        ("https://api.github.com:8443", False),
        ("https://github.com.evil.example/acme/widgets.git", False),
        ("http://127.0.0.1:8123", False),
        ("git@github.com:acme/widgets.git", False),  # ssh uses its own keys
        ("/srv/git/widgets.git", False),
    ],
)
def test_the_github_variable_goes_only_to_githubs_api_and_git_hosts(url: str, sent: bool) -> None:
    tokens = tokens_for(SOURCE, "github", GITHUB, allowed=True, url=url, environ=ENVIRON)

    assert tokens.runner == ("gh-runner" if sent else None)


def test_a_repo_whose_api_url_is_another_host_gets_no_whole_forge_token() -> None:
    capture = "http://127.0.0.1:8123"

    tokens = tokens_for(SOURCE, "github", capture, allowed=True, environ=ENVIRON)

    assert tokens == ForgeTokens(None, None)
    assert tokens.withheld == ("CEASELESS_GITHUB_TOKEN",)


def test_a_gitea_variable_goes_nowhere_until_hosts_names_its_origin() -> None:
    assert tokens_for(SOURCE, "gitea", GITEA, allowed=True, environ=ENVIRON).runner is None

    for url in (GITEA, "https://gitea.example.com/acme/widgets.git"):
        assert tokens_for(
            BOUND_GITEA, "gitea", GITEA, allowed=True, url=url, environ=ENVIRON
        ).runner == ("gt-runner")
    elsewhere = "https://gitea.example.com:3000/api/v1"
    assert tokens_for(BOUND_GITEA, "gitea", elsewhere, allowed=True, environ=ENVIRON).runner is None


def test_hosts_replaces_the_canonical_github_origins() -> None:
    source = SOURCE | {"hosts": {"github": ["https://ghe.example.com"]}}
    ghe = "https://ghe.example.com/api/v3"

    assert tokens_for(source, "github", ghe, allowed=True, environ=ENVIRON).runner == "gh-runner"
    assert tokens_for(source, "github", GITHUB, allowed=True, environ=ENVIRON).runner is None
    nowhere = SOURCE | {"hosts": {"github": []}}
    assert tokens_for(nowhere, "github", GITHUB, allowed=True, environ=ENVIRON).runner is None


def test_a_file_entry_for_an_api_url_goes_to_that_origin_only(tmp_path: Path) -> None:
    ghe = "https://ghe.example.com/api/v3"
    path = secrets(tmp_path, {ghe: {"token": "ghe-runner"}, "github": {"token": "gh-file"}})
    source = SOURCE | {"file": path}

    def runner(url: str) -> str | None:
        return tokens_for(source, "github", ghe, allowed=True, url=url, environ={}).runner

    assert runner(ghe) == "ghe-runner"
    assert runner("https://ghe.example.com/acme/widgets.git") == "ghe-runner"
    assert runner("http://ghe.example.com/acme/widgets.git") is None
    # The forge's entry is bound to GitHub's own hosts, not to the Enterprise one.
    assert runner("https://github.com/acme/widgets.git") == "gh-file"
    assert runner("https://git.elsewhere.example/acme/widgets.git") is None


@pytest.mark.parametrize(
    "hosts",
    [
        {"github": "https://github.com"},
        {"github": ["https://github.com/acme"]},
        {"github": ["github.com"]},
        {"github": ["https://user@github.com"]},
        {"github": ["ftp://github.com"]},
        ["https://github.com"],
    ],
)
def test_a_hosts_entry_that_is_not_an_origin_is_refused(hosts: Any) -> None:
    with pytest.raises(TokenSourceError, match=r"forge_token_source\.hosts"):
        tokens_for(SOURCE | {"hosts": hosts}, "github", GITHUB, allowed=True, environ=ENVIRON)


def _write_source(conn: psycopg.Connection, value: Any) -> None:
    conn.execute(
        "update ceaseless.settings set value = %s::jsonb where key = 'forge_token_source'",
        (json.dumps(value),),
    )


@pytest.mark.parametrize(
    "value",
    [
        SOURCE,
        SOURCE | {"file": "/etc/ceaseless/forge-tokens.json"},
        SOURCE | {"hosts": {"github": ["https://ghe.example.com", "http://127.0.0.1:8123/"]}},
        SOURCE | {"hosts": {"gitea": ["https://[::1]:3000"], "github": None}},
        {"env": {"github": None}},
        {},
    ],
)
def test_the_setting_accepts_its_documented_shapes(conn: psycopg.Connection, value: Any) -> None:
    _write_source(conn, value)
    stored = conn.execute(
        "select value from ceaseless.settings where key = 'forge_token_source'"
    ).fetchone()
    assert stored == (value,)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ([], ": must be a JSON object"),
        (SOURCE | {"token": "ghp_secret_value"}, ": the only keys are env, label_env, file"),
        ({"env": "CEASELESS_GITHUB_TOKEN"}, ".env: must be an object"),
        ({"env": {"gitlab": "X"}}, ".env: the keys must be github or gitea"),
        ({"label_env": {"github": "ghp_secret-value"}}, ".label_env.github: must name"),
        ({"file": "forge-tokens.json"}, ".file: must be an absolute path"),
        ({"hosts": {"github": "https://github.com"}}, ".hosts.github: must be a list"),
        ({"hosts": {"bitbucket": []}}, ".hosts: the keys must be github or gitea"),
        ({"hosts": {"github": ["https://github.com/acme"]}}, ".hosts.github[0]: must be an origin"),
        ({"hosts": {"gitea": ["https://a.example", "git.example.com"]}}, ".hosts.gitea[1]:"),
        ({"hosts": {"gitea": ["https://ghp_secret@git.example.com"]}}, ".hosts.gitea[0]:"),
        ({"hosts": {"gitea": ["https://git.example.com:70000"]}}, ".hosts.gitea[0]:"),
    ],
)
def test_the_setting_refuses_other_shapes_naming_where_and_never_the_value(
    conn: psycopg.Connection, value: Any, where: str
) -> None:
    with pytest.raises(psycopg.Error) as refused:
        _write_source(conn, value)

    assert refused.value.sqlstate == "CE422"
    message = str(refused.value.diag.message_primary)
    assert message.startswith("settings.forge_token_source" + where), message
    assert "secret" not in message and "secret" not in str(refused.value.diag.message_detail)
