"""Procedural face renderer behind the built-in synthetic identity set.

An identity is a frozen bundle of parameters drawn once from ``(seed, gid)`` (face shape, skin
tone, hair, eye/brow/nose/mouth geometry and colours, marks, a low-frequency skin texture, facial
hair, wrinkle layout, age). An image is a pure function of ``(identity, image rng, domain, size)``:
the face is drawn with PIL in a canonical upright frame at twice the output size, warped once to
the output size (in-plane rotation, scale, shift and a yaw/pitch-like "bump" warp that moves the
features across the head while squashing the far side), then lit, blurred, occluded and made
noisy. Nothing is drawn per pixel in Python; the per-pixel work is PIL (C) or a few numpy ops.

Canonical coordinates run over ``[-1, 1]`` in x (right) and y (down); the eyes sit near
``y = -0.1``, the mouth near ``y = 0.4``, the chin near ``y = 0.95``, roughly like an
insightface-aligned crop.

The renderer is private to :mod:`pfd.data.synthetic`; its only contract is determinism: the same
inputs give the same uint8 pixels (for a given numpy and Pillow version).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

__all__ = ["DOMAINS", "IdentityParams", "identity_attributes", "identity_params", "image_rng", "render_face"]

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
_GREY = np.array([0.80, 0.80, 0.80])
_FRAMES = np.array([[0.05, 0.05, 0.05], [0.45, 0.25, 0.1], [0.75, 0.6, 0.2], [0.6, 0.6, 0.65], [0.5, 0.1, 0.1]])
_RECT = (np.array([-1.0, 1.0, 1.0, 0.8, -0.8, -1.0, -1.0]), np.array([-1.0, -1.0, 0.5, 1.0, 1.0, 0.5, -1.0]))

# unit circle, reused for every ellipse polygon
_CIRC = np.exp(2j * np.pi * np.arange(20) / 20)
_CIRC_X, _CIRC_Y = _CIRC.real.copy(), _CIRC.imag.copy()
_CIRC8_X, _CIRC8_Y = np.cos(np.arange(8) * np.pi / 4), np.sin(np.arange(8) * np.pi / 4)


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
class _Shot:
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
class _Profile:
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


_PROFILES: dict[str, _Profile] = {
    "clean": _Profile(),
    "age": _Profile(age_drift=1.1),
    "lowres": _Profile(blur=(0.2, 0.6), noise=(0.02, 0.05)),
    "pose": _Profile(roll=16.0, yaw_range=(0.22, 0.48), pitch=0.12, scale=0.12, shift=0.075),
    "nir": _Profile(light=0.18),
}


def _sample_shot(ip: IdentityParams, rng: np.random.Generator, domain: str) -> _Shot:
    pr = _PROFILES[domain]
    ua = rng.random(40)
    u, z = ua.tolist(), rng.standard_normal(16).tolist()
    if pr.yaw_range is None:
        yaw = float(np.clip(pr.yaw * z[2], -2.5 * pr.yaw, 2.5 * pr.yaw))
    else:
        yaw = (1 if u[0] < 0.5 else -1) * (pr.yaw_range[0] + (pr.yaw_range[1] - pr.yaw_range[0]) * u[1])
    return _Shot(
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


# --------------------------------------------------------------------------------------------
# drawing helpers


def _t(a: np.ndarray) -> tuple[float, float, float]:
    return (float(a[0]), float(a[1]), float(a[2]))


def _u8(v: float) -> int:
    return 0 if v <= 0.0 else 255 if v >= 1.0 else int(v * 255.0 + 0.5)


def _rgb(c, a: float | None = None) -> tuple[int, ...]:
    """Float colour -> PIL fill (optionally with alpha in [0, 1])."""
    return (_u8(c[0]), _u8(c[1]), _u8(c[2])) if a is None else (_u8(c[0]), _u8(c[1]), _u8(c[2]), _u8(a))


def _mix(c1, c2, w: float) -> tuple[float, float, float]:
    return (c1[0] + w * (c2[0] - c1[0]), c1[1] + w * (c2[1] - c1[1]), c1[2] + w * (c2[2] - c1[2]))


def _scale(c, k: float) -> tuple[float, float, float]:
    return (c[0] * k, c[1] * k, c[2] * k)


class _Scene:
    """Records drawing primitives in canonical coordinates; draws them all through one warp.

    Collecting the points of every primitive first lets the whole pose warp (yaw/pitch bump,
    rotation, scale, shift) run as one vectorised numpy call per image instead of one per shape.
    """

    def __init__(self) -> None:
        self.xs: list[np.ndarray] = []
        self.ys: list[np.ndarray] = []
        self.ops: list[tuple[str, int, tuple[int, ...], float]] = []

    def polygon(self, xs, ys, fill, alpha=None) -> None:
        self.xs.append(np.asarray(xs, dtype=np.float64))
        self.ys.append(np.asarray(ys, dtype=np.float64))
        self.ops.append(("p", len(self.xs[-1]), _rgb(fill, alpha), 0.0))

    def line(self, xs, ys, fill, width: float, alpha=None) -> None:
        self.xs.append(np.asarray(xs, dtype=np.float64))
        self.ys.append(np.asarray(ys, dtype=np.float64))
        self.ops.append(("l", len(self.xs[-1]), _rgb(fill, alpha), width))

    def ellipse(self, cx, cy, rx, ry, fill, angle=0.0, alpha=None, small=False) -> None:
        ux, uy = (_CIRC8_X, _CIRC8_Y) if small else (_CIRC_X, _CIRC_Y)
        if angle:
            ca, sa = math.cos(angle), math.sin(angle)
            self.polygon(cx + rx * ux * ca - ry * uy * sa, cy + rx * ux * sa + ry * uy * ca, fill, alpha)
        else:
            self.polygon(cx + rx * ux, cy + ry * uy, fill, alpha)

    def draw(self, img: Image.Image, sh: "_Shot") -> None:
        """Warp every recorded point to pixels of ``img`` and draw the primitives in order."""
        half = img.width / 2.0
        px, py = _pose_forward(np.concatenate(self.xs), np.concatenate(self.ys), sh)
        flat = np.empty(2 * len(px))
        flat[0::2] = (px + 1.0) * half
        flat[1::2] = (py + 1.0) * half
        flat = flat.tolist()
        opaque, blend = ImageDraw.Draw(img), ImageDraw.Draw(img, "RGBA")
        k = 0
        for kind, n, fill, width in self.ops:
            seg = flat[2 * k: 2 * (k + n)]
            k += n
            d = blend if len(fill) == 4 else opaque
            if kind == "p":
                d.polygon(seg, fill=fill)
            else:
                d.line(seg, fill=fill, width=max(1, int(round(width * sh.scale * half))))


_T9 = np.linspace(-1.0, 1.0, 9)
_OUTLINE_T = np.linspace(0, 2 * np.pi, 40, endpoint=False)


def _draw_face(cv: _Scene, ip: IdentityParams, sh: _Shot, nir: bool) -> None:
    """Draw the identity with the shot's expression, age and canonical-frame occluders."""
    skin, hair_rgb, iris, lip = ip.skin, ip.hair_rgb, ip.iris_rgb, ip.lip_rgb
    grey = float(np.clip((sh.age - 2.5) / 3.5, 0.0, 0.85)) * ip.grey_rate
    hair_rgb = _mix(hair_rgb, _GREY, min(grey, 0.9))
    if nir:  # NIR: skin bright with compressed tone differences, dark irises, pale lips, lighter hair
        lum = 0.3 * skin[0] + 0.59 * skin[1] + 0.11 * skin[2]
        skin = (0.78 + 0.25 * (lum - 0.6),) * 3
        iris = (0.12,) * 3
        lip = _scale(skin, 0.9)
        hl = 0.3 * hair_rgb[0] + 0.59 * hair_rgb[1] + 0.11 * hair_rgb[2]
        hair_rgb = (0.25 + 0.7 * hl,) * 3
    cy, fw, fh = ip.face_cy, ip.face_w, ip.face_h
    age = sh.age
    shade = _scale(skin, 0.78)
    # clothing and neck
    cv.polygon(np.array([-1.2, -0.55, 0.55, 1.2, 1.2, -1.2]), np.array([1.25, 0.9, 0.9, 1.25, 1.3, 1.3]), sh.cloth)
    cv.polygon(np.array([-0.27, 0.27, 0.3, -0.3]), np.array([cy + 0.4, cy + 0.4, 1.3, 1.3]), _scale(skin, 0.82))
    # long hair falls behind the face
    top, side = ip.hair_top, ip.hair_side
    if ip.hair == 1:
        hx = fw + side + 0.05
        cv.polygon(np.array([-hx, -hx - 0.06, -0.2, 0.2, hx + 0.06, hx]),
                   np.array([cy - 0.2, ip.hair_len, ip.hair_len - 0.1, ip.hair_len - 0.1, ip.hair_len, cy - 0.2]),
                   _scale(hair_rgb, 0.85))
    # ears
    ey = ip.eye_y + 0.06
    for s in (-1, 1):
        cv.ellipse(s * (fw - 0.01), ey, 0.055, ip.ear_h, _scale(skin, 0.9))
    # face outline: jaw narrows the lower half, cheek widens the middle
    st, ct = np.sin(_OUTLINE_T), np.cos(_OUTLINE_T)
    low = np.clip(st, 0, None)
    xs = fw * ct * (1 - ip.jaw * low**2) * (1 + ip.cheek * np.exp(-((st - 0.15) / 0.35) ** 2))
    cv.polygon(xs, cy + fh * st, skin)
    # cheeks, freckles, moles
    if ip.blush > 0.02:
        for s in (-1, 1):
            cv.ellipse(s * (ip.eye_dx + 0.05), ip.mouth_y - 0.14, 0.12, 0.08, (0.85, 0.35, 0.35), alpha=ip.blush * 0.5)
    fr_c = _scale(skin, 0.72)
    for fx, fy in ip.freckles:
        cv.ellipse(fx, fy, 0.008, 0.008, fr_c, alpha=0.7, small=True)
    mole_c = (0.23, 0.14, 0.10)
    for mx, my, mr in ip.marks:
        if (mx / fw) ** 2 + ((my - cy) / fh) ** 2 < 0.8:
            cv.ellipse(mx, my, mr, mr, mole_c)
    # stubble / beard shadow on the lower face
    if ip.stubble > 0:
        bx = fw * 0.92 * np.array([-1, -0.85, -0.5, 0, 0.5, 0.85, 1])
        by = cy + np.array([0.2, 0.6, 0.85, 0.97, 0.85, 0.6, 0.2]) * fh
        cv.polygon(bx, by, hair_rgb, alpha=ip.stubble)
    _draw_wrinkles(cv, ip, age, shade)
    _draw_eyes(cv, ip, sh, iris, skin)
    _draw_nose(cv, ip, sh, shade)
    _draw_mouth(cv, ip, sh, lip, hair_rgb)
    if ip.glasses:
        _draw_glasses(cv, ip)
    _draw_hair_front(cv, ip, hair_rgb)
    # brows go over the fringe edge (they are drawn after it)
    brow_c = _scale(hair_rgb, 0.6) if ip.hair == 0 else _mix(_scale(hair_rgb, 0.55), (0.2, 0.15, 0.1), 0.3)
    for s in (-1, 1):
        bx0 = s * ip.eye_dx
        by0 = ip.eye_y - ip.eye_h - ip.brow_gap - sh.brow_raise
        xs = bx0 + s * ip.brow_len * np.array([-1.0, 0.0, 1.0])
        ys = by0 + np.array([ip.brow_tilt * ip.brow_len * 0.5, -ip.brow_arch, -ip.brow_tilt * ip.brow_len * 0.5])
        cv.line(xs, ys, brow_c, ip.brow_thick)
    _draw_canonical_occluder(cv, ip, sh)


