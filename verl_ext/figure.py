"""One PNG figure of a grid of axes, drawn without a display: the setup and saving every plot here shares."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DPI = 110


@contextmanager
def png_figure(out_png: Path, rows: int, cols: int, figsize: tuple[float, float], title: str | None = None,
               **savefig: Any) -> Iterator[tuple[Any, Any]]:
    """Yield ``(figure, axes)`` of ``rows`` x ``cols`` axes (a 2-D array; matplotlib's Agg backend). When the block
    ends the figure gets ``title`` as its suptitle (None: none), a tight layout, and is saved to ``out_png`` (its
    folder made; ``savefig`` keywords passed on); it is closed either way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=figsize, squeeze=False)
    try:
        yield fig, axes
        if title is not None:
            fig.suptitle(title)
        fig.tight_layout()
        out_png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_png, dpi=DPI, **savefig)
    finally:
        plt.close(fig)
