"""Input files for the official application-domain tasks, built to their instructions' premises.

OSWorld's own files sit on Google Drive (``rla osworld fetch`` downloads them where there is a network); the
acceptance tests build stand-ins that make each instruction true, with the libraries the evaluators read them
with (openpyxl, python-docx, python-pptx, Pillow, OpenCV, tarfile), and put them where ``desktop_env`` looks
(:func:`fill_cache`). The recipes are written out in docs/osworld.md ("Application domains"). Each is
independent of the scripted solution: where the evaluator compares with a number, the premise's arithmetic
is checked here (:data:`EXPECTED`), not by the application.
"""

from __future__ import annotations

import datetime
import io
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rla_core.envs.osworld.tasks import needed_files, task_cache

CALC = "libreoffice_calc/357ef137-7eeb-4c80-a3bb-0951f26a8aff"
CALC_GOLD = "libreoffice_calc/01b269ae-2111-4a07-81fd-3fcd711993b0"
WRITER = "libreoffice_writer/0e763496-b6bb-4508-a427-fad0b6c3e195"
IMPRESS = "libreoffice_impress/ce88f674-ab7a-43da-9201-468d38539e4a"
GIMP = "gimp/77b8ab4d-994f-43ac-8930-8ca087d7c4b4"
VLC = "vlc/59f21cfb-0120-4326-b255-a5b827b38967"
THUNDERBIRD = "thunderbird/12086550-11c0-466b-b367-1d9e75b3910e"
MULTI_APPS = "multi_apps/2b9493d7-49b8-493a-a71b-56cd1f4d6908"

DAYS, DAY_HOURS, RATE = 5, (7, 40), 5
# 357ef137's evaluator wants E3 = 191.6667 (±0.001): five days of 7:40 at 5 an hour, by plain arithmetic.
EXPECTED = {CALC: DAYS * (DAY_HOURS[0] + DAY_HOURS[1] / 60) * RATE}


def work_hours(path: Path) -> None:
    """Daily hours as times (B2:B6), their total as a time (C3, ``[h]:mm``), an hourly rate (D3) and the
    product the user got wrong by multiplying directly (E3 = C3*D3, a fraction of a day): the cell is left
    selected, as the user left it."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Sheet1"
    sheet.append(["Day", "Hours", "Total hours", "Hourly rate", "Total earned"])
    for day in ("Mon", "Tue", "Wed", "Thu", "Fri")[:DAYS]:
        sheet.append([day, datetime.time(*DAY_HOURS)])
    for row in range(2, 2 + DAYS):
        sheet[f"B{row}"].number_format = "h:mm"
    sheet["C3"], sheet["C3"].number_format = f"=SUM(B2:B{1 + DAYS})", "[h]:mm"
    sheet["D3"] = RATE
    sheet["E3"], sheet["E3"].number_format = "=C3*D3", "[h]:mm"
    sheet.sheet_view.selection[0].activeCell = sheet.sheet_view.selection[0].sqref = "E3"
    book.save(path)


LEVELS = [("Ann", "Beginner"), ("Ben", None), ("Cleo", None), ("Dev", "Advanced"), ("Eli", None)]


def blank_levels(path: Path) -> None:
    """Students and their levels, some level cells blank (they mean "as above"); the first blank cell is
    selected, as the user left it."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Sheet1"
    sheet.append(["Student", "Level"])
    for row in LEVELS:
        sheet.append(list(row))
    sheet.sheet_view.selection[0].activeCell = sheet.sheet_view.selection[0].sqref = "B3"
    book.save(path)


def filled_levels(path: Path) -> None:
    """The expected sheet, computed apart from any application: the same rows, each blank level filled from the
    one above by pandas (``ffill``), written by openpyxl."""
    import openpyxl
    import pandas as pd

    frame = pd.DataFrame(LEVELS, columns=["Student", "Level"]).ffill()
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Sheet1"
    sheet.append(list(frame.columns))
    for row in frame.itertuples(index=False):
        sheet.append(list(row))
    book.save(path)


def zoo_text(path: Path) -> None:
    """Three paragraphs whose runs are all set in another font (Courier New)."""
    import docx

    document = docx.Document()
    for text in (
        "Dublin Zoo",
        "Dublin Zoo is a zoo in Phoenix Park, Dublin, opened in 1831.",
        "It is one of the oldest zoos in Europe.",
    ):
        document.add_paragraph().add_run(text).font.name = "Courier New"
    document.save(path)


def landscape_slides(path: Path) -> None:
    """Two titled slides in python-pptx's default 10 x 7.5 in page: sideways."""
    from pptx import Presentation

    deck = Presentation()
    for title in ("AM Last Page", "Template"):
        deck.slides.add_slide(deck.slide_layouts[1]).shapes.title.text = title
    deck.save(path)


def river_photo(path: Path) -> None:
    """A 640x400 JPEG landscape: sky, a meadow, a river."""
    from PIL import Image, ImageDraw

    photo = Image.new("RGB", (640, 400), (120, 170, 220))
    draw = ImageDraw.Draw(photo)
    draw.polygon([(0, 260), (640, 220), (640, 400), (0, 400)], fill=(60, 120, 60))
    draw.polygon([(250, 400), (330, 230), (360, 230), (420, 400)], fill=(40, 90, 180))
    photo.save(path, quality=90)


