"""Procedural face renderer behind the built-in synthetic identity set.

An image is a pure function of ``(identity, image rng, domain, size)``: the face is recorded as
PIL polygons and lines in the canonical upright frame (:mod:`pfd.data.synthetic_params`), every
point goes through one vectorised pose warp (in-plane rotation, scale, shift and a yaw/pitch-like
"bump" that moves the features across the head while squashing its far side) and the shapes are
drawn at twice the output size, then box-downsampled. Light, the identity's skin texture, blur,
noise and the domain's sensor model follow on the output-size array. Nothing is drawn per pixel
in Python; per-pixel work is PIL (C) or a few numpy operations.

Private to :mod:`pfd.data.synthetic`; its contract is determinism: the same inputs give the same
uint8 pixels (for a given numpy and Pillow version).
"""

from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from pfd.data.synthetic_params import IdentityParams, Shot, sample_shot

__all__ = ["render_face"]

_GREY = np.array([0.80, 0.80, 0.80])
_RECT = (np.array([-1.0, 1.0, 1.0, 0.8, -0.8, -1.0, -1.0]), np.array([-1.0, -1.0, 0.5, 1.0, 1.0, 0.5, -1.0]))
# unit circle, reused for every ellipse polygon
_CIRC = np.exp(2j * np.pi * np.arange(20) / 20)
_CIRC_X, _CIRC_Y = _CIRC.real.copy(), _CIRC.imag.copy()
_CIRC8_X, _CIRC8_Y = np.cos(np.arange(8) * np.pi / 4), np.sin(np.arange(8) * np.pi / 4)


# --------------------------------------------------------------------------------------------
# drawing helpers


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

    def draw(self, img: Image.Image, sh: "Shot") -> None:
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


def _draw_face(cv: _Scene, ip: IdentityParams, sh: Shot, nir: bool) -> None:
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
    cheek = ip.cheek + 0.05 * max(0.0, 1.5 - age)  # young faces are fuller
    xs = fw * ct * (1 - ip.jaw * low**2) * (1 + cheek * np.exp(-((st - 0.15) / 0.35) ** 2))
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
                cv.line(np.array([x0, x0 + s * 0.06]), np.array([ip.eye_y, ip.eye_y + 1.6 * dy]), shade, w,
                        alpha=0.7 * a)
            cv.line(s * (ip.eye_dx + np.array([-0.7, 0, 0.7]) * ip.eye_w),
                    ip.eye_y + ip.eye_h + np.array([0.03, 0.05, 0.03]), shade, w, alpha=0.6 * a)
    a = min(1.0, max(0.0, (age - 0.9) / 3.0))
    if a > 0:
        ny = ip.eye_y + ip.nose_len
        for s in (-1, 1):
            cv.line(s * np.array([ip.nose_w + 0.04, ip.nose_w + 0.07, ip.mouth_w + 0.04]),
                    np.array([ny - 0.02, ny + 0.06, ip.mouth_y + 0.05]), shade, w * 1.3, alpha=0.7 * a)


def _draw_eyes(cv: _Scene, ip: IdentityParams, sh: Shot, iris, skin) -> None:
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


def _draw_nose(cv: _Scene, ip: IdentityParams, sh: Shot, shade) -> None:
    tip_y = ip.eye_y + ip.nose_len
    tx = 0.1 * sh.yaw  # the tip sticks out: it moves a bit further than the eyes under yaw
    cv.line(np.array([0.04, 0.05 + tx, 0.03 + tx]), np.array([ip.eye_y, tip_y - 0.06, tip_y]), shade, 0.014, alpha=0.6)
    cv.ellipse(tx, tip_y + 0.015, ip.nose_w, 0.035, shade, alpha=0.45)
    for s in (-1, 1):
        cv.ellipse(tx + s * ip.nose_w * 0.55, tip_y + 0.025, ip.nose_w * 0.3, 0.014, (0.15, 0.08, 0.07), alpha=0.8)