def _draw_wrinkles(cv: _Scene, ip: IdentityParams, age: float, shade) -> None:
    """Forehead lines, crow's feet, nasolabial folds and eye bags fade in with apparent age."""
    w = 0.012
    for k, y in enumerate(ip.wrinkle_y):
        a = min(1.0, max(0.0, (age - 2.0 - 0.8 * k) / 2.0))
        if a > 0:
            cv.line(0.3 * _T9, y + ip.wrinkle_bend * (1 - _T9**2), shade, w, alpha=0.75 * a)
    a = min(1.0, max(0.0, (age - 2.8) / 2.0))
    if a > 0:
        for s in (-1, 1):
            x0 = s * (ip.eye_dx + ip.eye_w + 0.02)
            for dy in (-0.03, 0.0, 0.03):
                cv.line(np.array([x0, x0 + s * 0.06]), np.array([ip.eye_y, ip.eye_y + 1.6 * dy]), shade, w, alpha=0.7 * a)
            cv.line(s * (ip.eye_dx + np.array([-0.7, 0, 0.7]) * ip.eye_w),
                    ip.eye_y + ip.eye_h + np.array([0.03, 0.05, 0.03]), shade, w, alpha=0.6 * a)
    a = min(1.0, max(0.0, (age - 1.5) / 2.5))
    if a > 0:
        ny = ip.eye_y + ip.nose_len
        for s in (-1, 1):
            cv.line(s * np.array([ip.nose_w + 0.04, ip.nose_w + 0.07, ip.mouth_w + 0.04]),
                    np.array([ny - 0.02, ny + 0.06, ip.mouth_y + 0.05]), shade, w * 1.3, alpha=0.7 * a)


