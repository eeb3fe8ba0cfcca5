"""The extras as the command line names them, and the --server name `import mcp` refuses."""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.cli.extras import EXTRA_OF_MODULE

REPO = Path(__file__).resolve().parents[2]
#: distribution name -> the module it installs, where the two differ
MODULE_OF = {"prometheus-client": "prometheus_client"}


@pytest.mark.parametrize("extra", ["import", "serve", "ray"])
def test_rule_every_module_of_an_extra_is_named_with_its_extra(extra):
    requirements = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"][extra]
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        module = MODULE_OF.get(name, name.replace("-", "_"))
        assert EXTRA_OF_MODULE.get(module) == extra, (requirement, module)


@pytest.mark.parametrize("server", ["git\x07hub", "github\nserver", "acme\x1b[2Jcrm", "a\u200bb", " "])
def test_rule_a_server_name_with_a_control_character_is_refused(tmp_path, server):
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps({"tools": [{"name": "get_order", "inputSchema": {"type": "object"}}]}))
    out = tmp_path / "fleet.jsonl"
    result = CliRunner().invoke(main, ["import", "mcp", str(listing), "--server", server, "--bind", "a",
                                       "--namespace", "n", "--capability", "a.b/1", "-o", str(out)])
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("a3fast: --server: ") and "agents made" not in result.stderr
    assert not out.exists()


def test_a_printable_server_name_is_still_mapped(tmp_path):
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps({"tools": [{"name": "get_order", "inputSchema": {"type": "object"}}]}))
    result = CliRunner().invoke(main, ["import", "mcp", str(listing), "--server", "github-mcp-server",
                                       "--contracts", str(tmp_path / "c.jsonl")])
    assert result.exit_code == 0, result.stderr
    assert "'github'" in result.stderr