def _draw_mouth(cv: _Scene, ip: IdentityParams, sh: Shot, lip, hair_rgb) -> None:
    w, y0 = ip.mouth_w * (1 + 0.08 * sh.smile), ip.mouth_y
    xs = w * _T9
    bump = np.sqrt(np.clip(1 - _T9**2, 0, 1))
    mid = y0 - sh.smile * 0.045 * _T9**2
    o = sh.mouth_open * 0.07 * bump
    upper = mid - o / 2 - ip.lip_t * bump * (1 - 0.3 * np.cos(np.pi * _T9 * 2) ** 2)
    lower = mid + o / 2 + ip.lip_t * 1.25 * bump
    cv.polygon(np.concatenate([xs, xs[::-1]]), np.concatenate([upper, lower[::-1]]), lip)
    if sh.mouth_open > 0.05:
        inside = np.concatenate([mid - o / 2, (mid + o / 2)[::-1]])
        cv.polygon(np.concatenate([xs, xs[::-1]]), inside, (0.18, 0.05, 0.06))
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
    cv.line(np.array([-ip.eye_dx + rx, 0.0, ip.eye_dx - rx]),
            np.array([ip.eye_y - 0.01, ip.eye_y - 0.03, ip.eye_y - 0.01]),
            ip.glasses_rgb, ip.glasses_w)


def _draw_canonical_occluder(cv: _Scene, ip: IdentityParams, sh: Shot) -> None:
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
                   np.array([top, top, ip.face_cy + 0.8 * ip.face_h, ip.face_cy + ip.face_h,
                             ip.face_cy + 0.8 * ip.face_h]), c)


def _draw_image_occluder(img: Image.Image, sh: Shot) -> None:
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


def _pose_forward(x: np.ndarray, y: np.ndarray, sh: Shot) -> tuple[np.ndarray, np.ndarray]:
    """Canonical coordinates -> output coordinates (both in [-1, 1])."""
    bx = _bump(x, sh.yaw, 1.0 - 0.3 * abs(sh.yaw), _YAW_R)
    by = _bump(y, sh.pitch, 1.0 - 0.15 * abs(sh.pitch), _PITCH_R)
    ca, sa = math.cos(sh.rot) * sh.scale, math.sin(sh.rot) * sh.scale
    return ca * bx - sa * by + sh.tx, sa * bx + ca * by + sh.ty


def _pose_inverse(px: np.ndarray, py: np.ndarray, sh: Shot) -> tuple[np.ndarray, np.ndarray]:
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


def _texture(ip: IdentityParams, sh: Shot, size: int) -> np.ndarray:
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
        domain: One of :data:`~pfd.data.synthetic_params.DOMAINS`.
        size: Output side in pixels.

    Returns:
        ``uint8`` array ``(size, size, 3)``, RGB (all three channels equal for ``nir``).
    """
    sh = sample_shot(ip, rng, domain)
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
    x = lut[_CHANNEL, np.asarray(img)]  # (H, W, 3) float32
    if nir:  # NIR sensor: luminance only (red-heavy response)
        x = (x @ np.array([0.5, 0.38, 0.12], dtype=np.float32))[..., None]
    # light: identity texture (darkening) times a directional ramp (NIR: illuminator fall-off)
    r = (np.arange(size, dtype=np.float32) + 0.5) / size * 2 - 1
    if nir:
        ramp = 1.0 - 0.2 * (r[None, :] ** 2 + r[:, None] ** 2)
        ramp = ramp + 0.5 * sh.light_amp * math.cos(sh.light_dir) * r[None, :]
    else:
        ramp = 1.0 + sh.light_amp * (math.cos(sh.light_dir) * r[None, :] + math.sin(sh.light_dir) * r[:, None])
    # the texture's colour tint: one grey weight in NIR
    tint = np.asarray([0.5 + 0.5 * np.mean(ip.tex_tint)] if nir else ip.tex_tint, dtype=np.float32)
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