def _draw_eyes(cv: _Scene, ip: IdentityParams, sh: _Shot, iris, skin) -> None:
    h = ip.eye_h * sh.eye_open
    for s in (-1, 1):
        ex, ang = s * ip.eye_dx, s * ip.eye_tilt
        cv.ellipse(ex, ip.eye_y, ip.eye_w * 1.15, ip.eye_h * 1.4, _scale(skin, 0.88), angle=ang)  # socket shadow
        cv.ellipse(ex, ip.eye_y, ip.eye_w, h, (0.95, 0.94, 0.92), angle=ang)
        ir = min(ip.iris_r * ip.eye_h, h)
        ix = ex + sh.gaze * ip.eye_w * 0.4
        cv.ellipse(ix, ip.eye_y, ip.iris_r * ip.eye_h, ir, iris)
        cv.ellipse(ix, ip.eye_y, 0.45 * ip.iris_r * ip.eye_h, min(0.45 * ip.iris_r * ip.eye_h, h), (0.04, 0.03, 0.03))
        ca, sa = math.cos(ang), math.sin(ang)
        xs = ip.eye_w * _T9
        ys = -h * np.sqrt(np.clip(1 - _T9**2, 0, 1))
        cv.line(ex + xs * ca - ys * sa, ip.eye_y + xs * sa + ys * ca, (0.1, 0.07, 0.06), ip.lash)


