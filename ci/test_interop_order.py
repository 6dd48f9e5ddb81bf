"""Every `impl Interop for ...` in the workspace lists its methods in the order the trait declares
them (crates/devbuf-core/src/interop/mod.rs), so that the backends' same-named files read side by
side. Run by ci/test."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRAIT = ROOT / "crates/devbuf-core/src/interop/mod.rs"
METHOD = re.compile(r"^    (?:unsafe )?fn (\w+)", re.M)


def block(text, opening):
    """The text of the `{ ... }` block whose opening line matches `opening`, up to its `}`."""
    m = re.search(opening, text, re.M)
    if m is None:
        return None
    indent = re.match(r"\s*", text[m.start():]).group(0)
    end = text.index(f"\n{indent}}}", m.end())
    return text[m.end():end]


def trait_order():
    return METHOD.findall(block(TRAIT.read_text(), r"^pub trait Interop\b.*\{$"))


def impls():
    for path in sorted(ROOT.glob("crates/*/src/**/*.rs")):
        text = path.read_text()
        for m in re.finditer(r"^( *)impl Interop for (\w+) \{$", text, re.M):
            body = block(text[m.start():], re.escape(m.group(0)))
            # Methods at the impl's own depth only.
            depth = len(m.group(1)) + 4
            names = re.findall(rf"^ {{{depth}}}(?:unsafe )?fn (\w+)", body, re.M)
            yield f"{path.relative_to(ROOT)} ({m.group(2)})", names


def test_every_impl_lists_its_methods_in_trait_order():
    order = trait_order()
    assert "holder_of" in order and "ipc" in order
    seen = list(impls())
    assert len(seen) >= 4, seen
    for where, names in seen:
        assert names == sorted(names, key=order.index), where
