"""test_plotting.py: the plotting helpers, checked on the figures they draw:
axis labels, one panel per head with its title, the table's shape and
aspect kept, a colour bar, masked cells in their own grey at the cells that
are masked, colours of the others from the colour scale, and matplotlib
imported only when a helper is first used.  The tables are float64
references (reference.py); needs no server."""

import math
import os
import subprocess
import sys
import unittest

import numpy as np

import attnbias
from reference import example12, ref_alibi, ref_attention, ref_inv_freq

try:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib import colors as mcolors
    from attnbias import plotting
except ImportError:  # pragma: no cover - Debian's python3-matplotlib is a test dependency
    matplotlib = None

GREY = np.array(mcolors.to_rgb(plotting.MASKED_COLOR)) if matplotlib else None


def render(fig):
    """Draw the figure; returns its RGB pixels (row 0 at the top)."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(np.float64) / 255.0


def pixel_at(fig, pixels, ax, x, y):
    """The colour drawn at data point (x, y) of ax."""
    px, py = ax.transData.transform((x, y))
    return pixels[int(round(fig.bbox.height - py)), int(round(px))]


def panels(fig):
    """The heatmap axes (those holding an image), in order."""
    return [ax for ax in fig.axes if ax.images]


@unittest.skipIf(matplotlib is None, "matplotlib (python3-matplotlib) is not installed")
class Bias(unittest.TestCase):
    def setUp(self):
        self.table = ref_alibi(8, 12, 20, causal=True)        # [8, 12, 20], queries last

    def test_grid_of_heads(self):
        fig = attnbias.plot_bias(self.table, heads=[0, 3, 7], title="ALiBi")
        pix = render(fig)
        axes = panels(fig)
        self.assertEqual([ax.get_title() for ax in axes], ["head 0", "head 3", "head 7"])
        self.assertEqual(fig._suptitle.get_text(), "ALiBi")
        for ax in axes:
            self.assertEqual(ax.images[0].get_array().shape, (12, 20))
            self.assertEqual(ax.get_xlabel(), "key position")
        self.assertEqual(axes[0].get_ylabel(), "query position")
        # One colour bar, labelled, shared by the heads.
        bars = [ax for ax in fig.axes if ax.get_ylabel() == "bias"]
        self.assertEqual(len(bars), 1)
        # Square cells: the drawn image is 20 wide for 12 high.
        box = axes[0].images[0].get_window_extent()
        self.assertAlmostEqual(box.width / box.height, 20 / 12, delta=0.03)
        # Query row r is at position 8 + r: the y axis spans 7.5 .. 19.5.
        self.assertEqual(sorted(axes[0].get_ylim()), [7.5, 19.5])
        # Masked cell (query position 8, key 19): grey.  Unmasked cells: the
        # colour scale's colour of their value, on the shared scale.
        im = axes[0].images[0]
        np.testing.assert_allclose(pixel_at(fig, pix, axes[0], 19, 8), GREY, atol=1 / 255)
        finite = self.table[[0, 3, 7]][np.isfinite(self.table[[0, 3, 7]])]
        self.assertEqual((im.norm.vmin, im.norm.vmax), (finite.min(), finite.max()))
        for head, ax in zip((0, 3, 7), axes):
            for r, k in ((11, 0), (5, 3), (11, 19)):
                want = np.array(im.cmap(im.norm(self.table[head, r, k]))[:3])
                np.testing.assert_allclose(pixel_at(fig, pix, ax, k, 8 + r), want, atol=2 / 255,
                                           err_msg="head %d cell %d,%d" % (head, r, k))

    def test_every_head_and_own_scales(self):
        fig = attnbias.plot_bias(self.table, share_scale=False)
        self.assertEqual(len(panels(fig)), 8)
        self.assertEqual(len([ax for ax in fig.axes if ax.get_ylabel() == "bias"]), 8)
        head7 = panels(fig)[7].images[0]
        finite = self.table[7][np.isfinite(self.table[7])]
        self.assertEqual((head7.norm.vmin, head7.norm.vmax), (finite.min(), finite.max()))

    def test_non_square_keeps_its_aspect(self):
        for q_len, k_len in ((2, 64), (64, 3)):
            table = ref_alibi(1, q_len, k_len)[0]
            fig = attnbias.plot_bias(table)
            render(fig)
            box = panels(fig)[0].images[0].get_window_extent()
            self.assertAlmostEqual(box.width / box.height, k_len / q_len,
                                   delta=0.04 * k_len / q_len)

    def test_nan_and_inf_in_magenta(self):
        table = ref_alibi(1, 6, 6)[0]
        table[2, 4] = np.nan
        table[3, 1] = np.inf
        fig = attnbias.plot_bias(table, q_offset=0)
        pix = render(fig)
        ax = panels(fig)[0]
        for k, r in ((4, 2), (1, 3)):
            np.testing.assert_allclose(pixel_at(fig, pix, ax, k, r), [1, 0, 1], atol=1 / 255)
        labels = [t.get_text() for a in fig.axes if a.get_legend() for t in a.get_legend().texts]
        self.assertEqual(labels, ["NaN / +inf"])  # nothing masked here

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            attnbias.plot_bias(self.table, heads=[8])
        with self.assertRaises(ValueError):
            attnbias.plot_bias(np.zeros(5))
        with self.assertRaises(ValueError):
            attnbias.plot_bias({"buckets": self.table})


@unittest.skipIf(matplotlib is None, "matplotlib (python3-matplotlib) is not installed")
class Attention(unittest.TestCase):
    def test_weights(self):
        q, k, v = example12()            # 2 query heads, 3 queries, 4 keys
        _, _, w = ref_attention(q, k, v, causal=True)
        fig = attnbias.plot_attention({"weights": w, "output": None})
        pix = render(fig)
        axes = panels(fig)
        self.assertEqual([ax.get_title() for ax in axes], ["head 0", "head 1"])
        self.assertEqual(axes[0].images[0].get_array().shape, (3, 4))
        self.assertEqual((axes[0].get_xlabel(), axes[0].get_ylabel()),
                         ("key position", "query position"))
        self.assertEqual(len([a for a in fig.axes if a.get_ylabel() == "attention weight"]), 1)
        # Query position 1 (row 0) cannot see keys 2, 3: grey; key 0 is coloured.
        np.testing.assert_allclose(pixel_at(fig, pix, axes[1], 3, 1), GREY, atol=1 / 255)
        self.assertGreater(np.abs(pixel_at(fig, pix, axes[1], 0, 1) - GREY).max(), 0.1)
        labels = [t.get_text() for a in fig.axes if a.get_legend() for t in a.get_legend().texts]
        self.assertEqual(labels, ["weight 0 (masked)"])
        # A log scale, one head, the batch axis chosen.
        fig = attnbias.plot_attention(np.concatenate([w, w]), batch=1, heads=[1], log=True)
        im = panels(fig)[0].images[0]
        self.assertIsInstance(im.norm, mcolors.LogNorm)
        self.assertAlmostEqual(im.norm.vmin, w[0, 1][w[0, 1] > 0].min())
        with self.assertRaises(ValueError):
            attnbias.plot_attention(w, batch=1)


@unittest.skipIf(matplotlib is None, "matplotlib (python3-matplotlib) is not installed")
class Rope(unittest.TestCase):
    def test_tables_and_wavelengths(self):
        def tables(inv):
            ang = np.arange(50)[:, None] * inv[None]
            return {"inv_freq": inv, "cos": np.concatenate([np.cos(ang)] * 2, axis=1),
                    "sin": np.concatenate([np.sin(ang)] * 2, axis=1), "attention_scaling": 1.0}
        plain = ref_inv_freq(16, 10000.0)
        scaled = plain / 4
        fig = attnbias.plot_rope({"plain": tables(plain), "linear x4": tables(scaled)},
                                 which="sin", positions=np.arange(50) + 100)
        render(fig)
        heat = panels(fig)
        self.assertEqual([ax.get_title() for ax in heat], ["plain", "linear x4"])
        for ax in heat:
            self.assertEqual((ax.get_xlabel(), ax.get_ylabel()), ("channel", "position"))
            self.assertEqual(ax.images[0].get_array().shape, (50, 16))
            self.assertEqual(ax.get_yticklabels()[0].get_text(), "100")
        self.assertTrue(any(a.get_ylabel().startswith("sin(") for a in fig.axes))
        waves = [ax for ax in fig.axes if ax.get_title() == "wavelengths"][0]
        self.assertEqual(waves.get_yscale(), "log")
        lines = waves.get_lines()
        np.testing.assert_allclose(lines[0].get_ydata(), 2 * math.pi / plain)
        np.testing.assert_allclose(lines[1].get_ydata(), 2 * math.pi / scaled)
        # One table alone: no legend, still the wavelength panel.
        fig = attnbias.plot_rope(tables(plain))
        self.assertEqual(len(panels(fig)), 1)
        with self.assertRaises(ValueError):
            attnbias.plot_rope(tables(plain), which="tan")


class LazyImport(unittest.TestCase):
    def test_matplotlib_on_first_use_only(self):
        code = ("import sys, attnbias\n"
                "assert 'matplotlib' not in sys.modules, 'imported at once'\n"
                "f = attnbias.plot_bias\n"
                "assert 'matplotlib' in sys.modules\n"
                "assert f.__module__ == 'attnbias.plotting'\n"
                "print('ok')\n")
        env = dict(os.environ, MPLBACKEND="agg")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=120)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "ok"), p.stderr)


if __name__ == "__main__":
    unittest.main()
