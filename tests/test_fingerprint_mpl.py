"""Fingerprints of matplotlib objects: fast, exact for what a later cell sees, stable under
drawing and across processes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import python_output

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patheffects import withStroke  # noqa: E402

from ipy_resume.fingerprint import Unfingerprintable, fingerprint  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

BUILD = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

def build():
    x = np.random.default_rng(0).normal(size=1000)
    fig = plt.figure()
    hist = plt.hist(x, bins=30, density=True)
    plt.plot([1, 2, 3], [0.1, 0.2, 0.3], "r-", label="line")
    plt.scatter([0.5, 1.5], [0.2, 0.1], s=[10, 20], c=["b", "g"])
    plt.title("t")
    plt.xlabel("x")
    plt.legend()
    plt.annotate("peak", (0, 0.4))
    return fig, hist
"""


def build() -> tuple[Any, Any]:
    ns: dict[str, Any] = {}
    exec(BUILD, ns)
    return ns["build"]()  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def close_figures() -> Any:
    yield
    plt.close("all")


def test_hist_tuple_is_fast() -> None:
    x = np.random.default_rng(1).normal(size=1000)
    plt.figure()
    hist = plt.hist(x, bins=30)
    fingerprint(hist)  # rule caches
    best = min(timed(hist) for _ in range(3))
    assert best < 1.0


def timed(value: object) -> float:
    start = time.thread_time()  # CPU: what a loaded machine does not stretch
    fingerprint(value)
    return time.thread_time() - start


MANY = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

def many(n, kind):
    fig, ax = plt.subplots()
    for i in range(n):
        if kind == "rectangles":
            ax.add_patch(Rectangle((i, 0), 1, i % 7))
        else:
            ax.plot([0, 1], [i, i + 1])
    return fig, ax
