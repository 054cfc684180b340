"""A link's values are someone else's text: where the page quotes them (the ignored parameters' warning) they show
as typed, never as markdown of their own (a link to click, a formula, a coloured directive)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.rendered import shown
from tests.test_app import app
from ui.layout import literal


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=80))
def test_literal_text_renders_as_itself(text):
    """Any text, markdown's punctuation included, renders as itself with its whitespace run together."""
    plain = " ".join(text.split())
    if plain:
        assert shown(literal(text)) == plain


def test_a_links_markup_in_ignored_parameters_is_shown_as_typed():
    """A crafted link (a markdown link, a bare URL, an emoji directive, LaTeX) in values the page cannot read: the
    warning names them, as typed, and makes no link of them."""
    crafted = {"cmp": "[click](https://evil.example)", "card": "see https://evil.example", "kv": "$x$ :red[y]"}
    at = app({**crafted, "[bad](https://evil.example)": "1"})
    warning = next(w.value for w in at.warning if w.value.startswith("Some link parameters were ignored"))
    text = shown(warning)
    assert "https://evil.example" in text and "[bad](https://evil.example) (unknown parameter)" in text
    assert "$x$ :red[y]" in text
    assert "](https" not in warning and "https://" not in warning  # the markdown itself carries no link syntax


def test_an_unknown_claim_id_in_a_link_is_quoted_as_typed():
    """The fact-check page's claim id from a link, unknown: the error quotes it as typed, with no link of its own."""
    from tests.test_check_page import page

    at = page(claim="[x](https://evil.example)")
    error = next(e.value for e in at.error if "No published figure has the id" in e.value)
    assert "'[x](https://evil.example)'" in shown(error) and "](https" not in error
