"""The Python examples of python/README.md run as written, on an embedded device.

Every ```python and ```sh block follows a marker line, so none is skipped silently:
``<!-- example: run -->`` (run in order, in one namespace, in a scratch working
directory, as one Python session would) or ``<!-- example: excluded: WHY -->``.
"""

import pathlib
from typing import List, Tuple

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
MARKER = "<!-- example: "


def blocks(text: str) -> List[Tuple[str, str, str]]:
    """(mark, language, body) of every python and sh block, with its marker."""
    out: List[Tuple[str, str, str]] = []
    mark = None
    lines = iter(text.splitlines())
    for line in lines:
        t = line.strip()
        if t.startswith(MARKER):
            rest = t[len(MARKER):]
            if rest.startswith("run"):
                mark = "run"
            elif rest.startswith("excluded: ") and len(rest) > len("excluded: -->"):
                mark = "excluded"
            else:
                raise AssertionError(f"unknown example marker {t!r}")
            continue
        if t in ("```python", "```sh"):
            if mark is None:
                raise AssertionError(f"a {t} block without an example marker")
            body = []
            for b in lines:
                if b.strip() == "```":
                    break
                body.append(b)
            out.append((mark, t[3:], "\n".join(body) + "\n"))
            mark = None
        elif t:
            mark = None
    return out


def test_readme_python_examples_run(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    ran = 0
    for i, (mark, lang, body) in enumerate(blocks(README.read_text())):
        if mark == "excluded":
            continue
        assert lang == "python", f"block {i}: a shell block marked run (only Python runs here)"
        exec(compile(body, f"{README}, block {i}", "exec"), namespace)
        ran += 1
    assert ran >= 5, f"README.md ran {ran} examples"


def test_a_block_without_a_marker_is_refused() -> None:
    with pytest.raises(AssertionError, match="without an example marker"):
        blocks("text\n```python\nx = 1\n```\n")
    assert blocks(
        "<!-- example: excluded: slow -->\n```sh\nx\n```\n<!-- example: run -->\n```python\ny\n```\n"
    ) == [("excluded", "sh", "x\n"), ("run", "python", "y\n")]