def _draw_nose(cv: _Scene, ip: IdentityParams, sh: _Shot, shade) -> None:
    tip_y = ip.eye_y + ip.nose_len
    tx = 0.1 * sh.yaw  # the tip sticks out: it moves a bit further than the eyes under yaw
    cv.line(np.array([0.04, 0.05 + tx, 0.03 + tx]), np.array([ip.eye_y, tip_y - 0.06, tip_y]), shade, 0.014, alpha=0.6)
    cv.ellipse(tx, tip_y + 0.015, ip.nose_w, 0.035, shade, alpha=0.45)
    for s in (-1, 1):
        cv.ellipse(tx + s * ip.nose_w * 0.55, tip_y + 0.025, ip.nose_w * 0.3, 0.014, (0.15, 0.08, 0.07), alpha=0.8)


def _draw_mouth(cv: _Scene, ip: IdentityParams, sh: _Shot, lip, hair_rgb) -> None:
    w, y0 = ip.mouth_w * (1 + 0.08 * sh.smile), ip.mouth_y
    xs = w * _T9
    bump = np.sqrt(np.clip(1 - _T9**2, 0, 1))
    mid = y0 - sh.smile * 0.045 * _T9**2
    o = sh.mouth_open * 0.07 * bump
    upper = mid - o / 2 - ip.lip_t * bump * (1 - 0.3 * np.cos(np.pi * _T9 * 2) ** 2)
    lower = mid + o / 2 + ip.lip_t * 1.25 * bump
    cv.polygon(np.concatenate([xs, xs[::-1]]), np.concatenate([upper, lower[::-1]]), lip)
    if sh.mouth_open > 0.05:
        cv.polygon(np.concatenate([xs, xs[::-1]]), np.concatenate([mid - o / 2, (mid + o / 2)[::-1]]), (0.18, 0.05, 0.06))
    else:
        cv.line(xs, mid, _scale(lip, 0.5), 0.008)
    if ip.moustache:
        my = upper - 0.025
        cv.polygon(np.concatenate([xs * 1.1, xs[::-1] * 1.1]), np.concatenate([my - 0.035, my[::-1] + 0.01]),
                   _scale(hair_rgb, 0.8), alpha=0.9 * ip.moustache)


