"""The values of an event Gradio preprocesses, checked against its input components before Gradio sees them.

An event that Gradio preprocesses (every one of the page's own unqueued events: the example list, the lab's
target, the x-axis switch, the toggles) runs each input component's ``preprocess`` before its handler. Those
checks answer a value the page never sends with a 500 and a traceback of 35 lines in the log: a choice not
among a dropdown's or a radio's (``Value: 'zz' ... is not in the list of choices``, raised as a ``gr.Error``
that Gradio prints), an example index past the list or not a number (``IndexError`` inside Gradio). The gate
(``gate.py``) asks ``refuse_values`` first and answers such a body with a short 400 naming the input, so
Gradio's own check never fails. What is checked, by component (its public attributes only):

- ``Dropdown``, ``Radio``, ``CheckboxGroup``: one of its choices' values (a list of them where it takes
  several); a dropdown that takes a custom value, anything;
- ``Dataset`` (an example list): a whole number indexing one of its samples (the page sends the one clicked);
- ``Checkbox``: true or false; ``Number``, ``Slider``: a finite number within the component's range;
  ``Textbox``: text;
- a stateful component (``gr.State``): nothing (Gradio reads the session's value, never the one sent);
  anything else, nothing (its handler is wrapped by the guard: ``clients._quiet``).

Null passes where Gradio passes it on as "no value" (all but an example list). The events the API serves
(the race, the lab's sample) take raw values (``preprocess=False``) and check them in their handlers
(``components/state/request.py``): this module leaves them alone.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gradio as gr

from components.state.fields import EXCERPT_CHARS, excerpt, kind_of, short


def value_words(value: Any) -> str:
    """A value a client sent, for a message: a number as a number (``1``, ``0.5``; one too long to print by its
    length), true/false and null as JSON writes them, text quoted and cut to an excerpt, anything else by kind."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        if value.bit_length() > 4 * EXCERPT_CHARS:   # too long to print (Python refuses past 4300 digits)
            return excerpt(value)
        text = str(value)
        return text if len(text) <= EXCERPT_CHARS else f"a number of {len(text.lstrip('-'))} digits"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return excerpt(value)
    return kind_of(value)


def _choices(block) -> list:
    return [c[1] if isinstance(c, (tuple, list)) and len(c) == 2 else c for c in (getattr(block, "choices", None) or ())]


def _listed(words: Sequence[Any]) -> str:
    return short(", ".join(value_words(w) for w in words), 80)


def refuse_input(block, value: Any) -> str | None:
    """Why ``value`` is not a value the page sends for input component ``block`` (None: it is, or this kind of
    component is not checked here)."""
    if getattr(block, "stateful", False):
        return None
    if isinstance(block, gr.Dataset):
        samples = getattr(block, "raw_samples", None) or getattr(block, "samples", None) or []
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(samples):
            return f"takes the index of one of its {len(samples)} examples (0 to {len(samples) - 1}), not {value_words(value)}"
        return None
    if value is None:
        return None
    if isinstance(block, (gr.Dropdown, gr.Radio, gr.CheckboxGroup)):
        if getattr(block, "allow_custom_value", False):
            return None
        choices = _choices(block)
        several = isinstance(block, gr.CheckboxGroup) or getattr(block, "multiselect", False)
        values = value if several and isinstance(value, list) else [value]
        if several and not isinstance(value, list):
            return f"takes a list of its choices ({_listed(choices)}), not {value_words(value)}"
        for v in values:   # ``in``, as Gradio's own check, but only text or a number is a choice, and true is not 1
            if isinstance(v, bool) or not isinstance(v, (str, int, float)) or v not in choices:
                return f"takes one of {_listed(choices)}, not {value_words(v)}"
        return None
    if isinstance(block, gr.Checkbox):
        return None if isinstance(value, bool) else f"takes true or false, not {value_words(value)}"
    if isinstance(block, (gr.Number, gr.Slider)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"takes a finite number, not {value_words(value)}"
        lo, hi = getattr(block, "minimum", None), getattr(block, "maximum", None)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            return f"takes a number from {value_words(lo)} to {value_words(hi)}, not {value_words(value)}"
        return None
    if isinstance(block, gr.Textbox):
        return None if isinstance(value, str) else f"takes text, not {kind_of(value)}"
    return None


def _name(block, k: int) -> str:
    label = getattr(block, "label", None)
    return f"input {k + 1} ({short(label, EXCERPT_CHARS)})" if isinstance(label, str) and label else f"input {k + 1}"


def refuse_values(event, data: Any) -> str | None:
    """Why ``data`` (a call's positional values) would fail the input checks Gradio runs for ``event`` (a
    ``gradio_private.EventInfo``) before its handler; None where it passes them, where Gradio runs none
    (``preprocess=False``: the handler checks), or where the values are not a list of the event's length
    (the gate's count check answers that)."""
    if event is None or not event.preprocess or not isinstance(data, list):
        return None
    blocks = event.components
    if len(data) != len(blocks):   # the API may leave out the inputs it does not show (a State)
        blocks = event.shown_components
        if len(data) != len(blocks):
            return None
    for k, (block, value) in enumerate(zip(blocks, data)):
        why = refuse_input(block, value)
        if why:
            return short(f"This event's {_name(block, k)} {why}.")
    return None
