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


def test_paragraphs_quoting_the_held_out_text_are_left_out(load_tool) -> None:
    tool = load_tool("prose_text")
    held = ["You may copy and distribute verbatim copies of the Program's source code as you "
            "receive it, in any medium."]  # fmt: skip
    quoting = ("As the licence says, you may copy and distribute VERBATIM copies of the "
               "program's source code; nothing else.")  # fmt: skip
    seven = "In short you may copy and distribute verbatim copies, and more besides."
    other = "A paragraph about something else entirely, with no licence words in it at all."
    kept, left_out = tool.unseen([quoting, seven, other], held)
    assert kept == [seven, other] and left_out == 1  # 8 words in a row: out; 7 (a comma): in
    assert tool.unseen([quoting, other], [])[0] == [quoting, other]  # control: nothing held