"""


def many(n: int, kind: str) -> tuple[Any, Any]:
    """A figure of *n* rectangles or lines, as the benchmark (W9) builds it."""
    ns: dict[str, Any] = {}
    exec(MANY, ns)
    return ns["many"](n, kind)  # type: ignore[no-any-return]


ARTISTS = int(os.environ.get("IPY_RESUME_MANY_ARTISTS", "3000"))
"""Artists in the large figure: adding them costs matplotlib seconds per thousand (the
10,000-artist figure is measured by the benchmark, W9)."""


@pytest.mark.parametrize("kind", ["rectangles", "lines"])
def test_figure_with_many_artists(kind: str) -> None:
    fig, ax = many(ARTISTS, kind)
    digest = fingerprint(fig)  # and the rule caches
    key = min(timed(fig) for _ in range(2))
    start = time.thread_time()
    pickle.dumps(fig, protocol=5)
    baseline = time.thread_time() - start
    # An order of magnitude only (the target, under 1 s and below pickling, is measured by
    # the benchmark, W9): a regression to a reference cycle per artist or to a digest per
    # attribute shows here.
    assert key < 10
    assert key < 5 * baseline + 0.5
    if kind == "rectangles":
        ax.patches[ARTISTS // 2].set_height(100)
    else:
        ax.lines[ARTISTS // 2].set_color("black")
    assert fingerprint(fig) != digest


def line_and_rectangle() -> tuple[Any, Any, Any]:
    plt.close("all")
    fig, ax = plt.subplots()
    (line,) = ax.plot(np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0, 2.0]), color="red")
    rect = ax.add_patch(plt.Rectangle((0.5, 0.5), 1.0, 2.0, facecolor="green"))
    for i in range(20):  # more of each class, read through the layouts of the first ones
        ax.plot([0, 1], [i, -i])
        ax.add_patch(plt.Rectangle((i, 0), 1, 1))
    return fig, line, rect


ARTIST_CHANGES: dict[str, Any] = {
    "line colour": lambda line, rect: line.set_color("blue"),
    "line ydata": lambda line, rect: line.set_ydata(np.array([1.0, 3.0, 2.5])),
    "line xdata": lambda line, rect: line.set_xdata([0.0, 1.0, 2.0]),  # a list, not an array
    "line marker": lambda line, rect: line.set_marker("o"),
    "line marker path": lambda line, rect: line.set_marker("s"),
    "line marker fill": lambda line, rect: line.set_fillstyle("left"),
    "line width": lambda line, rect: line.set_linewidth(3),
    "line style": lambda line, rect: line.set_linestyle("--"),
    "line alpha": lambda line, rect: line.set_alpha(0.5),
    "line visibility": lambda line, rect: line.set_visible(False),
    "line zorder": lambda line, rect: line.set_zorder(7),
    "line label": lambda line, rect: line.set_label("data"),
    "line transform": lambda line, rect: line.set_transform(line.axes.transAxes),
    "line clip": lambda line, rect: line.set_clip_on(False),
    "line drawstyle": lambda line, rect: line.set_drawstyle("steps"),
    "line path effects": lambda line, rect: line.set_path_effects([withStroke(linewidth=3)]),
    "line sketch": lambda line, rect: line.set_sketch_params(1.0),
    "rectangle height": lambda line, rect: rect.set_height(2.5),
    "rectangle width": lambda line, rect: rect.set_width(0.25),
    "rectangle corner": lambda line, rect: rect.set_xy((0.0, 0.5)),
    "rectangle angle": lambda line, rect: rect.set_angle(30),
    "rectangle face colour": lambda line, rect: rect.set_facecolor("black"),
    "rectangle edge colour": lambda line, rect: rect.set_edgecolor("red"),
    "rectangle hatch": lambda line, rect: rect.set_hatch("//"),
    "rectangle visibility": lambda line, rect: rect.set_visible(False),
    "rectangle zorder": lambda line, rect: rect.set_zorder(0.5),
    "rectangle label": lambda line, rect: rect.set_label("box"),
    "rectangle transform": lambda line, rect: rect.set_transform(rect.axes.transAxes),
    "rectangle clip box": lambda line, rect: rect.get_clip_box().get_points(),  # no change
}
UNCHANGED = {"rectangle clip box"}


@pytest.mark.parametrize("name", sorted(ARTIST_CHANGES))
def test_a_changed_line_or_rectangle_changes_the_digest(name: str) -> None:
    fig, line, rect = line_and_rectangle()
    base = (fingerprint(fig), fingerprint(line), fingerprint(rect))
    fig, line, rect = line_and_rectangle()
    assert (fingerprint(fig), fingerprint(line), fingerprint(rect)) == base
    ARTIST_CHANGES[name](line, rect)
    after = (fingerprint(fig), fingerprint(line), fingerprint(rect))
    if name in UNCHANGED:
        assert after == base
    else:
        assert after[0] != base[0]
        assert after[1] != base[1] and after[2] != base[2]  # each covers its figure


def test_digest_does_not_depend_on_what_was_digested_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The attributes of an artist are read through the layout of the last one of its class;
    # an artist that does not fit it (other attributes, or values of another kind) is read
    # one attribute at a time.  Both must give the same digest.
    from ipy_resume.fingerprint import rules

    fig, ax = many(30, "lines")
    ax.lines[3].set_alpha(0.5)  # None -> float: a leaf either way
    ax.lines[4].set_path_effects([])  # a list of no objects: a leaf
    ax.lines[5].set_sketch_params(1.0)  # None -> a tuple of floats
    ax.lines[6].set_gid("g")
    ax.lines[7].set_marker("o")
    ax.lines[8].set_linewidth(np.float64(2.0))  # not a leaf: a numpy scalar
    ax.lines[9].set_url(None)
    ax.lines[10].custom = {"note": 1}  # an attribute the others lack
    ax.add_patch(plt.Rectangle((0, 0), 1, 1))
    orders = []
    for order in (range(30), range(29, -1, -1)):
        rules._LAYOUTS.clear()
        digests = [fingerprint(ax.lines[i]) for i in order]
        orders.append(sorted(digests))
        rules._LAYOUTS.clear()
        orders.append(sorted(fingerprint(ax.lines[i]) for i in order))
    rules._LAYOUTS.clear()
    monkeypatch.setattr(rules, "_LAYOUTS_MAX", 0)  # no layouts: every artist read one by one
    orders.append(sorted(fingerprint(line) for line in ax.lines))
    assert not rules._LAYOUTS
    assert all(o == orders[0] for o in orders)
    assert len(set(orders[0])) == 30  # each line differs (data), and each covers the figure
    cold = fingerprint(fig)
    monkeypatch.undo()
    assert fingerprint(fig) == cold  # warm layouts


def test_many_artists_agree_across_processes() -> None:
    code = MANY + (
        "from ipy_resume.fingerprint import fingerprint\n"
        "for kind in ('rectangles', 'lines'):\n"
        "    fig, ax = many(500, kind)\n"
        "    print(fingerprint(fig).hex())\n"
    )
    outputs = [python_output(code, seed, REPO).split() for seed in ("0", "11")]
    assert outputs[0] == outputs[1]
    assert len(set(outputs[0])) == 2
    assert [fingerprint(many(500, kind)[0]).hex() for kind in ("rectangles", "lines")] == (
        outputs[0]
    )


def test_drawing_does_not_change_the_digest() -> None:
    fig, hist = build()
    before_fig, before_hist = fingerprint(fig), fingerprint(hist)
    fig.canvas.draw()
    assert fingerprint(fig) == before_fig
    assert fingerprint(hist) == before_hist
    fig.savefig(os.devnull, format="png")
    fig.canvas.draw()
    assert fingerprint(fig) == before_fig
    assert fingerprint(hist) == before_hist


def test_same_figure_in_two_processes() -> None:
    code = BUILD + (
        "from ipy_resume.fingerprint import fingerprint\n"
        "fig, hist = build()\n"
        "print(fingerprint(fig).hex(), fingerprint(hist).hex())\n"
        "fig.canvas.draw()\n"
        "print(fingerprint(fig).hex(), fingerprint(hist).hex())\n"
    )
    outputs = [python_output(code, seed, REPO).split() for seed in ("0", "7")]
    assert outputs[0] == outputs[1]
    assert outputs[0][:2] == outputs[0][2:]  # drawn or not
    fig, hist = build()
    assert [fingerprint(fig).hex(), fingerprint(hist).hex()] == outputs[0][:2]


def simple_figure() -> tuple[Any, Any, Any]:
    plt.close("all")
    fig, ax = plt.subplots()
    (line,) = ax.plot(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]), color="red")
    ax.set_title("a")
    return fig, ax, line


CHANGES: dict[str, Any] = {
    "ydata": lambda fig, ax, line: line.set_ydata(np.array([4.0, 5.0, 7.0])),
    "xdata": lambda fig, ax, line: line.set_xdata(np.array([1.0, 2.0, 3.5])),
    "colour": lambda fig, ax, line: line.set_color("blue"),
    "line width": lambda fig, ax, line: line.set_linewidth(4),
    "marker": lambda fig, ax, line: line.set_marker("o"),
    "label": lambda fig, ax, line: line.set_label("new"),
    "title": lambda fig, ax, line: ax.set_title("b"),
    "title size": lambda fig, ax, line: ax.title.set_fontsize(30),
    "axis label": lambda fig, ax, line: ax.set_xlabel("time"),
    "limits": lambda fig, ax, line: ax.set_xlim(0, 10),
    "scale": lambda fig, ax, line: ax.set_yscale("log"),
    "face colour": lambda fig, ax, line: ax.set_facecolor("black"),
    "figure size": lambda fig, ax, line: fig.set_size_inches(3, 3),
    "suptitle": lambda fig, ax, line: fig.suptitle("all"),
    "text": lambda fig, ax, line: ax.text(1, 1, "note"),
    "scatter": lambda fig, ax, line: ax.scatter([1], [2]),
    "ticks": lambda fig, ax, line: ax.set_xticks([1, 2]),
    "legend": lambda fig, ax, line: ax.legend(["x"]),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_changes_a_later_cell_sees_change_the_digest(name: str) -> None:
    fig, ax, line = simple_figure()
    base_fig, base_line = fingerprint(fig), fingerprint(line)
    fig, ax, line = simple_figure()
    assert (fingerprint(fig), fingerprint(line)) == (base_fig, base_line)
    CHANGES[name](fig, ax, line)
    assert fingerprint(fig) != base_fig
    # an artist's digest covers the figure it is in
    assert fingerprint(line) != base_line


def test_scatter_sizes_and_colours_change_the_digest() -> None:
    fig, ax = plt.subplots()
    points = ax.scatter([1, 2], [3, 4], s=[10, 20], c=[0.1, 0.9])
    base = fingerprint(fig)
    fig.canvas.draw()
    assert fingerprint(fig) == base
    points.set_sizes([10, 30])
    assert fingerprint(fig) != base
    points.set_sizes([10, 20])
    assert fingerprint(fig) == base
    points.set_array(np.array([0.2, 0.9]))
    assert fingerprint(fig) != base


def test_hist_data_and_styles_change_the_digest() -> None:
    x = np.random.default_rng(2).normal(size=500)
    plt.figure()
    hist = plt.hist(x, bins=20)
    base = fingerprint(hist)
    hist[2][3].set_height(hist[2][3].get_height() + 1)
    assert fingerprint(hist) != base
    plt.figure()
    other = plt.hist(x, bins=20, color="orange")
    assert fingerprint(other) != base


def test_unpickled_figure_is_fingerprintable() -> None:
    fig, _ = build()
    copy = pickle.loads(pickle.dumps(fig))
    assert len(fingerprint(copy)) == 16
    copy.axes[0].set_title("changed")
    assert fingerprint(copy) != fingerprint(fig)


def test_rules_cost_nothing_without_matplotlib() -> None:
    code = (
        "import sys\n"
        "from ipy_resume.fingerprint import fingerprint\n"
        "class Plain:\n    pass\n"
        "fingerprint([Plain(), {1: 2}])\n"
        "print('matplotlib' in sys.modules, 'IPython' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


def test_canvas_and_renderer_are_not_state() -> None:
    fig, _ = build()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert fingerprint(renderer) == fingerprint(renderer)
    assert len(fingerprint(fig.canvas)) == 16
    with pytest.raises(Unfingerprintable):
        import threading

        fingerprint([fig, threading.Lock()])


@pytest.mark.parametrize("projection", [None, "3d"])
def test_contours_are_fingerprinted_by_their_lines_not_their_generator(
    projection: str | None,
) -> None:
    # A contour set keeps the C object that computed it, which cannot be pickled
    # (PDSH 04.12's `ax.contour3D(...)`, then `ax.view_init(...)` in a later cell).
    grid = np.linspace(-6, 6, 30)
    x, y = np.meshgrid(grid, grid)
    z = np.sin(np.hypot(x, y))
    fig = plt.figure()
    ax = fig.add_subplot(projection=projection)
    lines = ax.contour(x, y, z, 12)
    assert lines._contour_generator is not None  # what the rule leaves out is there
    before = fingerprint(ax)
    assert pickle.loads(pickle.dumps(lines))._contour_generator is None  # as pickled
    if projection == "3d":
        ax.view_init(60, 35)
    else:
        ax.set_xlim(-3, 3)
    assert fingerprint(ax) != before
    other = fig.add_subplot(projection=projection).contour(x, y, z * 2, 12)
    assert fingerprint(other) != fingerprint(lines)
    plt.close(fig)


def _shared_scene() -> dict[str, Any]:
    """Values that share parts of figures in every way a notebook binds them."""
    fig, hist = build()
    fig2, axes = plt.subplots(2, 2, sharex=True)
    for i, ax in enumerate(axes.flat):
        ax.plot(np.arange(5) * i, label=f"l{i}")
    twin = axes[0, 0].twinx()
    twin.plot([3, 2, 1])
    axes[1, 1].legend()
    loop: list[Any] = [fig2]
    loop.append(loop)  # a reference cycle through a figure
    return {
        "fig": fig,
        "ax": fig.axes[0],
        "hist": hist,
        "patches": hist[2],
        "first_bar": hist[2][0],
        "fig2": fig2,
        "axes": axes,
        "twin": twin,
        "lines": [ax.lines[0] for ax in axes.flat],
        "by_name": {"left": axes[0, 0], "legend": axes[1, 1].get_legend()},
        "loop": loop,
        "title": fig.axes[0].title,
    }


def test_a_shared_memo_gives_each_value_its_own_digest() -> None:
    # The digests taken together after a run share their memo (fig and ax walk one
    # figure once); every value must still get the digest a fingerprinter of its own
    # gives, whatever was digested before it.
    from ipy_resume.fingerprint.key import OnceFingerprinter

    scene = _shared_scene()
    alone = {name: fingerprint(value) for name, value in scene.items()}
    assert len(set(alone.values())) == len(alone)
    names = list(scene)
    rng = np.random.default_rng(7)
    for order in (names, names[::-1], *(list(rng.permutation(names)) for _ in range(6))):
        fp = OnceFingerprinter()
        together = {name: fp.digest(scene[name]) for name in order}
        assert together == alone, order
    # and a change reached only through an attached figure still shows in a shared memo
    fp = OnceFingerprinter()
    before = {name: fp.digest(scene[name]) for name in names}
    scene["fig2"].axes[3].lines[0].set_color("red")
    fp = OnceFingerprinter()
    after = {name: fp.digest(scene[name]) for name in ("lines", "first_bar", "twin", "fig")}
    assert after["lines"] != before["lines"] and after["twin"] != before["twin"]
    assert after["first_bar"] == before["first_bar"] and after["fig"] == before["fig"]
