"""Notebook 10's widget: an agent episode's tokens by author."""

from __future__ import annotations

from labkit import viz
from labkit.widgets.controls import (
    _STYLE,
    _interactive,
    _slider,
    widgets_enabled,
)


def episode_widget(episodes, tokenizer, row: int = 0, loss: str = "action mask"):
    """One of ``episodes`` (a :class:`labkit.agents.episodes.Episodes`), its tokens coloured by
    author (:func:`labkit.viz.plot_episode`): pick the episode, and which tokens the loss takes,
    the policy's (``"action mask"``, correct) or every token (``"every token"``, the masking
    bug)."""
    from labkit.agents.episodes import token_authors

    rows = len(episodes.texts)

    def draw(row, loss):
        if not 0 <= row < rows:
            raise ValueError(f"row must be in [0, {rows - 1}], got {row}")
        length = int(episodes.lengths[row])
        actions = episodes.action_mask[row, :length]
        tokens = token_authors(tokenizer, episodes.completion_ids[row, :length], actions)
        trained = [True] * len(tokens) if loss == "every token" else \
            [author == "policy" for _, author in tokens]
        calls = int(episodes.tool_calls[row])
        return viz.plot_episode(tokens, trained, title=f"episode {row}: {calls} tool call(s), "
                                                       f"{int(actions.sum())} policy tokens")

    if not widgets_enabled():
        return draw(row, loss)
    import ipywidgets

    return _interactive(draw, {
        "row": _slider("IntSlider", row, 0, max(rows - 1, 0), 1, "episode"),
        "loss": ipywidgets.Dropdown(options=["action mask", "every token"], value=loss,
                                    description="loss on", style=_STYLE),
    })
