"""a3fast.framing: the one framing of every input — a JSON array or JSON Lines, from a path, bytes
or a stream — that knows no fleet and holds one line at a time."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from a3fast import framing

SRC = Path(framing.__file__).resolve().parents[1]


def test_the_form_is_told_by_the_first_non_blank_byte():
    assert framing.framed(b"\n  [1]").form == framing.ARRAY
    assert framing.framed(b'\n{"a": 1}\n').form == framing.LINES
    assert framing.framed(b" \n\t\r\n").form == framing.EMPTY
    assert framing.framed(b"").form == framing.EMPTY


def test_lines_are_numbered_with_blank_lines_counted_and_left_out():
    framed = framing.framed(io.BytesIO(b"\n1\n\n22\r\n333\n\n4"))
    assert list(framed.lines()) == [(2, b"1"), (4, b"22\r"), (5, b"333"), (7, b"4")]


def test_an_array_is_whole_and_starts_at_its_line():
    framed = framing.framed(b"\n\n[1,\n2]\n")
    assert framed.form == framing.ARRAY and framed.first_line == 3
    assert framed.whole() == b"[1,\n2]\n"


def test_an_array_splits_into_its_elements_bytes_undecoded():
    assert framing.split_array(b'[{"a": [1, 2]}, "x" ,3]') == [b'{"a": [1, 2]}', b'"x"', b"3"]
    problems = framing.split_array(b'{"a": 1}')
    assert [(p.path, p.expected) for p in problems] == [("$", framing.NOT_DOCUMENTS)]


def test_a_stream_handed_on_starts_at_its_first_line():
    framed = framing.framed(io.BytesIO(b"\n\n{}\n{}\n"))
    stream = framed.stream()
    assert stream.readline() == b"{}\n" and stream.read() == b"{}\n"


def test_a_pushback_stream_reads_what_was_given_back_first():
    stream = framing.Pushback(io.BytesIO(b"c\nd\n"))
    head = stream.read(1)
    stream.unread(b"a\nb" + head)
    assert list(stream) == [b"a\n", b"bc\n", b"d\n"]


def test_a_path_a_stream_and_bytes_give_the_same_documents(tmp_path):
    data = b'{"a": 1}\n\nnot json\n[2]\n'
    path = tmp_path / "d.jsonl"
    path.write_bytes(data)
    results = [framing.read_documents(source) for source in (data, io.BytesIO(data), path, str(path))]
    assert all(result == results[0] for result in results)
    documents, problems = results[0]
    assert documents == [("line 1: $", {"a": 1}), ("line 4: $", [2])]
    assert [p.path for p in problems] == ["line 3: $"]


def test_progress_hears_of_every_byte(tmp_path):
    data = b'{"a": 1}\n\n{"b": 2}\n'
    heard: list[int] = []
    list(framing.framed(data, progress=heard.append).lines())
    assert sum(heard) == len(data)
    heard.clear()
    framing.framed(b"  [1, 2]  ", progress=heard.append).whole()
    assert sum(heard) == len(b"  [1, 2]  ")


def test_a_file_the_framing_opened_is_closed(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"{}\n" * 3)
    framed = framing.framed(path)
    framed.close()
    with pytest.raises(ValueError):
        list(framed.lines())


def test_the_framing_imports_nothing_of_the_fleet():
    # a fresh interpreter with a bare `a3fast` package object, so that only the framing and what
    # it imports run (the package face imports the fleet for its users)
    script = textwrap.dedent(f"""
        import sys, types
        package = types.ModuleType("a3fast")
        package.__path__ = [{str(SRC / "a3fast")!r}]
        sys.modules["a3fast"] = package
        import a3fast.framing
        print(" ".join(sorted(m for m in sys.modules if m.startswith("a3fast"))))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert loaded == {"a3fast", "a3fast.framing", "a3fast.document", "a3fast.errors"}


#: Lines of this stream: each about 200 bytes, so the whole is 40 MB.
STREAMED_LINES = 200_000

_MEASURE = textwrap.dedent("""
    import resource, sys
    from a3fast.files import input_source
    from a3fast.framing import iter_documents
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    count = sum(1 for item in iter_documents(input_source("-")) if not item.problems)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(count, after - before)
""")


@pytest.mark.slow  # writes 40 MB through a pipe: a few seconds on the shared machine
def test_standard_input_is_streamed_in_flat_memory():
    line = b'{"seq": 1, "kind": "x", "content": {"pad": "' + b"p" * 150 + b'"}}\n'
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen([sys.executable, "-c", _MEASURE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    block = line * 1000
    for _ in range(STREAMED_LINES // 1000):
        proc.stdin.write(block)
    proc.stdin.close()
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.wait(timeout=300) == 0, err
    count, grown_kib = map(int, out.split())
    assert count == STREAMED_LINES
    # 40 MB went through; what the reader kept is a few lines, not a share of the stream
    assert grown_kib < 8 * 1024, grown_kib


@given(st.binary(max_size=8) | st.lists(st.sampled_from(b" \t\r\n\x0b\x0c\x1cx{"), max_size=8).map(bytes))
def test_a_blank_line_is_one_of_json_whitespace_alone(line):
    # RFC 8259: space, tab, CR, LF; `bytes.isspace` takes \v and \f as well, which no JSON reader does
    assert framing.blank(line) == (line.strip(b" \t\r\n") == b"")


def test_a_line_of_vertical_tabs_or_form_feeds_is_a_line_not_a_blank_one():
    framed = framing.framed(b"\n\x0b\n1\n\x0c\x0c\n")
    assert framed.form == framing.LINES
    assert list(framed.lines()) == [(2, b"\x0b"), (3, b"1"), (4, b"\x0c\x0c")]


@pytest.mark.parametrize("depth", [200, 1_500, 100_000])
def test_an_element_nested_past_what_msgspec_splits_is_refused_alone(depth):
    # as its line would be; it took the whole array with it past about a thousand levels
    data = b'[{"a": 1}, ' + b"[" * depth + b"]" * depth + b', {"b": 2}]'
    documents, problems = framing.read_documents(data)
    assert documents == [("$[0]", {"a": 1}), ("$[2]", {"b": 2})]
    assert [(p.path[:7], p.expected) for p in problems] == [("$[1][0]", "at most 128 nested arrays and objects")]
