"""The built-in synthetic identity set: purity, splits, attributes, domains, difficulty, specs, CLI."""

from __future__ import annotations

import csv
import pickle
from collections import Counter

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from pfd.cli import main
from pfd.data.faceset import TensorFaces
from pfd.data.synthetic import (
    ATTRIBUTES,
    SPLITS,
    SyntheticFaces,
    open_synthetic,
    parse_synthetic_spec,
    read_attributes,
    write_synthetic,
)
from pfd.data.synthetic_params import identity_params, image_rng, sample_shot
from pfd.errors import PfdError

S = 32  # small images keep the whole file at a few seconds


def _stack(faces, indices=None) -> np.ndarray:
    """uint8 images (n, S, S, 3)."""
    idx = range(len(faces)) if indices is None else indices
    return np.stack([faces.render(i) for i in idx])


# -- determinism ----------------------------------------------------------------------------------


def test_same_pixels_in_any_order_and_in_a_fresh_object():
    faces = SyntheticFaces("private", identities=3, images_per_identity=3, size=S)
    forward = _stack(faces)
    backward = _stack(faces, range(len(faces) - 1, -1, -1))[::-1]
    fresh = _stack(SyntheticFaces("private", identities=3, images_per_identity=3, size=S))
    np.testing.assert_array_equal(forward, backward)
    np.testing.assert_array_equal(forward, fresh)
    np.testing.assert_array_equal(faces.render(4), faces.render(4))
    assert len({forward[i].tobytes() for i in range(len(forward))}) == len(forward)  # no two images alike


def test_fewer_identities_or_images_are_a_prefix_of_more():
    small = SyntheticFaces("test", identities=2, images_per_identity=2, size=S, domain="pose")
    big = SyntheticFaces("test", identities=4, images_per_identity=3, size=S, domain="pose")
    for label in range(2):
        for k in range(2):
            np.testing.assert_array_equal(small.render(2 * label + k), big.render(3 * label + k))
            assert small.name(2 * label + k) == big.name(3 * label + k)
    assert big.identities[:2] == small.identities
    assert {n: big.attributes[n] for n in small.identities} == small.attributes


def test_pickled_copy_renders_the_same_pixels():
    # DataLoader workers get a pickled copy; it must render identically.
    faces = SyntheticFaces("public", identities=2, images_per_identity=2, size=S, domain="age")
    copy = pickle.loads(pickle.dumps(faces))
    for i in range(len(faces)):
        np.testing.assert_array_equal(faces.render(i), copy.render(i))


def test_seed_domain_and_size_change_the_pixels():
    base = SyntheticFaces("private", identities=1, images_per_identity=1, size=S).render(0)
    other_seed = SyntheticFaces("private", identities=1, images_per_identity=1, size=S, seed=1)
    other_domain = SyntheticFaces("private", identities=1, images_per_identity=1, size=S, domain="age")
    assert not np.array_equal(base, other_seed.render(0))
    assert not np.array_equal(base, other_domain.render(0))
    assert SyntheticFaces("private", identities=1, images_per_identity=1, size=48).render(0).shape == (48, 48, 3)
    assert other_seed.identities == ["syn-s1-private-0000"]  # another population, another name