def _draw_hair_front(cv: _Scene, ip: IdentityParams, hair_rgb) -> None:
    """The hair cap: outer arc over the head, inner hairline with a fringe and a parting."""
    fw, cy, top = ip.face_w, ip.face_cy, ip.hair_top
    t = np.linspace(np.pi, 2 * np.pi, 25)
    curl = 1.0 + ip.hair_wave * np.sin(ip.hair_freq * t + ip.fringe_phase)
    ox = (fw + ip.hair_side) * np.cos(t) * curl
    oy = cy - 0.15 + (cy - 0.15 - top) * np.sin(t) * curl
    side_y = cy + ip.hair_len if ip.hair == 0 else cy - 0.1
    hx = np.linspace(fw * 0.98, -fw * 0.98, 15)
    wav = ip.fringe * (0.6 + 0.4 * np.sin(7 * hx + ip.fringe_phase))
    hy = ip.hairline + wav * np.exp(-((hx - ip.parting) / 0.35) ** 2) + 0.25 * (np.abs(hx) / fw) ** 4
    xs = np.concatenate([[-fw - ip.hair_side, -fw - ip.hair_side * 0.5], ox[1:-1], [fw + ip.hair_side * 0.5],
                         [fw + ip.hair_side, fw * 1.0], hx, [-fw * 1.0]])
    ys = np.concatenate([[side_y, cy - 0.15], oy[1:-1], [cy - 0.15], [side_y, side_y], hy, [side_y]])
    cv.polygon(xs, ys, hair_rgb)
    cv.line(np.array([ip.parting, ip.parting * 0.8]), np.array([top + 0.05, ip.hairline - 0.02]),
            _scale(hair_rgb, 0.6), 0.012)


