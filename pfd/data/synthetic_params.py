"""Parameters of the synthetic set: who an identity is, and what varies from image to image.

An identity is a frozen bundle of parameters drawn once from ``(seed, gid)`` (face shape, skin
tone, hair, eye/brow/nose/mouth geometry and colours, marks, a low-frequency skin texture,
spectacles, facial hair, wrinkle layout, age). A :class:`Shot` holds one image's nuisances
(expression, apparent age, pose, background, light, blur, noise, occlusion), drawn from the
image's own random stream with the strengths of its domain's :class:`Profile`.

Canonical face coordinates run over ``[-1, 1]`` in x (right) and y (down); the eyes sit near
``y = -0.1``, the mouth near ``y = 0.4``, the chin near ``y = 0.95``, roughly like an
insightface-aligned crop. Private to :mod:`pfd.data.synthetic`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DOMAINS",
    "TONE_RGB",
    "IdentityParams",
    "Shot",
    "Profile",
    "PROFILES",
    "identity_attributes",
    "identity_params",
    "image_rng",
    "sample_shot",
]

#: Rendering domains, mirroring the PFD paper's scenarios (plus the clean source domain).
DOMAINS: tuple[str, ...] = ("clean", "age", "lowres", "pose", "nir")
_DOMAIN_CODE = {d: k for k, d in enumerate(DOMAINS)}
# Tags keep the identity stream and the image stream of the same (seed, gid) independent.
_TAG_IDENTITY = 0x1D
_TAG_IMAGE = 0x1A

#: Base skin colours of the four ``tone`` classes (light .. dark), RGB in [0, 1].
TONE_RGB = np.array(
    [[0.94, 0.80, 0.70], [0.83, 0.64, 0.50], [0.64, 0.45, 0.32], [0.40, 0.27, 0.19]], dtype=np.float64
)
_DARK_HAIR = np.array([[0.10, 0.08, 0.07], [0.22, 0.14, 0.09], [0.30, 0.20, 0.12], [0.16, 0.13, 0.12]])
_LIGHT_HAIR = np.array([[0.88, 0.75, 0.48], [0.70, 0.52, 0.32], [0.76, 0.40, 0.20], [0.80, 0.78, 0.70]])
_IRIS = np.array([[0.25, 0.15, 0.08], [0.45, 0.30, 0.15], [0.40, 0.45, 0.25], [0.30, 0.50, 0.35],
                  [0.30, 0.45, 0.70], [0.50, 0.55, 0.60]])
_FRAMES = np.array([[0.05, 0.05, 0.05], [0.45, 0.25, 0.1], [0.75, 0.6, 0.2], [0.6, 0.6, 0.65], [0.5, 0.1, 0.1]])


@dataclass(frozen=True)
class IdentityParams:
    """Persistent parameters of one synthetic identity (canonical units, RGB in [0, 1])."""

    tone: int
    hair: int
    age: int
    skin: tuple[float, float, float]
    hair_rgb: tuple[float, float, float]
    iris_rgb: tuple[float, float, float]
    lip_rgb: tuple[float, float, float]
    face_w: float
    face_h: float
    face_cy: float
    jaw: float
    cheek: float
    hairline: float
    hair_top: float
    hair_side: float
    hair_len: float
    hair_wave: float  # amplitude of the curly outline
    hair_freq: float
    parting: float
    fringe: float
    fringe_phase: float
    ear_h: float
    eye_y: float
    eye_dx: float
    eye_w: float
    eye_h: float
    eye_tilt: float
    iris_r: float
    lash: float
    brow_gap: float
    brow_len: float
    brow_thick: float
    brow_tilt: float
    brow_arch: float
    nose_len: float
    nose_w: float
    mouth_y: float
    mouth_w: float
    lip_t: float
    blush: float
    marks: tuple[tuple[float, float, float], ...]  # (x, y, radius) moles
    freckles: tuple[tuple[float, float], ...]
    moustache: float  # 0 = none, else strength
    stubble: float
    grey_rate: float
    wrinkle_y: tuple[float, float, float]
    wrinkle_bend: float
    glasses: int  # 0 none, 1 round, 2 rectangular
    glasses_rgb: tuple[float, float, float]
    glasses_w: float
    tex_k: np.ndarray  # (4, 2) wave vectors of the skin texture (cycles per half-frame)
    tex_ph: np.ndarray  # (4,) phases
    tex_amp: float  # darkening amplitude
    tex_tint: tuple[float, float, float]  # per-channel weight of the darkening (a coloured pattern)


def _identity_rng(seed: int, gid: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, gid, _TAG_IDENTITY]))


def identity_attributes(seed: int, gid: int) -> dict[str, int]:
    """``{"tone", "hair", "age"}`` of identity ``gid`` without drawing the rest (the first draws)."""
    rng = _identity_rng(seed, gid)
    return {"tone": int(rng.integers(4)), "hair": int(rng.integers(2)), "age": int(rng.integers(6))}


def identity_params(seed: int, gid: int) -> IdentityParams:
    """Draw the persistent parameters of global identity ``gid`` under ``seed`` (pure)."""
    rng = _identity_rng(seed, gid)
    # attributes first: identity_attributes() relies on this order
    tone, hair, age = int(rng.integers(4)), int(rng.integers(2)), int(rng.integers(6))
    u = rng.random(64)
    z = rng.standard_normal(16)
    skin = TONE_RGB[tone] * (1.0 + 0.05 * z[0]) + 0.03 * z[1:4]
    hair_rgb = (_DARK_HAIR if hair == 0 else _LIGHT_HAIR)[int(u[0] * 4)] * (0.8 + 0.4 * u[1]) + 0.05 * z[4:7]
    iris_rgb = _IRIS[int(u[2] * len(_IRIS))] * (0.85 + 0.3 * u[3])
    lip_rgb = skin * np.array([0.92, 0.62, 0.62]) * (0.85 + 0.25 * u[4]) + np.array([0.06, 0.0, 0.02])
    face_w, face_h = 0.52 + 0.18 * u[5], 0.78 + 0.2 * u[6]
    # marks: 0-4 moles anywhere on the face, freckles for about a third of identities
    n_marks = int(u[7] * 5)
    mk = rng.random((n_marks, 3))
    marks = tuple((float(-0.42 + 0.84 * a), float(-0.45 + 1.0 * b), float(0.015 + 0.02 * c)) for a, b, c in mk)
    n_fr = int(12 + 20 * u[8]) if u[9] < 0.35 else 0
    fr = rng.random((n_fr, 2))
    freckles = tuple((float(-0.4 + 0.8 * a), float(-0.05 + 0.3 * b)) for a, b in fr)
    # low-frequency identity texture: a few random plane waves over the face
    tex_k = rng.normal(0.0, 2.2, size=(4, 2))
    tex_ph = rng.random(4) * 2 * np.pi
    return IdentityParams(
        tone=tone, hair=hair, age=age,
        skin=_t(np.clip(skin, 0.05, 1.0)), hair_rgb=_t(np.clip(hair_rgb, 0.02, 1.0)),
        iris_rgb=_t(np.clip(iris_rgb, 0.02, 1.0)), lip_rgb=_t(np.clip(lip_rgb, 0.02, 1.0)),
        face_w=face_w, face_h=face_h, face_cy=0.06 + 0.08 * u[11], jaw=0.45 * u[12], cheek=0.12 * u[13],
        hairline=-0.66 + 0.28 * u[14], hair_top=-1.02 + 0.16 * u[15], hair_side=0.04 + 0.16 * u[16],
        hair_wave=0.07 * u[53] ** 2, hair_freq=6.0 + 8.0 * u[54],
        hair_len=(0.75 + 0.5 * u[17]) if hair == 1 else (-0.05 + 0.15 * u[17]),
        parting=-0.35 + 0.7 * u[18], fringe=0.18 * u[19] + (0.08 if hair == 1 else 0.0), fringe_phase=2 * np.pi * u[20],
        ear_h=0.08 + 0.08 * u[21],
        eye_y=-0.2 + 0.16 * u[22], eye_dx=0.2 + 0.12 * u[23], eye_w=0.095 + 0.05 * u[24],
        eye_h=0.04 + 0.025 * u[25], eye_tilt=-0.12 + 0.24 * u[26], iris_r=0.55 + 0.25 * u[27],
        lash=0.008 + 0.012 * u[28],
        brow_gap=0.07 + 0.07 * u[29], brow_len=0.08 + 0.08 * u[30], brow_thick=0.015 + 0.03 * u[31],
        brow_tilt=-0.25 + 0.5 * u[32], brow_arch=0.035 * u[33],
        nose_len=0.15 + 0.15 * u[34], nose_w=0.05 + 0.07 * u[35],
        mouth_y=0.32 + 0.16 * u[36], mouth_w=0.12 + 0.14 * u[37], lip_t=0.02 + 0.03 * u[38],
        blush=0.3 * u[39] ** 2, marks=marks, freckles=freckles,
        moustache=(0.5 + 0.5 * u[41]) if u[40] < 0.2 else 0.0,
        stubble=(0.15 + 0.25 * u[43]) if u[42] < 0.25 else 0.0,
        grey_rate=0.5 + 0.6 * u[44],
        wrinkle_y=(float(-0.5 + 0.08 * u[45]), float(-0.42 + 0.06 * u[46]), float(-0.35 + 0.05 * u[47])),
        wrinkle_bend=-0.03 + 0.06 * u[48],
        glasses=(1 + int(u[50] * 2)) if u[49] < 0.25 else 0, glasses_rgb=_t(_FRAMES[int(u[51] * len(_FRAMES))]),
        glasses_w=0.012 + 0.016 * u[52],
        tex_k=tex_k, tex_ph=tex_ph, tex_amp=0.12 + 0.13 * u[10],
        tex_tint=_t(np.clip(1.0 + 0.35 * z[7:10], 0.3, 1.7)),
    )


def image_rng(seed: int, gid: int, index: int, domain: str) -> np.random.Generator:
    """The random stream of image ``index`` of identity ``gid`` in ``domain`` (pure)."""
    return np.random.default_rng(np.random.SeedSequence([seed, gid, index, _DOMAIN_CODE[domain], _TAG_IMAGE]))


# --------------------------------------------------------------------------------------------
# per-image nuisance parameters


@dataclass
class Shot:
    """Per-image nuisances (canonical units, radians, pixels at output size)."""

    age: float
    smile: float
    mouth_open: float
    eye_open: float
    gaze: float
    brow_raise: float
    rot: float
    yaw: float
    pitch: float
    scale: float
    tx: float
    ty: float
    bg: tuple[float, float, float]
    bg2: tuple[float, float, float]
    cloth: tuple[float, float, float]
    light_dir: float
    light_amp: float
    gain: float
    gamma: float
    cast: tuple[float, float, float]
    blur: float
    noise: float
    occluder: str
    occ: tuple[float, ...]


_OCCLUDERS = ("sunglasses", "mask", "bar", "patch")


@dataclass(frozen=True)
class Profile:
    """Nuisance strengths of a domain (standard deviations unless noted)."""

    age_drift: float = 0.15  # apparent-age bins
    roll: float = 7.0  # degrees
    yaw: float = 0.13  # bump shift (0.5 = profile); "pose" draws |yaw| uniformly from yaw_range
    yaw_range: tuple[float, float] | None = None
    pitch: float = 0.06
    scale: float = 0.07  # log-scale
    shift: float = 0.05  # half-frame units
    occlusion: float = 0.1  # probability
    light: float = 0.2  # max directional ramp amplitude
    gain: float = 0.07  # log-gain
    gamma: float = 0.06  # log-gamma
    cast: float = 0.035  # max log colour cast per channel
    blur: tuple[float, float] = (0.0, 0.7)  # sigma at 112 px: lo + (hi - lo) u^2
    noise: tuple[float, float] = (0.005, 0.025)  # sigma range


PROFILES: dict[str, Profile] = {
    "clean": Profile(),
    "age": Profile(age_drift=1.1),
    "lowres": Profile(blur=(0.2, 0.6), noise=(0.02, 0.05)),
    "pose": Profile(roll=16.0, yaw_range=(0.22, 0.48), pitch=0.12, scale=0.12, shift=0.075),
    "nir": Profile(light=0.18),
}


def sample_shot(ip: IdentityParams, rng: np.random.Generator, domain: str) -> Shot:
    pr = PROFILES[domain]
    ua = rng.random(40)
    u, z = ua.tolist(), rng.standard_normal(16).tolist()
    if pr.yaw_range is None:
        yaw = float(np.clip(pr.yaw * z[2], -2.5 * pr.yaw, 2.5 * pr.yaw))
    else:
        yaw = (1 if u[0] < 0.5 else -1) * (pr.yaw_range[0] + (pr.yaw_range[1] - pr.yaw_range[0]) * u[1])
    return Shot(
        age=float(np.clip(ip.age + 0.5 + pr.age_drift * z[0], 0.0, 6.0)),
        smile=float(np.clip(0.5 * z[11], -1.2, 1.2)),
        mouth_open=float(np.clip(0.3 * z[12], 0.0, 0.9)), eye_open=0.15 if u[13] < 0.04 else 0.7 + 0.4 * u[14],
        gaze=0.25 * (2 * u[15] - 1), brow_raise=0.015 * z[13],
        rot=math.radians(pr.roll * z[1]), yaw=yaw, pitch=float(np.clip(pr.pitch * z[3], -2 * pr.pitch, 2 * pr.pitch)),
        scale=math.exp(pr.scale * z[4]), tx=pr.shift * z[5], ty=pr.shift * z[6],
        bg=_t(0.1 + 0.8 * ua[4:7]), bg2=_t(np.clip(0.1 + 0.8 * ua[4:7] + 0.25 * np.array(z[7:10]), 0, 1)),
        cloth=_t(0.05 + 0.9 * ua[7:10]), light_dir=2 * math.pi * u[16], light_amp=pr.light * u[10],
        gain=math.exp(pr.gain * z[14]), gamma=math.exp(pr.gamma * z[15]),
        cast=_t(np.exp(pr.cast * (2 * ua[17:20] - 1))),
        blur=pr.blur[0] + (pr.blur[1] - pr.blur[0]) * u[12] ** 2,
        noise=pr.noise[0] + (pr.noise[1] - pr.noise[0]) * u[11],
        occluder=_OCCLUDERS[int(u[3] * 4)] if u[2] < pr.occlusion else "", occ=tuple(u[20:30]),
    )


def _t(a: np.ndarray) -> tuple[float, float, float]:
    return (float(a[0]), float(a[1]), float(a[2]))

