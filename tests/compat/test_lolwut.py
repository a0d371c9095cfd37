"""LOLWUT against redis-server: the version line, Schotter's first two rows (the part of the art that is not random)
pixel for pixel, the skyline's shape, Redis's clamping of sizes and its errors, a verbatim string in RESP3."""

from __future__ import annotations

import re

import pytest
import redis

pytestmark = pytest.mark.compat

SCHOTTER = "\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. "
SKYLINE = (
    "\nDedicated to the 8 bit game developers of past and present.\n"
    "Original 8 bit image from Plaguemon by hikikomori. Redis ver. "
)


def art(r: redis.Redis, *args: object) -> tuple[str, str]:
    """LOLWUT's reply split into the art and the version it signs with."""
    text = r.execute_command("LOLWUT", *args).decode()
    body, _, version = text.rpartition("Redis ver. ")
    assert version.endswith("\n")
    return body, version[:-1]


def test_the_version_line_without_art(server):
    r = server.client()
    version = r.info("server")["redis_version"]
    for args in ((), ("5",), ("VERSION",), ("version", 7), ("VERSION", 4), ("VERSION", -1)):
        assert r.execute_command("LOLWUT", *args) == f"Redis ver. {version}\n".encode(), args


@pytest.mark.parametrize("args", [(5, 10, 2, 2), (5, 33, 4, 1), (5, 0, 0, 0), (5, 3, 2, 1), (4.9, 20, 3, 2)])
def test_schotter_s_rows_before_the_random_ones_are_redis_s(server, redis_server, args):
    """Rows 0 and 1 of squares are neither turned nor moved: the same pixels as Redis's, in the same Braille."""
    if args[0] == 4.9:
        args = ("4.9", *args[1:])  # not an integer: refused by both
        for srv in (server, redis_server):
            with pytest.raises(redis.ResponseError, match="value is not an integer or out of range"):
                srv.client().execute_command("LOLWUT", "VERSION", *args)
        return
    mine, _ = art(server.client(), "VERSION", *args)
    theirs, _ = art(redis_server.client(), "VERSION", *args)
    assert mine == theirs
    assert mine.endswith(SCHOTTER.removesuffix("Redis ver. "))


def test_schotter_by_default(server):
    body, _ = art(server.client(), "VERSION", 5)
    rows = body.removesuffix(SCHOTTER.removesuffix("Redis ver. ")).rstrip("\n").split("\n")
    assert all(len(row) == 66 for row in rows)  # 66 columns of 2 x 4 pixels each
    assert all(0x2800 <= ord(ch) <= 0x28FF for row in rows for ch in row)
    assert len(rows) == 49  # 12 squares of (132 - 4) / 8 = 16 pixels, plus 4: 196 pixel rows, 4 per text row
    assert set("".join(rows)) != {"\u2800"}


def test_the_skyline(server):
    body, _ = art(server.client(), "VERSION", 6, 30, 12)
    assert body.endswith(SKYLINE.removesuffix("Redis ver. "))
    rows = body.removesuffix(SKYLINE.removesuffix("Redis ver. ")).split("\n")
    assert len(rows) == 12
    for row in rows:
        cells = re.findall(r"\x1b\[(0;\d+;\d+m) \x1b\[0m", row)
        assert len(cells) == 30 and "".join(f"\x1b[{c} \x1b[0m" for c in cells) == row
        assert set(cells) <= {"0;30;40m", "0;90;100m", "0;37;47m", "0;97;107m"}
    # Sky above: the black front row is at most a third plus half of the canvas tall, so never in the top row.
    assert "0;30;40m" not in rows[0] and any("0;30;40m" in row for row in rows)
    body, _ = art(server.client(), "VERSION", 6, 0, 0)  # clamped to one cell, as Redis does
    assert re.fullmatch(r"\x1b\[0;\d+;\d+m \x1b\[0m\n", body.removesuffix(SKYLINE.removesuffix("Redis ver. ")) + "\n")


@pytest.mark.parametrize("args", [("VERSION", "x"), ("VERSION", 5, "x"), ("VERSION", 6, 10, "1.5")])
def test_errors_are_redis_s(server, args):
    with pytest.raises(redis.ResponseError, match="^value is not an integer or out of range$"):
        server.client().execute_command("LOLWUT", *args)


def test_a_verbatim_string_in_resp3(server):
    with server.raw() as c:
        c.command("HELLO", 3)
        reply = c.command("LOLWUT")
    assert re.fullmatch(rb"=\d+\r\ntxt:Redis ver\. [0-9.]+\n\r\n", reply)