def _draw_glasses(cv: _Scene, ip: IdentityParams) -> None:
    """Persistent spectacles: round or rectangular rims and a bridge."""
    rx, ry = ip.eye_w + 0.045, ip.eye_h + 0.04
    for s in (-1, 1):
        ex = s * ip.eye_dx
        if ip.glasses == 1:
            xs, ys = np.append(_CIRC_X, 1.0), np.append(_CIRC_Y, 0.0)
        else:
            xs, ys = _RECT
        cv.line(ex + rx * xs, ip.eye_y + 0.01 + ry * ys, ip.glasses_rgb, ip.glasses_w)
        cv.line(np.array([ex + s * rx, s * (ip.face_w - 0.02)]), np.array([ip.eye_y - 0.01, ip.eye_y - 0.03]),
                ip.glasses_rgb, ip.glasses_w)
    cv.line(np.array([-ip.eye_dx + rx, 0.0, ip.eye_dx - rx]), np.array([ip.eye_y - 0.01, ip.eye_y - 0.03, ip.eye_y - 0.01]),
            ip.glasses_rgb, ip.glasses_w)


def _draw_canonical_occluder(cv: _Scene, ip: IdentityParams, sh: _Shot) -> None:
    o = sh.occ
    if sh.occluder == "sunglasses":
        c = (0.05 + 0.2 * o[0],) * 3
        for s in (-1, 1):
            cv.ellipse(s * ip.eye_dx, ip.eye_y + 0.01, ip.eye_w + 0.05, ip.eye_h + 0.05, c)
        cv.line(np.array([-ip.eye_dx + ip.eye_w, ip.eye_dx - ip.eye_w]), np.array([ip.eye_y] * 2), c, 0.02)
    elif sh.occluder == "mask":
        c = (0.3 + 0.7 * o[0], 0.3 + 0.7 * o[1], 0.3 + 0.7 * o[2])
        top = ip.eye_y + ip.nose_len - 0.06 * o[3]
        fw = ip.face_w
        cv.polygon(np.array([-fw * 0.95, fw * 0.95, fw * 0.8, 0.0, -fw * 0.8]),
                   np.array([top, top, ip.face_cy + 0.8 * ip.face_h, ip.face_cy + ip.face_h, ip.face_cy + 0.8 * ip.face_h]), c)


def _draw_image_occluder(img: Image.Image, sh: _Shot) -> None:
    """Occluders in the image frame (they do not move with the face): a bar or a patch."""
    o, s = sh.occ, img.width
    d = ImageDraw.Draw(img)
    c = _rgb((o[0], o[1], o[2]))
    if sh.occluder == "bar":
        y0, h = s * (0.15 + 0.6 * o[3]), s * (0.06 + 0.1 * o[4])
        ang = (o[5] - 0.5) * 0.8
        x = np.array([-0.2, 1.2, 1.2, -0.2]) * s
        y = y0 + np.array([0, 0, h, h]) + (x - s / 2) * math.tan(ang)
        d.polygon(np.stack([x, y], 1).ravel().tolist(), fill=c)
    elif sh.occluder == "patch":
        w, h = s * (0.2 + 0.2 * o[3]), s * (0.2 + 0.2 * o[4])
        x0, y0 = (s - w) * o[5], (s - h) * o[6]
        (d.ellipse if o[7] < 0.5 else d.rectangle)((x0, y0, x0 + w, y0 + h), fill=c)


# --------------------------------------------------------------------------------------------
# geometry: canonical frame <-> output image


def _bump(x: np.ndarray, d: float, k: float, r: float) -> np.ndarray:
    """``f(x) = k (x + d r (1 - (x/r)^2))`` inside ``|x| < r``, ``k x`` outside.

    ``f`` shifts the middle of the head by ``d r`` while fixing its edges: the near side is
    stretched and the far side squashed, a cheap stand-in for yaw (or pitch) of a round head.
    Monotone for ``|d| <= 0.5``; ``k`` squashes the whole frame a little.
    """
    if abs(d) < 1e-9:
        return k * x
    return k * np.where(np.abs(x) < r, x + d * r * (1.0 - (x / r) ** 2), x)


def _inv_bump(y: np.ndarray, d: float, k: float, r: float) -> np.ndarray:
    """Inverse of :func:`_bump` (the root of a quadratic that lies inside ``|x| < r``)."""
    x = y / k
    if abs(d) < 1e-9:
        return x
    a = d / r
    disc = np.clip(1.0 - 4.0 * a * (x - d * r), 0.0, None)
    return np.where(np.abs(x) < r, (1.0 - np.sqrt(disc)) / (2.0 * a), x)


