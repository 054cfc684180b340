"""A link's values are someone else's text: where the page quotes them (the ignored parameters' warning) they show
as typed, never as markdown of their own (a link to click, a formula, a coloured directive)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.rendered import COMMONMARK, shown
from tests.test_app import app
from ui.layout import linkless, literal
from ui.state import pack_config


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


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=80))
def test_a_linkless_message_draws_no_link_of_its_own(text):
    """Whatever a message quotes, it draws no link, image or HTML, and no bare address is left to auto-link."""
    escaped = linkless(f"the config says {text}: fix it")
    rendered = COMMONMARK.render(escaped)
    assert "<a " not in rendered and "<img" not in rendered and "://" not in escaped and "www." not in escaped
    assert not re.search(r"<(?!/?(p|em|strong|code|br|h\d|ul|ol|li|blockquote|pre|hr)\b)", rendered)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abc XY09[]()<>$@:/.!\\w'", min_size=1, max_size=60))
def test_a_linkless_message_shows_what_it_quotes(text):
    """Links' and formulas' characters in a quoted value show as themselves."""
    plain = " ".join(text.split())
    if plain:  # inside a sentence, as messages quote a value (a line of its own could open a list: '0.')
        assert shown(linkless(f"the config says {plain}; fix it")) == f"the config says {plain}; fix it"


def test_a_config_in_a_link_whose_fields_are_markup_is_refused_without_a_link():
    """A shared link carrying an uploaded config whose model_type is a markdown link: the error names the value and
    makes no link of it."""
    at = app({"source": "Upload", "config": pack_config({"model_type": "[x](https://evil.example)"})})
    error = next(e.value for e in at.error if "unknown model_type" in e.value)
    assert "'[x](https://evil.example)'" in COMMONMARK.render(error).replace("&#x27;", "'")
    assert "<a " not in COMMONMARK.render(error) and not re.search(r"(?<!\\)\]\(", error)  # no unescaped ](...)
