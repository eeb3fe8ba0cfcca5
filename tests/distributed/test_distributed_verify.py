"""Trace archives verified on Ray tasks give the serial verifier's findings, and `a3fast verify
--ray` the serial command's output and exit code, file by file in the order given."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.verify import verify_file
from report_traces import findings_trace, placed_trace


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """Valid traces, one with §7 errors, an empty file, one that is not JSON, and a missing path."""
    root = tmp_path_factory.mktemp("archive")
    paths = []
    for seed in range(4):
        path = root / f"placed-{seed}.jsonl"
        placed_trace(path, agents=150, tasks=20, seed=seed)
        paths.append(path)
    findings_trace(root / "findings.jsonl")
    (root / "empty.jsonl").write_bytes(b"")
    (root / "garbage.jsonl").write_bytes(b"not json at all\n")
    paths += [root / "findings.jsonl", root / "empty.jsonl", root / "garbage.jsonl", root / "missing.jsonl"]
    return [str(p) for p in paths]


def test_verify_archive_finds_what_the_serial_verifier_finds_in_order(ray, archive):
    from a3fast.distributed import verify_archive

    results = list(verify_archive(archive, in_flight=3))
    assert [r.path for r in results] == archive
    for result in results:
        if result.path.endswith("missing.jsonl"):
            assert result.unreadable == "No such file or directory" and result.findings == []
            continue
        assert result.unreadable is None
        assert result.findings == verify_file(result.path), result.path
    assert any(r.findings for r in results)          # the archive holds findings to agree on


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("form", [[], ["--json"]])
def test_verify_ray_prints_what_serial_verify_prints(ray, archive, form):
    serial = run("verify", *form, *archive)
    parallel = run("verify", *form, "--ray", *archive)
    assert serial.exit_code == parallel.exit_code == 2
    assert parallel.stdout == serial.stdout and serial.stdout
    assert parallel.stderr == serial.stderr


def test_verify_ray_takes_an_address_and_exits_like_serial_on_valid_traces(ray, archive):
    valid = archive[:2]
    assert run("verify", "--ray", "auto", *valid).exit_code == 0
    assert run("verify", "--ray=local", *valid).stdout == run("verify", *valid).stdout
    invalid = run("verify", "--ray", archive[4])
    assert invalid.exit_code == 1 and "E_" in invalid.stdout


def test_verify_ray_refuses_standard_input(ray):
    result = run("verify", "--ray", "-")
    assert result.exit_code == 2
    assert "standard input ('-') cannot be sent to Ray tasks" in result.stderr


def test_verify_ray_prints_a_file_of_another_kind_in_its_place(ray, archive, tmp_path):
    # it was printed before every trace sent to Ray, not where it was named
    import orjson
    from a3fast.workload import generate_fleet

    declarations = tmp_path / "fleet.jsonl"
    declarations.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in generate_fleet(3, seed=1)))
    paths = [archive[0], str(declarations), archive[1]]
    for form in ([], ["--json"]):
        serial = run("verify", *form, *paths)
        parallel = run("verify", *form, "--ray", *paths)
        assert serial.exit_code == parallel.exit_code == 2
        assert parallel.stdout == serial.stdout and parallel.stderr == serial.stderr
    assert run("verify", "--ray", str(declarations)).stderr == run("verify", str(declarations)).stderr