_YAW_R, _PITCH_R = 0.95, 1.0


def _pose_forward(x: np.ndarray, y: np.ndarray, sh: _Shot) -> tuple[np.ndarray, np.ndarray]:
    """Canonical coordinates -> output coordinates (both in [-1, 1])."""
    bx = _bump(x, sh.yaw, 1.0 - 0.3 * abs(sh.yaw), _YAW_R)
    by = _bump(y, sh.pitch, 1.0 - 0.15 * abs(sh.pitch), _PITCH_R)
    ca, sa = math.cos(sh.rot) * sh.scale, math.sin(sh.rot) * sh.scale
    return ca * bx - sa * by + sh.tx, sa * bx + ca * by + sh.ty


def _pose_inverse(px: np.ndarray, py: np.ndarray, sh: _Shot) -> tuple[np.ndarray, np.ndarray]:
    """Output coordinates -> canonical coordinates (inverse of :func:`_pose_forward`)."""
    ca, sa = math.cos(sh.rot) / sh.scale, math.sin(sh.rot) / sh.scale
    qx, qy = px - sh.tx, py - sh.ty
    bx, by = ca * qx + sa * qy, -sa * qx + ca * qy
    return (_inv_bump(bx, sh.yaw, 1.0 - 0.3 * abs(sh.yaw), _YAW_R),
            _inv_bump(by, sh.pitch, 1.0 - 0.15 * abs(sh.pitch), _PITCH_R))


_TEX_GRID = 16
_LEVELS = np.arange(256) / 255.0
_CHANNEL = np.arange(3)
_TEX_AXIS = (np.arange(_TEX_GRID) + 0.5) / _TEX_GRID * 2 - 1


def _texture(ip: IdentityParams, sh: _Shot, size: int) -> np.ndarray:
    """The identity's skin texture seen through the pose: ``(size, size)`` darkening in [0, 1].

    Evaluated analytically on a coarse grid of output pixels mapped back to the face, then
    upsampled (it is low-frequency by construction), so it moves with the face.
    """
    gx, gy = np.meshgrid(_TEX_AXIS, _TEX_AXIS)
    cx, cy = _pose_inverse(gx, gy, sh)
    k, ph = ip.tex_k, ip.tex_ph
    wave = np.cos(np.pi * (np.multiply.outer(cx, k[:, 0]) + np.multiply.outer(cy, k[:, 1])) + ph).mean(-1)
    r2 = (cx / ip.face_w) ** 2 + ((cy - ip.face_cy) / ip.face_h) ** 2
    field = ip.tex_amp * (0.5 + 0.5 * wave) * np.clip((1.0 - r2) * 4.0, 0.0, 1.0)
    small = Image.fromarray(field.astype(np.float32), "F")
    return np.asarray(small.resize((size, size), Image.Resampling.BILINEAR))


# --------------------------------------------------------------------------------------------
# the whole pipeline


