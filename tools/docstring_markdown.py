"""Google-style (and TRL-style) docstrings to Markdown, and GitHub's heading anchors.

Used by ``tools/write_api_docs.py`` to render docs/api.md, and by ``tests/test_docs.py`` to check the anchors that
links into the docs name. Standard library only.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

# ---------------------------------------------------------------------------------------------------------------------
# Anchors: the ids GitHub gives headings
# ---------------------------------------------------------------------------------------------------------------------


def heading_slug(heading: str) -> str:
    """GitHub's id of a Markdown heading: link text kept, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def heading_anchors(markdown: str) -> set[str]:
    """Every heading id of a Markdown text, duplicates numbered as GitHub numbers them (``-1``, ``-2``)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = heading_slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


# ---------------------------------------------------------------------------------------------------------------------
# Docstrings
# ---------------------------------------------------------------------------------------------------------------------

_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Attributes|Class attributes|Fields|Returns|Yields|Raises|Examples?|Notes?|"
    r"Warnings?|References|See Also)(\s*\([^)]*\))?:\s*$"
)
_LISTED_SECTIONS = {"Args", "Arguments", "Parameters", "Attributes", "Class attributes", "Fields", "Raises"}
_ENTRY = re.compile(r"^([*\w][\w.*]*(?:, [*\w][\w.*]*)*)(?: \((.+?)\))?:(?:\s+(.*))?$")
_TOP_ENTRY = re.compile(r"^(\w+) \((.+)\):$")  # TRL's style: `name (`type`, *optional*):` and an indented text
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")
_RST_TABLE = re.compile(r"^=+(\s+=+)+\s*$")
_ROLE = re.compile(r":(class|func|meth|mod|data|attr|obj|exc):`(~?)\.?([^`]+)`")
_HF_LINK = re.compile(r"\[`(~?)([\w.]+)`\](?!\()")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _dedent(lines: list[str]) -> list[str]:
    width = min((_indent(line) for line in lines if line.strip()), default=0)
    return [line[width:] if line.strip() else "" for line in lines]


def _strip_blank_edges(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _take_indented(lines: list[str], start: int, base: int = 0) -> tuple[list[str], int]:
    """Lines from ``start`` that are blank or indented deeper than ``base``; trailing blank lines are left."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > base):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end], end


class Renderer:
    """Google-style (and TRL-style) docstrings to Markdown, with inline references linked to this page."""

    def __init__(self, anchors: dict[str, str]):
        self.anchors = anchors  # short name -> anchor, for :class:`X` and [`X`]

    def _reference(self, tilde: str, target: str, role: str = "class") -> str:
        shown = target.rsplit(".", 1)[-1] if tilde else target
        anchor = None if role == "mod" else self.anchors.get(target.rsplit(".", 1)[-1])
        return f"[`{shown}`](#{anchor})" if anchor else f"`{shown}`"

    def inline(self, text: str) -> str:
        text = re.sub(r"``(.+?)``", r"`\1`", text)
        text = _ROLE.sub(lambda m: self._reference(m.group(2), m.group(3), m.group(1)), text)
        text = _HF_LINK.sub(lambda m: self._reference(m.group(1), m.group(2)), text)
        # An HTML-looking `<word` outside code spans would vanish on GitHub: escape it.
        parts = re.split(r"(`[^`]*`)", text)
        return "".join(p if p.startswith("`") else re.sub(r"<(?=[A-Za-z/!])", "&lt;", p) for p in parts)

    def render(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if stripped.startswith("```"):
                i = self._fence(lines, i, out)
            elif _indent(line) == 0 and (match := _SECTION.match(line)):
                block, i = _take_indented(lines, i + 1)
                out += [f"**{match.group(1)}{match.group(2) or ''}:**", ""]
                out += self._section(match.group(1), _dedent(block)) + [""]
            elif _RST_TABLE.match(line):
                end = i + 1
                while end < len(lines) and lines[end].strip():
                    end += 1
                out += ["```text", *lines[i:end], "```", ""]
                i = end
            elif stripped.startswith(">>>"):
                end = i
                while end < len(lines) and lines[end].strip():
                    end += 1
                out += ["```python", *_dedent(lines[i:end]), "```", ""]
                i = end
            elif _indent(line) == 0 and _TOP_ENTRY.match(line) and i + 1 < len(lines) and _indent(lines[i + 1]) > 0:
                block, i = _take_indented(lines, i + 1)
                out.append(self._item(line, block))
            elif _indent(line) > 0 and not _LIST_ITEM.match(line) and self._starts_block(lines, i):
                block, i = _take_indented(lines, i)
                out += ["```text", *_dedent(block), "```", ""]
            elif stripped.startswith("> "):
                out += [f"**{self.inline(stripped[2:])}**", ""]
                i += 1
            else:
                out.append(self.inline(line.replace("::", ":") if line.endswith("::") else line))
                i += 1
        return out

    @staticmethod
    def _starts_block(lines: list[str], i: int) -> bool:
        """An indented line opens a literal block after a blank line or a ``::``; else it continues a paragraph."""
        previous = lines[i - 1] if i else ""
        return not previous.strip() or previous.rstrip().endswith("::")

    def _fence(self, lines: list[str], i: int, out: list[str]) -> int:
        width = _indent(lines[i])
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            end += 1
        block = [line[width:] if line.strip() else "" for line in lines[i : end + 1]]
        out += [*block, ""]
        return end + 1

    def _item(self, head: str, continuation: list[str]) -> str:
        match = _ENTRY.match(head.strip()) or _TOP_ENTRY.match(head.strip())
        first = (match.groups() + (None,))[2] if match else head
        text = " ".join(part.strip() for part in [first or "", *continuation] if part.strip())
        if match is None:
            return f"- {self.inline(text)}"
        kind = f" ({self.inline(match.group(2))})" if match.group(2) else ""
        return f"- `{match.group(1)}`{kind}: {self.inline(text)}"

    def _section(self, name: str, block: list[str]) -> list[str]:
        if name not in _LISTED_SECTIONS:
            return self.render(block)
        out: list[str] = []
        i = 0
        while i < len(block):
            if not block[i].strip():
                i += 1
                continue
            head = block[i]
            continuation, i = _take_indented(block, i + 1)
            if _ENTRY.match(head):
                out.append(self._item(head, [c for c in continuation if c.strip()]))
            else:
                out += [self.inline(head), *(self.inline(c) for c in continuation)]
        return out


def own_docstring(obj: Any) -> str | None:
    """The object's own docstring, never one inherited or generated (a dataclass's repr-like default)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
        return None
    return doc


def docstring_markdown(obj: Any, renderer: Renderer) -> str:
    doc = own_docstring(obj)
    if doc is None:
        return "*No docstring.*"
    lines = _strip_blank_edges(renderer.render(inspect.cleandoc(doc).splitlines()))
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text)
