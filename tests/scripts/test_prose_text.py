"""recipes/synthetic/local/prose_text.py: the prose paragraphs of reStructuredText and wrapped
plain text, their markup removed, and code, lists, headings and fragments left out."""

from __future__ import annotations

from pathlib import Path

import pytest

RST = """\
Building things
===============

This paragraph explains, in :func:`plain words <os.path.join>`, why ``spam`` matters to
the reader. It has **two** sentences, see `the guide <https://example.org>`_.

.. note::

   An indented note is not taken.

- a list item is not prose at all, even when it is long enough to count.

Here is an example::

    x = frobnicate(1, 2)

    indented code is left out as well, even when it reads like prose here.

short one.

The third paragraph [#]_ is kept too, because it reads as prose from its start to its end.
"""


def test_rst_paragraphs_are_the_prose(load_tool) -> None:
    tool = load_tool("prose_text")
    got = list(tool.rst_paragraphs(RST))
    assert got == [
        "This paragraph explains, in plain words, why spam matters to the reader. It has two "
        "sentences, see the guide.",
        "The third paragraph is kept too, because it reads as prose from its start to its end.",
    ]


def test_wrapped_text_paragraphs(load_tool) -> None:
    tool = load_tool("prose_text")
    text = ("  Licence text is wrapped at a width and the lines of a paragraph\n"
            "are joined back into one line here.\n\n"
            "  0. A numbered heading.\n\n"
            "THE END\n")  # fmt: skip
    assert list(tool.text_paragraphs(text)) == [
        "Licence text is wrapped at a width and the lines of a paragraph are joined back into "
        "one line here."
    ]


@pytest.mark.skipif(not Path("/usr/share/common-licenses/GPL-3").is_file(),
                    reason="no /usr/share/common-licenses (not a Debian system)")  # fmt: skip
def test_the_licences_give_legal_prose(load_tool, tmp_path: Path) -> None:
    tool = load_tool("prose_text")
    paragraphs = tool.legal()
    assert len(paragraphs) > 100 and len(set(paragraphs)) == len(paragraphs)
    assert any("Free Software Foundation" in p for p in paragraphs)
