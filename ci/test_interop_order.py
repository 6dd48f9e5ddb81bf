"""Every `impl Interop for ...` in the workspace lists its methods in the order the trait declares
them (crates/devbuf-core/src/interop/mod.rs), so that the backends' same-named files read side by
side. A provided answers macro (`hands_nothing_out!()` and its halves, defined in
crates/devbuf-core/src/hands_nothing_out.rs; `exports_host_memory!()`, in
crates/devbuf-core/src/host_like.rs) counts as the methods it expands to, at its place. Run by ci/test; the fixture tests below hold the rule itself."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRAIT = ROOT / "crates/devbuf-core/src/interop/mod.rs"
MACROS = [ROOT / "crates/devbuf-core/src" / name for name in ("hands_nothing_out.rs", "host_like.rs")]
METHOD = re.compile(r"^    (?:unsafe )?fn (\w+)", re.M)
# A method, or a provided macro written in its place (`crate::`, `devbuf_core::` or `$crate::`).
ITEM = r"^ {%d}(?:(?:unsafe )?fn (\w+)|(?:\$?crate|devbuf_core)::(\w+)!\(\);)"


def block(text, opening):
    """The text of the `{ ... }` block whose opening line matches `opening`, up to its `}`."""
    m = re.search(opening, text, re.M)
    if m is None:
        return None
    indent = re.match(r"\s*", text[m.start():]).group(0)
    end = text.index(f"\n{indent}}}", m.end())
    return text[m.end():end]


def trait_order(text):
    return METHOD.findall(block(text, r"^pub trait Interop\b.*\{$"))


def macros(text):
    """Each provided macro's name -> the methods it expands to, in order."""
    found = {}
    for m in re.finditer(r"^macro_rules! (\w+) \{$", text, re.M):
        body = block(text[m.start():], re.escape(m.group(0)))
        names = []
        for method, inner in re.findall(ITEM % 8, body, re.M):
            names.extend([method] if method else found[inner])
        found[m.group(1)] = names
    return found


def impl_methods(text, provided):
    """(implementing type, its methods in written order, provided macros expanded) per impl."""
    for m in re.finditer(r"^( *)impl (?:devbuf_core::)?Interop for (\w+) \{$", text, re.M):
        body = block(text[m.start():], re.escape(m.group(0)))
        # Items at the impl's own depth only.
        depth = len(m.group(1)) + 4
        names = []
        for method, macro in re.findall(ITEM % depth, body, re.M):
            if macro and macro not in provided:
                raise AssertionError(f"impl Interop for {m.group(2)}: unknown macro {macro}!")
            names.extend([method] if method else provided[macro])
        yield m.group(2), names


def out_of_order(order, names):
    """The first method written before one the trait declares ahead of it, if any."""
    for earlier, later in zip(names, names[1:]):
        if order.index(earlier) >= order.index(later):
            return f"{later} after {earlier}"
    return None


def impls():
    provided = macros("\n".join(path.read_text() for path in MACROS))
    for path in sorted(ROOT.glob("crates/*/src/**/*.rs")):
        for name, names in impl_methods(path.read_text(), provided):
            yield f"{path.relative_to(ROOT)} ({name})", names


def test_every_impl_lists_its_methods_in_trait_order():
    order = trait_order(TRAIT.read_text())
    assert "holder_of" in order and "ipc" in order
    seen = list(impls())
    assert len(seen) >= 4, seen
    for where, names in seen:
        assert out_of_order(order, names) is None, where


# -- The rule on fixtures written here.

FIXTURE_TRAIT = """\
pub trait Interop: Send + Sync {
    fn a(&self);
    fn b(&self);
    fn c(&self);
    unsafe fn d(&self);
    fn e(&self);
}
"""

FIXTURE_MACROS = """\
macro_rules! b_and_c {
    () => {
        fn b(&self) {}
        fn c(&self) {}
    };
}

macro_rules! b_to_d {
    () => {
        $crate::b_and_c!();
        unsafe fn d(&self) {}
    };
}
"""


def fixture(items):
    body = "".join(f"    {item}\n" for item in items)
    return f"impl Interop for Q {{\n{body}}}\n"


def check(items):
    order = trait_order(FIXTURE_TRAIT)
    [(_, names)] = impl_methods(fixture(items), macros(FIXTURE_MACROS))
    return out_of_order(order, names)


def test_fixture_macros_expand_nested():
    assert macros(FIXTURE_MACROS) == {"b_and_c": ["b", "c"], "b_to_d": ["b", "c", "d"]}


@pytest.mark.parametrize("items", [
    ["fn a(&self) {}", "fn b(&self) {}", "fn c(&self) {}", "unsafe fn d(&self) {}", "fn e(&self) {}"],
    ["fn a(&self) {}", "devbuf_core::b_to_d!();", "fn e(&self) {}"],
    ["fn a(&self) {}", "crate::b_and_c!();", "unsafe fn d(&self) {}", "fn e(&self) {}"],
])
def test_fixture_in_trait_order_passes(items):
    assert check(items) is None


@pytest.mark.parametrize("items, found", [
    (["fn b(&self) {}", "fn a(&self) {}"], "a after b"),
    (["devbuf_core::b_to_d!();", "fn a(&self) {}"], "a after d"),
    (["fn a(&self) {}", "fn e(&self) {}", "crate::b_and_c!();"], "b after e"),
    (["fn a(&self) {}", "fn c(&self) {}", "crate::b_and_c!();"], "b after c"),
])
def test_fixture_out_of_order_is_found(items, found):
    assert check(items) == found


def test_fixture_unknown_macro_is_refused():
    with pytest.raises(AssertionError, match="unknown macro"):
        check(["fn a(&self) {}", "crate::nope!();"])
