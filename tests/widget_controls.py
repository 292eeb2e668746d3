"""What the widget tests share: the width a figure may take and the controls of a widget."""

#: JupyterLab's notebook column beside the file browser, in pixels: a wider figure gets a scrollbar.
COLUMN_PX = 848


def controls_of(box) -> dict:
    """The widget's controls by description (sliders, text boxes, dropdowns, checkboxes)."""
    found = {}
    for child in getattr(box, "children", ()):
        if getattr(child, "description", ""):
            found[child.description] = child
        found.update(controls_of(child))
    return found