def music_video(path: Path) -> None:
    """A 10 s MPEG-4 video (320x240, 25 fps, a counter on a changing background)."""
    import cv2
    import numpy as np

    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 25, (320, 240))
    for i in range(250):
        frame = np.zeros((240, 320, 3), np.uint8)
        frame[:, :, 2] = (i * 5) % 256
        cv2.putText(frame, str(i), (100, 130), cv2.FONT_HERSHEY_SIMPLEX, 2, (255, 255, 255), 3)
        out.write(frame)
    out.release()


# Thunderbird keeps one profile per installation, keyed by a hash of its directory: /usr/lib/thunderbird gives
# FDC34C9F024745EB (Debian's, as Ubuntu's deb). Without this key it makes a new empty profile beside ours.
THUNDERBIRD_INSTALL = "FDC34C9F024745EB"
PROFILE = "t5q2a5hp.default-release"
PREFS = {
    "mail.accountmanager.accounts": '"account2,account1"',
    "mail.accountmanager.defaultaccount": '"account2"',
    "mail.accountmanager.localfoldersserver": '"server1"',
    "mail.account.account1.server": '"server1"',
    "mail.server.server1.type": '"none"',
    "mail.server.server1.hostname": '"Local Folders"',
    "mail.server.server1.name": '"Local Folders"',
    "mail.server.server1.userName": '"nobody"',
    "mail.server.server1.directory-rel": '"[ProfD]Mail/Local Folders"',
    "mail.account.account2.identities": '"id1"',
    "mail.account.account2.server": '"server2"',
    "mail.identity.id1.fullName": '"Anonym Tester"',
    "mail.identity.id1.useremail": '"anonym-x2024@outlook.com"',
    "mail.identity.id1.valid": "true",
    "mail.server.server2.type": '"pop3"',
    "mail.server.server2.hostname": '"pop.outlook.invalid"',
    "mail.server.server2.name": '"anonym-x2024@outlook.com"',
    "mail.server.server2.userName": '"anonym-x2024@outlook.com"',
    "mail.server.server2.directory-rel": '"[ProfD]Mail/pop.outlook.invalid"',
    "mail.server.server2.login_at_startup": "false",
    "mail.server.server2.check_new_mail": "false",
    "mail.server.server2.deferred_to_account": '"account1"',
    # a profile that has been used: no default-client question, rights bar, what's-new or donation page (the
    # last two are web pages: "Server Not Found" tabs here, opened at a moment that varies)
    "mail.shell.checkDefaultClient": "false",
    "mail.rights.version": "1",
    "mailnews.start_page_override.mstone": '"ignore"',
    "app.donation.eoy.version.viewed": "999",
    "datareporting.policy.dataSubmissionPolicyBypassNotification": "true",
    # menus, panels and scrolling happen at once, not animated under an observation
    "ui.prefersReducedMotion": "1",
    "general.smoothScroll": "false",
}


def thunderbird_profile(path: Path) -> None:
    """``~/.thunderbird`` as a ``.tar.gz``: one profile with a mail account (offline: no login, no check) and
    Local Folders, the default of this installation (so Thunderbird opens it, not its account wizard)."""
    files = {
        ".thunderbird/profiles.ini": f"[Profile0]\nName=default-release\nIsRelative=1\nPath={PROFILE}\nDefault=1\n\n"
        f"[General]\nStartWithLastProfile=1\nVersion=2\n\n[Install{THUNDERBIRD_INSTALL}]\nDefault={PROFILE}\nLocked=1\n",
        ".thunderbird/installs.ini": f"[{THUNDERBIRD_INSTALL}]\nDefault={PROFILE}\nLocked=1\n",
        f".thunderbird/{PROFILE}/prefs.js": "".join(f'user_pref("{k}", {v});\n' for k, v in PREFS.items()),
        f".thunderbird/{PROFILE}/Mail/Local Folders/Inbox": "",
        f".thunderbird/{PROFILE}/Mail/Local Folders/Trash": "",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))


def big_document(path: Path) -> None:
    """A Word document for Writer to hold open (the task's premise is only that Writer has it)."""
    import docx

    document = docx.Document()
    document.add_heading("Quarterly report", level=1)
    for i in range(20):
        document.add_paragraph(f"Paragraph {i}: the figures of the quarter, line by line.")
    document.save(path)


# Each file a task downloads, by its plain name (the set-up path's basename, or the getter's ``dest``).
RECIPES: dict[str, Callable[[Path], None]] = {
    "Multiply_Time_Number.xlsx": work_hours,
    "Student_Level_Fill_Blank.xlsx": blank_levels,
    "Student_Level_Fill_Blank_gold.xlsx": filled_levels,
    "Dublin_Zoo_Intro.docx": zoo_text,
    "AM_Last_Page_Template.pptx": landscape_slides,
    "The_Lost_River_Of_Dreams.jpg": river_photo,
    "Rick Astley - Never Gonna Give You Up (Official Music Video).mp4": music_video,
    "thunderbird-profile.tar.gz": thunderbird_profile,
    "15-MB-docx-file-download.docx": big_document,
}
_SET_UP_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}_(.+)")


def fill_cache(cache_dir: Path, tasks: list[dict[str, Any]]) -> None:
    """Every file ``tasks`` download, built by its recipe, at the names ``desktop_env`` reads
    (``<uuid5(url)>_<name>`` for a set-up file, ``<dest>`` for a getter's)."""
    for task in tasks:
        for _field, _url, name in needed_files(task):
            plain = match.group(1) if (match := _SET_UP_NAME.fullmatch(name)) else name
            target = task_cache(cache_dir, task) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            RECIPES[plain](target)
