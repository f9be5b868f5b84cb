"""The Prometheus configuration docs/metrics.md shows is what Prometheus loads: its alert rules pass
`promtool check rules`, and every ceaseless series they name is one the page serves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.docs.markdown import ROOT

PAGE = ROOT / "docs" / "metrics.md"


def _rules() -> str:
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)
    rules = [block for block in blocks if block.startswith("groups:")]
    assert len(rules) == 1, "docs/metrics.md shows one rules file"
    return str(rules[0])


def test_every_series_an_alert_names_is_in_the_series_table() -> None:
    table = set(re.findall(r"^\| `(ceaseless_[a-z_]+)`", PAGE.read_text(), re.M))
    named = set(re.findall(r"\b(ceaseless_[a-z_]+)\b", _rules()))
    assert {n for n in named if n not in table} == set(), table


def test_the_alert_rules_load_in_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    rules = tmp_path / "ceaseless.rules.yml"
    rules.write_text(_rules())
    checked = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