def render_face(ip: IdentityParams, rng: np.random.Generator, domain: str, size: int) -> np.ndarray:
    """Render one image.

    Args:
        ip: The identity (see :func:`identity_params`).
        rng: The image's own stream (see :func:`image_rng`); consumed.
        domain: One of :data:`DOMAINS`.
        size: Output side in pixels.

    Returns:
        ``uint8`` array ``(size, size, 3)``, RGB (all three channels equal for ``nir``).
    """
    sh = _sample_shot(ip, rng, domain)
    nir = domain == "nir"
    ss = 2 if size <= 160 else 1  # supersampling for anti-aliased edges, cheap at small sizes
    bg = _rgb(sh.bg)
    img = Image.new("RGB", (size * ss, size * ss), bg)
    # background: a soft blob of a second colour, in the image frame
    o = sh.occ
    half = size * ss / 2
    bx, by = (o[8] * 2 - 1 + 0.7 * _CIRC_X + 1) * half, (o[9] * 2 - 1 + 0.9 * _CIRC_Y + 1) * half
    ImageDraw.Draw(img, "RGBA").polygon(np.stack([bx, by], 1).ravel().tolist(), fill=_rgb(sh.bg2, 0.6))
    scene = _Scene()
    _draw_face(scene, ip, sh, nir)
    scene.draw(img, sh)
    if ss > 1:
        img = img.reduce(ss)
    _draw_image_occluder(img, sh)
    if sh.blur > 0.05:
        img = img.filter(ImageFilter.GaussianBlur(sh.blur * size / 112.0))
    # global photometry through one lookup table: gain, gamma and colour cast per channel
    cast = np.ones(3) if nir else np.asarray(sh.cast)
    lut = (sh.gain * cast[:, None] * _LEVELS[None, :] ** sh.gamma).astype(np.float32)  # (3, 256)
    x = lut[_CHANNEL, np.asarray(img)]  # (S, S, 3) float32
    if nir:  # NIR sensor: luminance only (red-heavy response)
        x = (x @ np.array([0.5, 0.38, 0.12], dtype=np.float32))[..., None]
    # light: identity texture (darkening) times a directional ramp (NIR: illuminator fall-off)
    r = (np.arange(size, dtype=np.float32) + 0.5) / size * 2 - 1
    if nir:
        ramp = 1.0 - 0.2 * (r[None, :] ** 2 + r[:, None] ** 2) + 0.5 * sh.light_amp * r[None, :] * math.cos(sh.light_dir)
    else:
        ramp = 1.0 + sh.light_amp * (math.cos(sh.light_dir) * r[None, :] + math.sin(sh.light_dir) * r[:, None])
    tint = np.full((1, 1, 1), 0.5 + 0.5 * np.mean(ip.tex_tint), np.float32) if nir else np.asarray(ip.tex_tint, np.float32)
    x = x * ramp[..., None] * (1.0 - _texture(ip, sh, size)[..., None] * tint)
    x = x + sh.noise * _noise(rng, x.shape)
    if domain == "lowres":
        x = _surveillance(x, rng, size)
    out = np.rint(np.clip(x, 0.0, 1.0) * 255).astype(np.uint8)
    if nir:
        out = np.repeat(out, 3, axis=2)
    return out


def _surveillance(x: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """Low-resolution CCTV: shrink to 16-24 px (at most half the side), JPEG-compress, enlarge, add noise.

    The shrunk size is absolute, like a face that covers 16-24 pixels of a surveillance frame,
    so the loss of detail is stronger at 112 px than at 48 px.
    """
    u = rng.random(2)
    small = min(int(round(16 + 8 * u[0])), size // 2)
    img = Image.fromarray(np.rint(np.clip(x, 0, 1) * 255).astype(np.uint8), "RGB")
    img = img.resize((small, small), Image.Resampling.BOX)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=int(50 + 40 * u[1]))
    img = Image.open(io.BytesIO(buf.getvalue())).convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
    y = np.asarray(img, dtype=np.float32) * np.float32(1 / 255)
    return y + 0.02 * _noise(rng, y.shape)


_NOISE_BANK: np.ndarray | None = None


def _noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard-normal noise of ``shape``: a random window of a fixed bank (5x faster than drawing).

    The bank is a constant (fixed seed), so the result is still a pure function of ``rng``.
    """
    global _NOISE_BANK
    if _NOISE_BANK is None:
        _NOISE_BANK = np.random.default_rng(0x5EED).standard_normal(1 << 21, dtype=np.float32)
    n = int(np.prod(shape))
    if n > len(_NOISE_BANK) // 2:
        return rng.standard_normal(shape, dtype=np.float32)
    start = int(rng.integers(len(_NOISE_BANK) - n))
    return _NOISE_BANK[start:start + n].reshape(shape)