def test_load_is_the_uint8_render_divided_by_255():
    faces = SyntheticFaces("private", identities=2, images_per_identity=2, size=S)
    x, label = faces[3]
    assert x.dtype == torch.float32 and x.shape == (3, S, S) and label == 1
    u8 = faces.render(3)
    assert torch.equal(x, torch.from_numpy(u8).permute(2, 0, 1).float() / 255)
    assert torch.equal(torch.round(x * 255), x * 255 // 1)  # already quantised: k / 255 exactly
    np.testing.assert_array_equal(faces.load(-1).numpy(), faces.load(len(faces) - 1).numpy())
    with pytest.raises(IndexError):
        faces.load(len(faces))


# -- identities, splits, attributes -------------------------------------------------------------


def test_labels_names_and_defaults():
    faces = SyntheticFaces("private", identities=3, images_per_identity=2, size=S)
    np.testing.assert_array_equal(faces.labels, [0, 0, 1, 1, 2, 2])
    assert faces.identities == ["syn-private-0000", "syn-private-0001", "syn-private-0002"]
    assert faces.names[3] == "syn-private-0001/0001.png"
    assert faces.num_classes == 3 and faces.size == S
    for split, (_, n, m) in SPLITS.items():
        d = SyntheticFaces(split, size=S)
        assert (d.num_classes, d.images_per_identity, len(d)) == (n, m, n * m)


def test_splits_have_disjoint_identities():
    sets = {s: SyntheticFaces(s, identities=50, images_per_identity=1, size=S) for s in SPLITS}
    gids = [set(f.gids.tolist()) for f in sets.values()]
    names = [set(f.identities) for f in sets.values()]
    for a in range(3):
        for b in range(a + 1, 3):
            assert not gids[a] & gids[b] and not names[a] & names[b]
    # and they really are other people: first identity of each split renders differently
    firsts = [f.render(0) for f in sets.values()]
    assert not np.array_equal(firsts[0], firsts[1]) and not np.array_equal(firsts[1], firsts[2])


def test_attributes_in_range_roughly_balanced_and_match_the_renderer():
    faces = SyntheticFaces("public", identities=600, images_per_identity=1, size=S)
    attrs = faces.attributes
    assert list(attrs) == faces.identities
    for key, classes in ATTRIBUTES.items():
        counts = Counter(a[key] for a in attrs.values())
        assert set(counts) == set(range(classes)), key
        expected = len(attrs) / classes
        assert all(0.7 * expected < c < 1.3 * expected for c in counts.values()), (key, counts)
    for label in (0, 7, 123):
        ip = identity_params(0, int(faces.gids[label]))
        assert attrs[faces.identities[label]] == {"tone": ip.tone, "hair": ip.hair, "age": ip.age}


def test_tone_and_hair_are_visible_in_the_pixels():
    # Attribute recovery must be possible: skin gets darker with tone, hair class 1 is lighter.
    faces = SyntheticFaces("public", identities=40, images_per_identity=3, size=S)
    x = _stack(faces).astype(np.float32).mean(-1) / 255  # luminance (n, S, S)
    per_id = x.reshape(40, 3, S, S).mean(1)
    cheeks = per_id[:, int(0.55 * S):int(0.65 * S), int(0.3 * S):int(0.7 * S)].mean((1, 2))
    crown = per_id[:, int(0.03 * S):int(0.12 * S), int(0.35 * S):int(0.65 * S)].mean((1, 2))
    tone = np.array([faces.attributes[n]["tone"] for n in faces.identities])
    hair = np.array([faces.attributes[n]["hair"] for n in faces.identities])
    tone_means = [cheeks[tone == t].mean() for t in range(4)]
    assert tone_means[0] > tone_means[1] > tone_means[3] and tone_means[0] - tone_means[3] > 0.2
    assert crown[hair == 1].mean() > crown[hair == 0].mean() + 0.06


# -- domains --------------------------------------------------------------------------------------


def _domain_stack(domain: str) -> np.ndarray:
    faces = SyntheticFaces("test", identities=8, images_per_identity=4, size=S, domain=domain)
    return _stack(faces).astype(np.float32) / 255


def test_nir_is_greyscale_and_the_others_are_colour():
    nir = _domain_stack("nir")
    assert np.array_equal(nir[..., 0], nir[..., 1]) and np.array_equal(nir[..., 1], nir[..., 2])
    clean = _domain_stack("clean")
    assert np.abs(clean[..., 0] - clean[..., 2]).mean() > 0.05


def test_lowres_has_less_high_frequency_energy_than_clean():
    def high_frequency_share(x):
        # share of the luminance power spectrum above half the Nyquist frequency
        g = x.mean(-1)
        power = np.abs(np.fft.fft2(g - g.mean((1, 2), keepdims=True))) ** 2
        f = np.abs(np.fft.fftfreq(S) * S)
        high = np.hypot(f[:, None], f[None, :]) >= S / 4
        return (power[:, high].sum(1) / power.sum((1, 2))).mean()

    assert high_frequency_share(_domain_stack("lowres")) < 0.5 * high_frequency_share(_domain_stack("clean"))


def test_pose_faces_are_less_symmetric_than_clean_faces():
    def asymmetry(x):
        c = x[:, S // 4: 3 * S // 4, S // 4: 3 * S // 4]
        return np.abs(c - c[:, :, ::-1]).mean()

    assert asymmetry(_domain_stack("pose")) > 1.15 * asymmetry(_domain_stack("clean"))


def test_age_domain_drifts_apparent_age_and_pose_domain_turns_heads():
    ip = identity_params(0, 5)
    shots = {d: [sample_shot(ip, image_rng(0, 5, i, d), d) for i in range(200)] for d in ("clean", "age", "pose")}
    ages = {d: np.std([s.age for s in v]) for d, v in shots.items()}
    yaws = {d: np.mean([abs(s.yaw) for s in v]) for d, v in shots.items()}
    assert ages["age"] > 4 * ages["clean"]
    assert yaws["pose"] > 2.5 * yaws["clean"]


# -- difficulty -----------------------------------------------------------------------------------


def _normalised_pixels(faces) -> np.ndarray:
    x = _stack(faces).astype(np.float32).reshape(len(faces), -1)
    x -= x.mean(1, keepdims=True)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_raw_pixel_nearest_neighbour_is_far_from_perfect_but_above_chance():
    n_ids, per = 20, 6
    faces = SyntheticFaces("test", identities=n_ids, images_per_identity=per, size=S)
    x, y = _normalised_pixels(faces), faces.labels
    gallery = np.arange(len(y)) % per < per // 2
    pred = y[gallery][np.argmax(x[~gallery] @ x[gallery].T, axis=1)]
    top1 = (pred == y[~gallery]).mean()
    assert 2.0 / n_ids < top1 < 0.6, top1


def test_a_simple_fixed_feature_recognises_identities_well_above_chance():
    # 8x8 colour thumbnails + a ridge-regression classifier: identity signal is there (chance 1/20)
    n_ids, per = 20, 12
    faces = SyntheticFaces("test", identities=n_ids, images_per_identity=per, size=S)
    x = _stack(faces).astype(np.float64) / 255
    thumbs = x.reshape(len(x), 8, S // 8, 8, S // 8, 3).mean((2, 4)).reshape(len(x), -1)
    thumbs = np.hstack([thumbs - thumbs.mean(0), np.ones((len(x), 1))])
    train, y = np.arange(len(x)) % per < 8, faces.labels
    onehot = np.eye(n_ids)[y[train]]
    w = np.linalg.solve(thumbs[train].T @ thumbs[train] + 1.0 * np.eye(thumbs.shape[1]), thumbs[train].T @ onehot)
    accuracy = (np.argmax(thumbs[~train] @ w, axis=1) == y[~train]).mean()
    assert accuracy > 5.0 / n_ids, accuracy


# -- spec strings ---------------------------------------------------------------------------------


def test_spec_parsing():
    assert parse_synthetic_spec("synthetic:private,ids=20,imgs=12,domain=lowres") == {
        "split": "private", "identities": 20, "images_per_identity": 12, "domain": "lowres"}
    assert parse_synthetic_spec("synthetic") == {"split": "private"}
    assert parse_synthetic_spec("synthetic:ids=5") == {"split": "private", "identities": 5}
    assert parse_synthetic_spec(" synthetic:test , seed=3 ,size=48 ") == {"split": "test", "seed": 3, "size": 48}
    faces = open_synthetic("synthetic:public,ids=3,imgs=2,domain=nir,seed=2,size=32")
    assert (faces.split, faces.num_classes, faces.images_per_identity, faces.domain, faces.seed, faces.size) == (
        "public", 3, 2, "nir", 2, 32)
    again = open_synthetic(faces.spec())
    np.testing.assert_array_equal(again.render(5), faces.render(5))


@pytest.mark.parametrize(
    "spec, match",
    [
        ("synthetic:privat", r"unknown split 'privat'; use one of public, private, test"),
        ("synthetic:private,idz=3", r"unknown key 'idz'; valid keys: ids, imgs, domain, seed, size"),
        ("synthetic:private,ids=three", r"ids='three' is not an integer"),
        ("synthetic:private,ids=0", r"ids=0 is invalid; use an integer from 1"),
        ("synthetic:private,domain=ir", r"domain='ir' is unknown; use one of clean, age, lowres, pose, nir"),
        ("synthetic:private,ids=3,ids=4", r"key 'ids' given twice"),
        ("synthetic:private,lowres", r"'lowres' is not key=value"),
        ("synthetic:test,seed=-1", r"seed=-1 is invalid"),
        ("synthetic:test,size=8", r"size=8 is invalid; use an integer from 16 to 1024"),
        ("synth:private", r"not a synthetic spec"),
    ],
)
def test_bad_specs_raise_one_line_errors(spec, match):
    with pytest.raises(PfdError, match=match) as err:
        open_synthetic(spec)
    assert "\n" not in str(err.value)


def test_bad_constructor_arguments_raise():
    with pytest.raises(PfdError, match="unknown domain 'sketch'"):
        SyntheticFaces("private", domain="sketch")
    with pytest.raises(PfdError, match="imgs=0 is invalid"):
        SyntheticFaces("private", images_per_identity=0)
    with pytest.raises(PfdError, match="ids=2.5 is invalid"):
        SyntheticFaces("private", identities=2.5)  # type: ignore[arg-type]


def test_size_rule_spec_is_the_drawn_size_argument_is_the_output_size():
    both = open_synthetic("synthetic:test,ids=1,imgs=1,size=48", size=32)
    assert (both.render_size, both.size) == (48, 32)
    drawn = open_synthetic("synthetic:test,ids=1,imgs=1,size=48").render(0)
    expected = np.asarray(Image.fromarray(drawn).resize((32, 32), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(both.render(0), expected)
    assert both.load(0).shape == (3, 32, 32)
    arg_only = open_synthetic("synthetic:test,ids=1,imgs=1", size=40)
    assert (arg_only.render_size, arg_only.size) == (40, 40)
    assert open_synthetic("synthetic:test,ids=1,imgs=1").size == 112


# -- writing and the CLI --------------------------------------------------------------------------


def test_cli_synth_writes_a_folder_that_reads_back_identically_pil(tmp_path):
    # Reads the PNGs with PIL directly; the lead may switch this to pfd.data.faces.FaceFolder.
    out = tmp_path / "faces"
    result = CliRunner().invoke(main, ["synth", "--out", str(out), "--split", "private", "--ids", "3",
                                       "--imgs", "2", "--domain", "lowres", "--size", str(S)])
    assert result.exit_code == 0, result.output
    assert "wrote 6 images of 3 identities" in result.output and result.output.count("\n") == 1
    faces = SyntheticFaces("private", identities=3, images_per_identity=2, domain="lowres", size=S)
    pngs = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.png"))
    assert pngs == sorted(faces.names)
    for i, name in enumerate(faces.names):
        with Image.open(out / name) as img:
            assert img.mode == "RGB"
            arr = np.asarray(img)
        np.testing.assert_array_equal(arr, faces.render(i))
        assert torch.equal(torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div_(255.0), faces.load(i))
    with open(out / "attributes.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["identity", "tone", "hair", "age"] and len(rows) == 4
    assert read_attributes(out / "attributes.csv") == faces.attributes
    assert not list(out.rglob("*.tmp"))  # atomic writes leave no temporaries


def test_cli_synth_refuses_a_non_empty_folder_unless_forced(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    args = ["synth", "--out", str(tmp_path), "--ids", "1", "--imgs", "1", "--size", str(S)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "folder is not empty" in result.output and "--force" in result.output
    assert CliRunner().invoke(main, args + ["--force"]).exit_code == 0
    assert (tmp_path / "syn-private-0000" / "0000.png").is_file() and (tmp_path / "keep.txt").is_file()


def test_write_synthetic_quantises_any_faceset(tmp_path):
    images = torch.rand(2, 3, 8, 8)
    faces = TensorFaces(images, [0, 1], identities=["a", "b"], attributes={"a": {"tone": 1}, "b": {"tone": 2}})
    write_synthetic(tmp_path / "w", faces)
    back = np.asarray(Image.open(tmp_path / "w" / "b" / "1.png"))
    np.testing.assert_array_equal(back, np.rint(images[1].permute(1, 2, 0).numpy() * 255).astype(np.uint8))
    assert read_attributes(tmp_path / "w" / "attributes.csv") == {"a": {"tone": 1}, "b": {"tone": 2}}
    with pytest.raises(PfdError, match="not a folder"):
        write_synthetic(tmp_path / "w" / "attributes.csv", faces)


def test_read_attributes_errors(tmp_path):
    with pytest.raises(PfdError, match="attributes file not found"):
        read_attributes(tmp_path / "none.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("identity,tone\nalice,dark\n")
    with pytest.raises(PfdError, match=r"bad.csv:2: attribute values must be integers"):
        read_attributes(bad)
