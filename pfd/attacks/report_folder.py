"""The folder an audit writes its report into: pfd's own or new, and one writer at a time.

``pfd attack --report DIR`` (and ``attack mia`` / ``attack dataset``) used to write into any folder:
a foreign ``report.md`` was silently replaced, and two audits started together on one folder both
exited 0, the first printing the path of a report the second had written. :func:`report_folder`
claims the folder for the whole audit, before any work:

* a folder holding anything pfd's audits do not write (:data:`REPORT_ENTRIES`), or a ``report.md``
  or ``report.html`` (a card's ``card.md`` / ``card.html``) without pfd's JSON beside it, is refused
  untouched;
* an exclusive ``flock`` on ``DIR/.pfd-report-lock`` (dropped by the kernel when the process ends,
  so never stale) refuses a second audit while one runs, naming its pid;
* the checks run again once the lock is held.

A folder that holds an earlier pfd report is reused: rerunning an audit replaces its report.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterator

from pfd.errors import PfdError
from pfd.io import PidLock, path_within

__all__ = ["REPORT_ENTRIES", "LOCK_NAME", "check_report_folder", "report_folder"]

LOCK_NAME = ".pfd-report-lock"
#: Everything pfd's audits write into a report folder.
REPORT_ENTRIES = frozenset({
    "report.json", "report.md", "matches.png", "membership_roc.png", "membership_density.png", "membership.json",
    "dataset.json", "downstream", "report.html", LOCK_NAME,
})  # fmt: skip

#: A page pfd writes -> the JSON it writes beside it: a page without pfd's JSON is someone else's.
_PAGES = {"report.md": "report.json", "report.html": "report.json", "card.md": "card.json", "card.html": "card.json"}


def _is_pfd_report(path: Path) -> bool:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and (isinstance(doc.get("summary"), list) or doc.get("format") == "pfd-card")


def check_report_folder(folder: str | os.PathLike, option: str = "--report") -> None:
    """The read-only checks of :func:`report_folder` (an existing file, files pfd did not write), without claiming."""
    _check(Path(folder).expanduser(), option)


def _check(folder: Path, option: str, entries: frozenset[str] = REPORT_ENTRIES, what: str = "pfd attack") -> None:
    if folder.exists() and not folder.is_dir():
        raise PfdError(f"{option} {folder}: is an existing file; {option} names the folder to write into")
    if not folder.is_dir():
        return
    names = {p.name for p in folder.iterdir()}
    foreign = sorted(names - entries)
    for page, doc in _PAGES.items():
        if page in names and page in entries and not _is_pfd_report(folder / doc):
            foreign = sorted({*foreign, page})
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" (+{len(foreign) - 3} more)" if len(foreign) > 3 else "")
        raise PfdError(f"{folder}: holds files {what} did not write ({shown}); it is left untouched: "
                       f"choose an empty or new {option}")


def check_apart(folder: str | os.PathLike, places: list[tuple[str, str]], *, option: str = "--report",
                what: str = "report") -> None:
    """Refuse a report folder inside or around an input folder (issue 34): the report shows private
    photos and the proxy -> source links, so it may not land in the release, in a data set another
    model trains or tests on, nor inside the private state dir (whose lint then fails on the
    report's file modes).

    Args:
        folder: The report folder.
        places: ``(how messages name it, path)`` of every input (``("the release", path)``,
            ``("--state-dir", path)``, ...); paths that are not existing folders are skipped.
        option: How messages name ``folder``.
        what: What the folder holds, for the message.

    Raises:
        PfdError: ``folder`` lies inside or around one of them.
    """
    out = Path(folder).expanduser()
    for flag, spec in places:
        if not spec or not Path(spec).expanduser().is_dir():
            continue
        if path_within(out, spec) or path_within(spec, out):
            how = "inside" if path_within(out, spec) else "around"
            raise PfdError(f"{option} {out}: the {what} would lie {how} {flag} {spec}; it shows private photos and the "
                           f"proxy -> source links: choose an {option} outside every input folder")


@contextlib.contextmanager
def report_folder(path: str | os.PathLike, *, option: str = "--report", entries: frozenset[str] = REPORT_ENTRIES,
                  what: str = "pfd attack") -> Iterator[Path]:
    """Claim a report folder for one audit (see the module docstring); yields it, created.

    Args:
        path: The report folder.
        option: How messages name it.
        entries: Everything the audit writes into it (anything else makes it foreign).
        what: The command, for messages.

    Raises:
        PfdError: An existing file, a folder holding files pfd did not write, or another audit
            writing into it (its pid is named). Where it lies apart from the inputs is
            :func:`check_apart`'s, called first, before any input is read.
    """
    folder = Path(path).expanduser()
    _check(folder, option, entries, what)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = PidLock(folder / LOCK_NAME, busy=f"{folder}: another {what} (pid {{pid}}) is writing its report "
                                            f"here; wait for it to finish or choose another {option}")
    failed = True
    try:
        _check(folder, option, entries, what)  # again, now that no other audit writes here
        yield folder
        failed = False
    finally:
        lock.release()
        if failed and created:  # a run that stopped before writing anything leaves no empty folder behind
            with contextlib.suppress(OSError):
                (folder / LOCK_NAME).unlink()
                folder.rmdir()
