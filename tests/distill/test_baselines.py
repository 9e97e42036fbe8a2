"""The obfuscation baselines: DP-Pix and Gaussian blur as pure functions and as `pfd distill` methods."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from pfd.cli import main
from pfd.config import load_recipe
from pfd.release.state_dir import read_proxy_map
from pfd.release.reader import read_release
from pfd.release.lint import lint_release
from pfd.data.sources import open_faces
from pfd.distill.baselines import (
    auto_cell,
    auto_pixels,
    blur_settings,
    dp_pix_settings,
    dp_pix,
    dp_pix_scale,
    gaussian_blur,
    gaussian_kernel,
    laplace,
    pixelate,
)
from pfd.distill.pipeline import distill
from pfd.errors import PfdError
from tests.distill_public import PRIVATE, shared_root, tiny_distill_config, tiny_public


def _block_means_reference(x: torch.Tensor, b: int) -> torch.Tensor:
    """Loop over cells: each (possibly partial) b x b block set to its own mean."""
    out = torch.empty_like(x)
    h, w = x.shape[-2:]
    for i in range(0, h, b):
        for j in range(0, w, b):
            out[..., i : i + b, j : j + b] = x[..., i : i + b, j : j + b].mean(dim=(-2, -1), keepdim=True)
    return out


@pytest.mark.parametrize("b", [1, 4, 7, 16])
def test_pixelate_equals_block_means(b):
    x = torch.rand(2, 3, 20, 20, generator=torch.Generator().manual_seed(b), dtype=torch.float64)
    assert torch.allclose(pixelate(x, b), _block_means_reference(x, b), atol=1e-12)  # 20 % 7, 20 % 16: partial cells


def test_dp_pix_scale_formula_and_partial_cells():
    assert dp_pix_scale(epsilon=0.5, cell=16, pixels=16) == pytest.approx(255 * 16 / (256 * 0.5))  # Fan: 255 m / (b² ε)
    assert dp_pix_scale(epsilon=1, cell=16, pixels=16, channels=3) == pytest.approx(3 * 255 * 16 / 256)
    assert dp_pix_scale(epsilon=1, cell=16, pixels=16, cell_pixels=8) == pytest.approx(255.0)  # all 8 may differ
    assert dp_pix_scale(epsilon=1, cell=16, pixels=4, cell_pixels=32) == pytest.approx(255 * 4 / 32)
    with pytest.raises(PfdError):
        dp_pix_scale(epsilon=0, cell=16, pixels=16)


def test_laplace_sampler_matches_the_distribution():
    s = laplace((200_000,), scale=3.0, generator=torch.Generator().manual_seed(0))
    assert abs(float(s.mean())) < 0.05
    assert float(s.abs().mean()) == pytest.approx(3.0, rel=0.02)  # E|X| = b
    assert float(s.var()) == pytest.approx(2 * 9.0, rel=0.03)  # Var = 2 b²


def test_dp_pix_noise_scale_matches_the_formula_statistically():
    """Mid-grey images: the released cell values minus the true mean are Laplace(255 m / (b² ε))."""
    b, m, eps = 8, 4, 4.0
    scale = 255 * m / (b * b * eps)  # 3.98 in 0-255 units: clipping at ±127.5 is negligible
    x = torch.full((64, 3, 64, 64), 0.5)
    y = dp_pix(x, epsilon=eps, cell=b, pixels=m, generator=torch.Generator().manual_seed(1))
    assert torch.equal(y[:, 0], y[:, 1]) and torch.equal(y[:, 1], y[:, 2])  # greyscale: one draw per cell
    cells = y[:, 0, ::b, ::b].double() * 255.0 - 127.5  # (64, 8, 8): one value per cell
    assert torch.allclose(pixelate(y, b), y, atol=1e-6)  # constant over each cell
    n = cells.numel()  # 4096 draws: E|X| estimate has ~1.6 % relative sd
    assert float(cells.abs().mean()) == pytest.approx(scale, rel=0.06)
    assert float(cells.var()) == pytest.approx(2 * scale**2, rel=0.15)
    assert abs(float(cells.mean())) < 4 * math.sqrt(2) * scale / math.sqrt(n)


def test_dp_pix_colour_images_get_three_times_the_noise():
    b, m, eps = 8, 4, 12.0
    x = torch.stack([torch.full((64, 64), v) for v in (0.3, 0.5, 0.7)])[None].repeat(32, 1, 1, 1)
    y = dp_pix(x, epsilon=eps, cell=b, pixels=m, generator=torch.Generator().manual_seed(2))
    dev = (y[:, :, ::b, ::b].double() - x[:, :, ::b, ::b].double()) * 255.0  # (32, 3, 8, 8)
    assert float(dev.abs().mean()) == pytest.approx(3 * 255 * m / (b * b * eps), rel=0.08)
    assert not torch.equal(y[:, 0] - y[:, 0].mean(), y[:, 1] - y[:, 1].mean())  # independent per channel


def test_dp_pix_is_seeded_clipped_and_large_epsilon_tends_to_pixelation():
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    a = dp_pix(x, epsilon=0.1, cell=8, pixels=16, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, dp_pix(x, epsilon=0.1, cell=8, pixels=16, generator=torch.Generator().manual_seed(5)))
    assert not torch.equal(a, dp_pix(x, epsilon=0.1, cell=8, pixels=16, generator=torch.Generator().manual_seed(6)))
    assert a.min() >= 0 and a.max() <= 1 and ((a == 0) | (a == 1)).any()  # huge noise: clipped
    big = dp_pix(x, epsilon=1e6, cell=8, pixels=16, generator=torch.Generator().manual_seed(5))
    assert torch.allclose(big, pixelate(x, 8), atol=1e-4)


def test_gaussian_blur_removes_high_frequencies_and_keeps_constants():
    k = gaussian_kernel(2.0)
    assert k.numel() == 2 * 6 + 1 and float(k.sum()) == pytest.approx(1.0)
    x = torch.rand(4, 3, 48, 48, generator=torch.Generator().manual_seed(4))
    y = gaussian_blur(x, sigma=3.0)

    def high(z: torch.Tensor) -> float:  # energy above a quarter of the Nyquist band, mean removed
        f = torch.fft.fftshift(torch.fft.fft2(z - z.mean(dim=(-2, -1), keepdim=True)), dim=(-2, -1)).abs() ** 2
        r = torch.hypot(*torch.meshgrid(torch.arange(48) - 24.0, torch.arange(48) - 24.0, indexing="ij"))
        return float(f[..., r > 6].sum())

    # A Gaussian passes frequency f with gain exp(-2π²σ²f²): at f = 6/48 and σ = 3 that is 0.062,
    # i.e. <= 0.4 % of the energy; allow for the replicated borders.
    assert high(y) < 0.01 * high(x)
    assert high(gaussian_blur(x, sigma=0.5)) > high(y)  # more blur, less detail
    c = torch.full((1, 3, 16, 16), 0.37)
    assert torch.allclose(gaussian_blur(c, sigma=5.0), c, atol=1e-6)  # replicate border: no dark frame


def test_defaults_scale_with_the_image_size():
    assert (auto_cell(112), auto_pixels(112)) == (16, 16)
    assert (auto_cell(56), auto_pixels(56)) == (8, 4)  # same grid, same m / b² (same noise)
    from pfd.config import BaselineConfig

    assert blur_settings(BaselineConfig(), 112) == {"sigma": 8.0, "kernel": 49}
    with pytest.raises(PfdError, match="--epsilon"):
        dp_pix_settings(BaselineConfig(epsilon=-1), 32)
    with pytest.raises(PfdError, match="--dp-cell"):
        dp_pix_settings(BaselineConfig(cell=64), 32)


# -- as pfd distill methods ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def public(tmp_path_factory):
    torch.set_num_threads(1)
    return tiny_public(shared_root(tmp_path_factory) / "tiny-public")


def _run(public, root, method, **kw):
    # One fine-tuning epoch: the baselines only need the adapted model to select raw's images.
    return distill(tiny_distill_config(public, root, method=method, ogp={"epochs": 1}, **kw), progress=False)


@pytest.mark.parametrize("method", ["blur", "dp-pix"])
def test_baselines_release_k_transformed_real_images_per_identity(public, tmp_path, method):
    res = _run(public, tmp_path, method, baseline={"epsilon": 2.0, "blur_sigma": 1.5})
    manifest = json.loads((res.release / "manifest.json").read_text())
    assert manifest["method"] == method and manifest["num_classes"] == 6 and set(manifest["images_per_class"].values()) == {2}
    # A baseline links by design: published with --allow-linkable, its manifest records the refusal,
    # which lint reports (issue 54) and nothing else.
    findings = lint_release(res.release, private=open_faces(PRIVATE), state_dir=res.state_dir)
    assert [f.kind for f in findings] == ([] if manifest["audit"]["publishable"] else ["audit-refused"]), findings
    faces, rel, pmap = open_faces(PRIVATE), read_release(res.release), read_proxy_map(res.state_dir)
    idx = torch.load(res.state_dir / "prototypes.pt", weights_only=True)["raw_index"]
    names = [rel.name(i) for i in range(len(rel))]
    labels, sources = [], []
    for k, r in enumerate(pmap["proxies"]):
        src = faces.load(int(idx[pmap["extra"]["prototype_row"][k]]))[None]
        got = rel.load(names.index(r["file"]))
        if method == "blur":
            want = gaussian_blur(src, sigma=1.5)[0]
            assert torch.allclose(got, want, atol=0.5 / 255 + 1e-6)  # the blurred source, quantised
        else:
            assert torch.allclose(pixelate(got[None], auto_cell(32))[0], got, atol=1e-6)  # a mosaic of 5 px cells
            assert not torch.allclose(got, pixelate(src, auto_cell(32))[0], atol=2 / 255)  # noised
        labels.append(int(r["file"].split("/")[0]))
        sources.append(r["source"])
    assert sorted(set(labels)) == list(range(6)) and labels != sources  # arbitrary labels, not the source order
    assert res.summary["baseline"]["method"] == method


def test_dp_pix_release_is_reproducible_and_bad_epsilon_fails_first(public, tmp_path):
    a = _run(public, tmp_path / "a", "dp-pix")
    b = _run(public, tmp_path / "b", "dp-pix")
    files = sorted(p.relative_to(a.release) for p in a.release.rglob("*.png"))
    assert files and all((a.release / f).read_bytes() == (b.release / f).read_bytes() for f in files)
    with pytest.raises(PfdError, match="epsilon"):
        _run(public, tmp_path / "c", "dp-pix", baseline={"epsilon": 0.0})
    assert not (tmp_path / "c").exists()  # refused before anything was written


def test_cli_baseline_flags_reach_the_config(public, tmp_path):
    recipe = tmp_path / "tiny.toml"
    recipe.write_text("[distill.ogp]\nepochs = 1\nmin_steps = 0\nbatch_size = 16\n[distill.rta]\nipc = 2\nbatch_size = 4\n")
    res = CliRunner().invoke(main, [
        "distill", "--recipe", str(recipe), "--public", str(public), "--private", PRIVATE, "--size", "32",
        "--out", str(tmp_path / "release"), "--state-dir", str(tmp_path / "state"), "--no-progress",
        "--method", "dp-pix", "--epsilon", "3", "--dp-cell", "4", "--dp-pixels", "2", "--blur-sigma", "1.5",
        "--seed", "7", "--threads", "1", "--allow-linkable",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    cfg = load_recipe(tmp_path / "state" / "config.toml")["distill"]["baseline"]
    assert cfg == {"epsilon": 3.0, "cell": 4, "pixels": 2, "blur_sigma": 1.5, "seed": 7}
    img = read_release(tmp_path / "release").load(0)
    assert torch.allclose(pixelate(img[None], 4)[0], img, atol=1e-6)  # the 4 px cells were used
    bad = CliRunner().invoke(main, ["distill", "--method", "dp-pix", "--epsilon", "-1", "--out", str(tmp_path / "x"),
                                    "--state-dir", str(tmp_path / "y")])
    assert bad.exit_code != 0 and "epsilon" in bad.output
    assert np.isfinite(json.loads((tmp_path / "state" / "summary.json").read_text())["baseline"]["noise_scale"])
