"""Draw docs/img/synthetic.png: a few synthetic identities and one row per domain.

Usage::

    python docs/make_synthetic_figure.py [--out docs/img/synthetic.png] [--tile 64]

Rows 1-5: five ``synthetic:public`` identities (clean domain), eight images each; the row label
gives the identity's attributes. Rows 6-9: the first identity in the ``age``, ``lowres``,
``pose`` and ``nir`` domains. Deterministic: re-running gives the same file.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pfd.data.synthetic import SyntheticFaces  # noqa: E402

LABEL_W = 118


def build(tile: int, columns: int = 8, identities: int = 5) -> Image.Image:
    rows: list[tuple[str, np.ndarray]] = []
    # drawn at the default 112 px and shown at ``tile`` px (what open_synthetic(spec, size=tile) does)
    clean = SyntheticFaces("public", identities=identities, images_per_identity=columns, size=tile, render_size=112)
    for label, name in enumerate(clean.identities):
        a = clean.attributes[name]
        strip = np.concatenate([clean.render(label * columns + k) for k in range(columns)], axis=1)
        rows.append((f"{name[4:]}\ntone {a['tone']} hair {a['hair']} age {a['age']}", strip))
    for domain in ("age", "lowres", "pose", "nir"):
        faces = SyntheticFaces("public", identities=1, images_per_identity=columns, size=tile, domain=domain,
                               render_size=112)
        strip = np.concatenate([faces.render(k) for k in range(columns)], axis=1)
        rows.append((f"{clean.identities[0][4:]}\ndomain {domain}", strip))
    canvas = Image.new("RGB", (LABEL_W + columns * tile, len(rows) * tile + 4 * (len(rows) > identities)), "white")
    draw = ImageDraw.Draw(canvas)
    y = 0
    for r, (text, strip) in enumerate(rows):
        if r == identities:
            y += 4  # a gap between the identity block and the domain block
        canvas.paste(Image.fromarray(strip), (LABEL_W, y))
        draw.multiline_text((4, y + tile // 2 - 12), text, fill="black", spacing=2)
        y += tile
    return canvas


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "img" / "synthetic.png"))
    p.add_argument("--tile", type=int, default=64)
    a = p.parse_args()
    # a 256-colour palette keeps the file small (< 300 KB); sensor noise does not compress otherwise
    img = build(a.tile).quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buf.getvalue())
    print(f"wrote {out} ({img.width}x{img.height}, {len(buf.getvalue()) / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
